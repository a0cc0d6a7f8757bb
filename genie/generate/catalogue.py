"""Every file of a generated project, with one line saying what it is for (pure)."""

from __future__ import annotations

from genie.generate.archive import ARCHIVE
from genie.generate.launch import needs_network_script
from genie.i18n import Translations, translations
from genie.registry import FRAMEWORKS, MODULES, TASKS, Module
from genie.spec import Spec
from genie.spec.answers import ANSWERS_FILE

EXECUTABLE = ("launch/single_node.sh", "launch/multi_node.sh", "launch/slurm.sbatch")


def framework_title(spec: Spec, tr: Translations | None = None) -> str:
    """What trains the project, in words (the README and genie's file list say it), in
    genie's language or ``tr``'s."""
    gettext = translations().gettext if tr is None else tr.gettext
    framework = FRAMEWORKS[spec.framework]
    return gettext(
        framework.fsdp_title if spec.sharded and framework.fsdp_title else framework.title
    )


def project_modules(spec: Spec) -> list[Module]:
    """The project's modules besides train.py, model.py and data.py, in the order listed."""
    modules = [MODULES[name] for name in FRAMEWORKS[spec.framework].modules]
    language_model = TASKS[spec.task].language_model
    return [
        m
        for m in modules
        if (spec.sharded or not m.sharded) and (language_model or not m.language_model)
    ]


def project_files(spec: Spec, tr: Translations | None = None) -> list[tuple[str, str]]:
    """Every file of the project, with one line saying what it is for: in genie's language, or
    ``tr``'s (a README's)."""
    gettext = translations().gettext if tr is None else tr.gettext
    files = [
        (
            "train.py",
            gettext("training with {f}: setup, loop, checkpoints, resume").format(
                f=framework_title(spec, tr)
            ),
        ),
        ("model.py", gettext("the model; replace it with yours")),
        ("data.py", gettext("the dataset; replace it with yours")),
    ]
    files += [(m.name, gettext(m.purpose)) for m in project_modules(spec)]
    return files + _launch_files(spec, tr) + _project_files(spec, tr)


def _launch_files(spec: Spec, tr: Translations | None) -> list[tuple[str, str]]:
    gettext = translations().gettext if tr is None else tr.gettext
    torchrun = FRAMEWORKS[spec.framework].torchrun
    files = [
        (
            "launch/single_node.sh",
            gettext("torchrun on this machine") if torchrun else gettext("python on this machine"),
        )
    ]
    if spec.multi_node_script:
        files.append(("launch/multi_node.sh", gettext("torchrun on each node: pass its NODE_RANK")))
        files.append(
            ("launch/preflight.py", gettext("checks every node before the job: --preflight"))
        )
    if needs_network_script(spec):
        files.append(("launch/network.sh", gettext("finds each node's own address and interface")))
    if spec.scheduler == "slurm":
        files.append(
            ("launch/slurm.sbatch", gettext("the SLURM batch job: sbatch launch/slurm.sbatch"))
        )
    if spec.scheduler == "kubernetes":
        files.append(
            ("launch/pytorchjob.yaml", gettext("Kubeflow PyTorchJob (training operator v1)"))
        )
        files.append(
            ("launch/trainjob.yaml", gettext("Kubeflow Trainer v2 TrainJob (torch-distributed)"))
        )
        files.append(
            ("launch/volume.yaml", gettext("the run's volume: checkpoints outlive the pods"))
        )
        files.append(
            ("Dockerfile", gettext("the image the pods run: the project and its requirements"))
        )
        files.append((".dockerignore", gettext("keeps checkpoints and caches out of the image")))
    return files


def _project_files(spec: Spec, tr: Translations | None) -> list[tuple[str, str]]:
    gettext = translations().gettext if tr is None else tr.gettext
    torch = spec.torch
    return [
        ("tests/test_smoke.py", gettext("pytest: 2-process CPU training, checkpoints, resume")),
        ("pytest.ini", gettext("pytest settings: this directory is the rootdir wherever it sits")),
        (
            "requirements-torch.txt",
            gettext("torch {v}: its release line, the cluster's").format(v=torch),
        ),
        (
            "requirements.txt",
            gettext("the other dependencies: version ranges known to work with torch {v}").format(
                v=torch
            ),
        ),
        ("requirements-test.txt", gettext("pytest, for tests/ (training does not need it)")),
        ("README.md", gettext("how to run and adapt the project")),
        *([("README.zh-CN.md", gettext("README.md in Chinese"))] if spec.docs_lang == "zh" else []),
        (".gitignore", gettext("keeps checkpoints and caches out of git")),
        (ANSWERS_FILE, gettext("the answers genie used; regenerate with --answers")),
        (ARCHIVE, gettext("the files as genie wrote them: genie upgrade merges against them")),
    ]

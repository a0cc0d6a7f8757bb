"""Spec -> project files (planning), and writing them safely (doing).

:func:`render` is free of side effects outside a private temp dir: it runs cookiecutter on
the template with the spec as a private context variable (cookiecutter renders its public
string variables as Jinja, so no user text may go there), formats the Python files with
black and returns the files as bytes. :func:`write_project` puts them on disk without ever
deleting or overwriting a file genie did not generate.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from genie import __version__, compat, contract, launch, scratch
from genie.answers import dump_answers, load_answers
from genie.errors import GenieError
from genie.i18n import N_, Translations, _, translations
from genie.registry import FRAMEWORKS, TASKS
from genie.spec import Spec

ANSWERS_FILE = ".genie.yml"
# Test-only: with GENIE_TEST_PAUSE_AT set to one of these, genie stops there (after saying so
# on stderr) so that a test can kill it at that point.
PAUSE_POINTS = ("render", "staging", "rename", "replace")
STAGING_PREFIX = ".{name}.genie-"


def _pause_point(name: str) -> None:
    if os.environ.get("GENIE_TEST_PAUSE_AT") == name:
        sys.stderr.write(f"GENIE_TEST_PAUSED {name}\n")
        sys.stderr.flush()
        time.sleep(3600)


def framework_title(spec: Spec, tr: Translations | None = None) -> str:
    """What trains the project, in words (the README and genie's file list say it), in
    genie's language or ``tr``'s."""
    gettext = translations().gettext if tr is None else tr.gettext
    framework = FRAMEWORKS[spec.framework]
    return gettext(
        framework.fsdp_title
        if spec.strategy == "fsdp" and framework.fsdp_title
        else framework.title
    )


MODULE_PURPOSES = {
    "config.py": N_("command-line options and their defaults"),
    "fsdp.py": N_("sharding the model with FSDP"),
    "dist_utils.py": N_("process group, timeout, seeding, decisions all ranks share"),
    "checkpoint.py": N_("atomic checkpoints and resume (model, optimizer, RNG, position)"),
    "optim.py": N_("optimizer, warmup + cosine LR schedule, loss scaler"),
    "evaluation.py": N_("held-out split and validation exact across ranks"),
    "tracking.py": N_("logging, progress and the experiment tracker (rank 0)"),
    "smoke_check.py": N_("what genie reads to judge a --smoke run"),
}
EXECUTABLE = ("launch/single_node.sh", "launch/multi_node.sh", "launch/slurm.sbatch")


def template_root() -> Path:
    """The cookiecutter template: inside the installed package, or at the repository root."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "templates" / "project", here.parent / "templates" / "project"):
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    raise RuntimeError(f"genie's templates are missing next to {here}; reinstall genie")


def project_files(spec: Spec, tr: Translations | None = None) -> list[tuple[str, str]]:
    """Every file of the project, with one line saying what it is for: in genie's language, or
    ``tr``'s (a README's)."""
    gettext = translations().gettext if tr is None else tr.gettext
    framework = FRAMEWORKS[spec.framework]
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
    modules = list(framework.modules)
    if spec.strategy == "fsdp" and spec.framework == "ddp":
        modules.insert(0, "fsdp.py")
    files += [(name, gettext(MODULE_PURPOSES[name])) for name in modules]
    files.append(
        (
            "launch/single_node.sh",
            (
                gettext("torchrun on this machine")
                if framework.torchrun
                else gettext("python on this machine")
            ),
        )
    )
    if spec.multi_node:
        files.append(("launch/multi_node.sh", gettext("torchrun on each node: pass its NODE_RANK")))
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
    files += [
        ("tests/test_smoke.py", gettext("pytest: 2-process CPU training, checkpoints, resume")),
        ("pytest.ini", gettext("pytest settings: this directory is the rootdir wherever it sits")),
        ("requirements.txt", gettext("pinned dependencies for torch {v}").format(v=spec.torch)),
        ("README.md", gettext("how to run and adapt the project")),
        *([("README.zh-CN.md", gettext("README.md in Chinese"))] if spec.docs_lang == "zh" else []),
        (".gitignore", gettext("keeps checkpoints and caches out of git")),
        (ANSWERS_FILE, gettext("the answers genie used; regenerate with --answers")),
    ]
    return files


def context(spec: Spec) -> dict[str, Any]:
    """Everything the templates see, computed once from the spec."""
    return {
        **asdict(spec),  # fields that do not apply are None
        "genie_version": __version__,
        "marker": contract.MARKER,
        "features": compat.features(spec.torch),
        "libs": compat.library_features(spec.torch, spec.python),
        "requirements": compat.requirements(
            spec.torch, spec.python, spec.framework, spec.task, spec.tracker
        ),
        **_texts(spec, translations("en")),  # README.md
        "zh": _texts(spec, translations("zh")) if spec.docs_lang == "zh" else None,
        "wrapper": "FSDP" if spec.strategy == "fsdp" else FRAMEWORKS[spec.framework].wrapper,
        "world_size": spec.world_size,
        "global_batch": spec.global_batch,
        "max_restarts": launch.ELASTIC_MAX_RESTARTS,
        "slurm_port_base": launch.SLURM_PORT_BASE,
        "launch": {
            "single_node": launch.shell_join(launch.single_node_args(spec)),
            "multi_node": (
                launch.shell_join(launch.multi_node_args(spec)) if spec.multi_node else None
            ),
            "slurm": launch.shell_join(launch.slurm_args(spec)),
            "sbatch": launch.sbatch_directives(spec),
        },
        "manifests": _manifests(spec) if spec.scheduler == "kubernetes" else None,
    }


def _texts(spec: Spec, tr: Translations) -> dict[str, Any]:
    """What a README says in words, in ``tr``'s language."""
    return {
        "framework_title": framework_title(spec, tr),
        "task_title": tr.gettext(TASKS[spec.task].title),
        # why this project's FSDP cannot run on CPU (its own tests skip there), or None
        "fsdp_gpu_only": (
            compat.fsdp_needs_gpus(spec.framework, spec.torch, tr)
            if spec.strategy == "fsdp"
            else None
        ),
        "commands": [
            {"where": c.where, "script": c.script, "shell": launch.shell_join(c.argv)}
            for c in launch.commands(spec, tr)
        ],
        "files": project_files(spec, tr),
    }


def _manifests(spec: Spec) -> dict[str, str]:
    """The Kubeflow manifests as YAML text, each with a header saying how to use it."""
    shape = f"{spec.nodes} node(s) x {spec.processes_per_node} process(es)"
    image = (
        f"The image ({spec.image}) must hold this folder at {launch.K8S_WORKDIR} with "
        "requirements.txt installed; set it with genie's --image."
    )
    checked = (
        "genie validated this manifest against the CRD schema; it did not run it on a cluster."
    )
    return {
        "pytorchjob": launch.manifest_text(launch.pytorchjob(spec), "\n".join([
            f"Kubeflow training operator PyTorchJob (kubeflow.org/v1): {shape}.",
            image, "Submit: kubectl apply -f launch/pytorchjob.yaml", checked])),
        "trainjob": launch.manifest_text(launch.trainjob(spec), "\n".join([
            f"Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1), torch-distributed "
            f"runtime: {shape}.", image, "Submit: kubectl apply -f launch/trainjob.yaml",
            checked])),
    }  # fmt: skip


def render(spec: Spec) -> dict[str, bytes]:
    """Render the project in memory: relative path -> content, formatted and ready to write."""
    import black
    from cookiecutter.main import cookiecutter

    wanted = [path for path, _what in project_files(spec) if path != ANSWERS_FILE]
    files: dict[str, bytes] = {}
    with scratch.directory("render") as tmp:
        config = Path(tmp, "cookiecutter.yml")
        # Keep cookiecutter's replay files and clone cache out of the user's home.
        config.write_text(f"replay_dir: {tmp}/replay\ncookiecutters_dir: {tmp}/cache\n")
        out = cookiecutter(
            str(template_root()),
            no_input=True,
            extra_context={"_genie": context(spec)},
            output_dir=str(Path(tmp, "out")),
            config_file=str(config),
            accept_hooks=False,
        )
        _pause_point("render")
        for path in wanted:
            text = Path(out, path).read_text(encoding="utf-8")
            if path.endswith(".py"):
                text = black.format_str(text, mode=black.Mode())
            files[path] = text.encode("utf-8")
    files[ANSWERS_FILE] = dump_answers(spec).encode("utf-8") + _manifest(files)
    return files


def _manifest(files: dict[str, bytes]) -> bytes:
    """Hashes of the generated files, so a later --force knows which ones the user changed."""
    lines = ["files:  # sha256 of each file as genie wrote it"]
    lines += [f'  "{path}": {hashlib.sha256(data).hexdigest()}' for path, data in files.items()]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _previous_run(target: Path) -> dict[str, Any] | None:
    """The answers file a previous genie run left in ``target``, or None if there is none
    (or the file there is not genie's)."""
    path = target / ANSWERS_FILE
    if not path.is_file():
        return None
    try:
        answers = load_answers(path)
    except GenieError:
        return None
    return answers if "genie_version" in answers else None


def check_target(target: Path, force: bool) -> bool:
    """Refuse a target genie may not write to; True when it already holds files."""
    if target.exists() and not target.is_dir():
        raise GenieError(_("{t} exists and is not a directory; pick another path").format(t=target))
    if not target.is_dir() or not any(target.iterdir()):
        return False
    if not force:
        raise GenieError(
            _(
                "{t} is not empty; pick a new directory, or pass --force to add genie's files "
                "(genie never deletes or overwrites files it did not write)"
            ).format(t=target)
        )
    return True


def _check_overwrites(target: Path, files: dict[str, bytes]) -> None:
    """Refuse to replace any file that genie did not write, or that was changed since."""
    previous = _previous_run(target)
    recorded = previous.get("files") if previous else None
    generated = {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}
    blocked = []
    for path, data in files.items():
        existing = target / path
        if not existing.exists() or (path == ANSWERS_FILE and previous is not None):
            continue
        if not existing.is_file():
            blocked.append(path)
            continue
        current = hashlib.sha256(existing.read_bytes()).hexdigest()
        if current != hashlib.sha256(data).hexdigest() and generated.get(path) != current:
            blocked.append(path)
    if blocked:
        raise GenieError(
            _("--force will not overwrite files genie did not write (or you changed): {f}; "
              "move them away first").format(f=", ".join(sorted(blocked)))
        )  # fmt: skip


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_stale_staging(target: Path) -> None:
    """Staging directories that a killed genie left next to ``target`` (their pid is gone)."""
    prefix = STAGING_PREFIX.format(name=target.name)
    for stale in target.parent.glob(prefix + "*"):
        pid = stale.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def write_project(target: Path, files: dict[str, bytes], force: bool = False) -> None:
    """Write ``files`` under ``target`` atomically: all of them, or (fresh target) none.

    The files are written into a staging directory next to ``target``, which is renamed into
    place in one step. With ``--force`` into a populated directory each file is replaced in
    one step and the answers file (with the hashes) last, so a run killed half way leaves
    whole files and a later ``--force`` finishes the job."""
    target = target.absolute()
    if check_target(target, force):
        _check_overwrites(target, files)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(target)
    prefix = STAGING_PREFIX.format(name=target.name) + f"{os.getpid()}-"
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the project should not be
    try:
        for i, (path, data) in enumerate(files.items()):
            dest = staging / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            if path in EXECUTABLE:
                dest.chmod(0o755)
            if i == len(files) // 2:
                _pause_point("staging")
        _sync_tree(staging)
        _pause_point("rename")
        if not target.exists():
            os.rename(staging, target)
            _fsync_dir(target.parent)
            return
        if not any(target.iterdir()):
            target.rmdir()
            os.rename(staging, target)
            _fsync_dir(target.parent)
            return
        # --force into a populated directory: replace file by file, answers file last.
        for i, path in enumerate(sorted(files, key=lambda p: p == ANSWERS_FILE)):
            dest = target / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / path, dest)
            if i == len(files) // 2:
                _pause_point("replace")
        _fsync_dir(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _sync_tree(root: Path) -> None:
    """Every file and directory under ``root`` on disk before the rename publishes them."""
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        else:
            _fsync_dir(path)
    _fsync_dir(root)

"""The edits users make to a generated project, and an "older genie" to upgrade from: the data
of tests/test_upgrade.py and bench/upgrade.py.

The older genie is today's templates with :data:`OLDER` patched in (each pair: today's text,
the older genie's text), rendered with the current engine. Every edit is a function of the
project's files (path -> bytes) that applies to the older rendering and to today's alike, so
the right result of an upgrade is known: the edit applied to today's rendering.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path
from unittest import mock

from genie.generate import engine

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"name": "proj"}  # the default project: ddp, custom task, 2 CPU processes

# (template, today's text, the older genie's text)
OLDER = [
    (  # a real change: dist_utils.shutdown() freezes what is left before the exit
        "templates/modules/dist_utils.py.j2",
        "    # What is left lives until exit: frozen, it spares the interpreter's exit a garbage\n"
        "    # collection over every object of the thousands of modules torch loads.\n"
        "    gc.freeze()\n",
        "",
    ),
    (
        "templates/partials/loop.py.j2",
        "# Micro-batches in this optimizer step: --grad-accum, or what the epoch has left",
        "# Micro-batches of this step: --grad-accum, or the rest of the epoch",
    ),
    ("templates/modules/config.py.j2", '"--seed", type=int, default={{ g.seed }}', '"--seed", type=int, default=0'),  # fmt: skip
    (
        "{{cookiecutter.project_dir}}/requirements.txt",
        "# Pinned for torch {{ g.torch }} on Python {{ g.python }} (generated",
        "# Pinned for torch {{ g.torch }} (generated",
    ),
    ("templates/readme/en.j2", "Run it after you change the code.", "Run it after each change."),  # fmt: skip
    (
        "templates/modules/checkpoint.py.j2",
        '    """Write a temp file in the same directory, fsync it, rename it over ``path``, and',
        '    """Write a temp file next to ``path``, fsync it, rename it over ``path``, and',
    ),
]


def older_templates(folder: Path) -> Path:
    """A copy of today's template with :data:`OLDER` patched in."""
    shutil.copytree(engine.template_root(), folder)
    for name, today, older in OLDER:
        path = folder / name
        text = path.read_text()
        assert text.count(today) == 1, (name, today)  # the corpus follows the templates
        path.write_text(text.replace(today, older))
    return folder


def render_with(templates: Path | None, spec) -> dict[str, bytes]:
    """genie's rendering of ``spec`` from ``templates`` (None: today's)."""
    if templates is None:
        return engine.render(spec)
    with mock.patch.object(engine, "template_root", lambda: templates):
        return engine.render(spec)


Files = dict[str, bytes]


def _sub(path: str, old: str, new: str) -> Callable[[Files], Files]:
    def edit(files: Files) -> Files:
        text = files[path].decode()
        assert text.count(old) == 1, (path, old)
        return {**files, path: text.replace(old, new).encode()}

    return edit


def _append(path: str, text: str) -> Callable[[Files], Files]:
    return lambda files: {**files, path: files[path] + text.encode()}


def _add(path: str, text: str) -> Callable[[Files], Files]:
    return lambda files: {**files, path: text.encode()}


def _delete(path: str) -> Callable[[Files], Files]:
    return lambda files: {k: v for k, v in files.items() if k != path}


def _rename(path: str, to: str) -> Callable[[Files], Files]:
    return lambda files: {**_delete(path)(files), to: files[path]}


@dataclass(frozen=True)
class Edit:
    name: str
    apply: Callable[[Files], Files]
    # it changes lines the older genie wrote otherwise (so it applies to the older project
    # only, and the upgrade leaves a conflict there)
    conflicts: bool = False


EDITS = [
    Edit("a new model in model.py", _append("model.py", "\n\nclass Wider(Classifier):\n    \"\"\"Ours: twice as wide.\"\"\"\n")),  # fmt: skip
    Edit("a changed model default", _sub("model.py", "hidden: int = 256", "hidden: int = 512")),
    Edit("a comment in model.py", _sub("model.py", "class Block(", "# our layers\nclass Block(")),
    Edit("a new dataset in data.py", _append("data.py", "\n\nclass OurData(SyntheticClassification):\n    pass\n")),  # fmt: skip
    Edit("a changed dataset size", _sub("data.py", "NUM_SAMPLES = 8192", "NUM_SAMPLES = 16384")),
    Edit("an extra metric in evaluation.py", _append("evaluation.py", "\n\ndef top5(logits, labels):\n    return (logits.topk(5).indices == labels[:, None]).any(1).float().mean()\n")),  # fmt: skip
    Edit("a changed default in config.py", _sub("config.py", '"--weight-decay", type=float, default=0.01', '"--weight-decay", type=float, default=0.05')),  # fmt: skip
    Edit("a line added to the training loop", _sub("train.py", "        run.optimizer_step()\n", "        run.optimizer_step()\n        # ours: one optimizer step done\n")),  # fmt: skip
    Edit("a comment at the top of train.py", lambda f: {**f, "train.py": b"# Copyright 2026 Us\n" + f["train.py"]}),  # fmt: skip
    Edit("a line added to checkpoint.py", _sub("checkpoint.py", "        os.fsync(f.fileno())\n", "        os.fsync(f.fileno())  # ours: durable\n")),  # fmt: skip
    Edit("a new file of their own", _add("ours/augment.py", "def augment(x):\n    return x\n")),
    Edit("a deleted test file", _delete("tests/test_smoke.py")),
    Edit("a changed requirements pin", _sub("requirements.txt", "tqdm>=4.64", "tqdm>=4.66")),
    Edit("a requirement added", _append("requirements.txt", "wandb>=0.16\n")),
    Edit("a renamed launch script", _rename("launch/single_node.sh", "launch/run_here.sh")),
    Edit("a line in .gitignore", _append(".gitignore", "data/\n")),
    Edit("a section added to the README", _append("README.md", "\n## Our notes\n\nAsk Ana.\n")),
    Edit("a changed seed default", _sub("config.py", '"--seed", type=int, default=0', '"--seed", type=int, default=7'), conflicts=True),  # fmt: skip
    Edit("the loop comment reworded", _sub("train.py", "# Micro-batches of this", "# Micro-batches (ours) of this"), conflicts=True),  # fmt: skip
    Edit("the README line reworded", _sub("README.md", "Run it after each change.", "Run it after every change, please."), conflicts=True),  # fmt: skip
    Edit("a line at the end of shutdown()", _sub("dist_utils.py", "        dist.destroy_process_group()\n", "        dist.destroy_process_group()\n    print(\"bye\")\n"), conflicts=True),  # fmt: skip
    Edit("a deleted file genie changed", _delete("requirements.txt")),
]


def changed_ranges(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """The ranges of ``a``'s lines that ``b`` changes (an insertion: an empty range)."""
    ops = SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return [(i1, i2) for tag, i1, i2, _j1, _j2 in ops if tag != "equal"]


def collide(base: bytes, ours: bytes, theirs: bytes) -> bool:
    """Whether the user's and genie's changes to one file touch the same or adjacent lines
    (no unchanged line between them): the only place a conflict may be."""
    lines = [data.decode().splitlines(keepends=True) for data in (base, ours, theirs)]
    mine, genies = changed_ranges(lines[0], lines[1]), changed_ranges(lines[0], lines[2])
    return any(a1 <= b2 and b1 <= a2 for a1, a2 in mine for b1, b2 in genies)

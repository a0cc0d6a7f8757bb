"""genie convert follows a script into its own modules: where the loaders, the optimizer and
the loop live in other files of the project, those files are rewritten as ``NAME_ddp.py``
copies and the imports point there; nothing outside the project, and no original, changes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from genie.convert import convert, program, report
from genie.errors import GenieError

from .conftest import run_genie

MAIN = """\
import torch
import torch.nn as nn

import data
import engine

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader, test_loader = data.loaders(batch_size=8)
engine.fit(model, train_loader=train_loader, test_loader=test_loader, optimizer=optimizer)
"""
DATA = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def loaders(batch_size):
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    train_loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(TensorDataset(x, y), batch_size=batch_size)
    return train_loader, test_loader
"""
ENGINE = """\
import torch.nn.functional as F


def step(model, batches, optimizer):
    for x, y in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def fit(model, train_loader, test_loader, optimizer, epochs=2):
    for epoch in range(epochs):
        step(model, train_loader, optimizer)
        print(f"epoch {epoch}")
"""


def project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root / next(iter(files))


def converted(script: Path):
    source = script.read_text()
    return convert(source, script.name, program.read(script, source))


def copy_of(conversion, label: str) -> str:
    return next(c.code for m, c in conversion.modules if m.label == label)


def test_loaders_in_one_module_and_the_epoch_loop_in_another_are_split_in_copies(tmp_path):
    """The course shape (going_modular): data_setup builds the loaders, engine loops."""
    script = project(tmp_path, {"train.py": MAIN, "data.py": DATA, "engine.py": ENGINE})
    conversion = converted(script)
    assert sorted(m.label for m, _c in conversion.modules) == ["data.py", "engine.py"]
    assert not conversion.todos and not any(c.todos for _m, c in conversion.modules)
    assert "import data_ddp as data\nimport engine_ddp as engine\n" in conversion.code
    assert "model = DDP(model" in conversion.code
    data = copy_of(conversion, "data.py")
    assert data.count("sampler=DistributedSampler(") == 1  # the test loader stays whole
    engine = copy_of(conversion, "engine.py")
    assert (
        "    for epoch in range(epochs):\n        train_loader.sampler.set_epoch(epoch)" in engine
    )
    assert 'if RANK == 0:\n            print(f"epoch {epoch}")' in engine
    lines = report(conversion, "train.py", 2)
    assert "engine.py, written as engine_ddp.py (genie's copy; engine.py is not changed):" in lines
    assert any("train_loader.sampler.set_epoch(epoch) each epoch" in line for line in lines)


def test_a_loop_in_another_file_is_split_only_when_it_is_handed_a_split_loader(tmp_path):
    """The loop over ``batches`` (a parameter) is given the split loader: not a TODO. Handed
    a list of batches that nothing splits, the conversion is not called done."""
    script = project(tmp_path, {"train.py": MAIN, "data.py": DATA, "engine.py": ENGINE})
    assert "TODO" not in copy_of(converted(script), "engine.py")
    listed = MAIN.replace(
        "train_loader, test_loader = data.loaders(batch_size=8)",
        ("batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(4)]"),
    ).replace("train_loader=train_loader, test_loader=test_loader", "batches, None")
    script = project(tmp_path / "listed", {"train.py": listed, "engine.py": ENGINE})
    conversion = converted(script)
    todos = [*conversion.todos, *(t for _m, c in conversion.modules for t in c.todos)]
    assert any("not split" in t.what or "no training data" in t.what for t in todos)


PACKAGE = {
    "projects/run.py": """\
        from pkg.model import Net
        from pkg.trainer import Trainer

        if __name__ == "__main__":
            model = Net()
            Trainer(model).run()
            print(model.head.weight.sum())
        """,
    "pkg/__init__.py": "",
    "pkg/model.py": """\
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(4, 2)
                print("parameters:", sum(p.numel() for p in self.parameters()))

            def forward(self, x):
                return self.head(x)

            def configure_optimizers(self, lr):
                return torch.optim.AdamW(self.parameters(), lr=lr)
        """,
    "pkg/trainer.py": """\
        import torch
        import torch.nn.functional as F
        from torch.utils.data import DataLoader, RandomSampler, TensorDataset


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.device = "cuda" if torch.cuda.is_available() else "cpu"

            def run(self):
                model, lr = self.model, 1e-2
                optimizer = model.configure_optimizers(lr)
                data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
                sampler = RandomSampler(data, replacement=True, num_samples=int(1e10))
                loader = DataLoader(data, sampler=sampler, batch_size=8)
                for step, (x, y) in enumerate(loader):
                    optimizer.zero_grad()
                    F.cross_entropy(model(x), y).backward()
                    optimizer.step()
                    if step == 10:
                        break
        """,
}


def test_a_trainer_class_in_an_installed_package_wraps_the_model_its_own_method_optimizes(
    tmp_path, monkeypatch
):
    """minGPT's shape: the model's configure_optimizers() in one file of the package, the
    Trainer's loop and sampler in another, the script in projects/."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # pip install -e .
    script = project(tmp_path, PACKAGE)
    conversion = converted(script)
    assert [m.label for m, _c in conversion.modules] == ["../pkg/trainer.py"]
    assert conversion.left == ("../pkg/model.py",)  # only prints: left, and said so
    assert "from pkg.trainer_ddp import Trainer\n" in conversion.code
    assert "from pkg.model import Net\n" in conversion.code
    trainer = copy_of(conversion, "../pkg/trainer.py")
    assert (
        "model, lr = self.model, 1e-2\n        model = DDP(\n            model.to(DEVICE)"
        in trainer
    )
    assert "optimizer = unwrap(model).configure_optimizers(lr)" in trainer
    assert "num_samples=per_rank(int(1e10)),\n            generator=rank_generator()," in trainer
    assert "self.device = DEVICE" in trainer
    assert not any(c.todos for _m, c in conversion.modules) and not conversion.todos
    lines = report(conversion, "run.py", 2)
    assert any(line.startswith("../pkg/model.py: left as it is") for line in lines)


def test_without_the_package_on_its_path_the_script_holds_no_training_and_is_refused(tmp_path):
    script = project(tmp_path, PACKAGE)
    with pytest.raises(GenieError, match="no optimizer over a model's parameters found"):
        converted(script)


@pytest.mark.parametrize(
    ("line", "call", "expected"),
    [
        ("import engine", "engine.fit", "import engine_ddp as engine\n"),
        ("import engine as e", "e.fit", "import engine_ddp as e\n"),
        ("from pkg import engine", "engine.fit", "from pkg import engine_ddp as engine\n"),
        ("from pkg.engine import fit", "fit", "from pkg.engine_ddp import fit\n"),
        ("from pkg.engine import fit as go", "go", "from pkg.engine_ddp import fit as go\n"),
    ],
)
def test_every_import_form_points_at_the_copy_under_the_name_it_bound(
    tmp_path, line, call, expected
):
    where = "pkg/" if "pkg" in line else ""
    main = MAIN.replace("import engine\n", line + "\n").replace("engine.fit(", call + "(")
    files = {"train.py": main, "data.py": DATA, f"{where}engine.py": ENGINE}
    if where:
        files["pkg/__init__.py"] = ""
    conversion = converted(project(tmp_path, files))
    assert expected in conversion.code
    assert [m.label for m, _c in conversion.modules] == ["data.py", f"{where}engine.py"]
    assert "set_epoch" in copy_of(conversion, f"{where}engine.py")


def test_a_relative_import_inside_the_package_points_at_the_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    files = dict(PACKAGE)
    files["pkg/runner.py"] = (
        "from .trainer import Trainer\n\n\ndef go(model):\n    Trainer(model).run()\n"
    )
    files["projects/run.py"] = (
        files["projects/run.py"]
        .replace("from pkg.trainer import Trainer", "from pkg.runner import go")
        .replace("Trainer(model).run()", "go(model)")
    )
    conversion = converted(project(tmp_path, files))
    labels = [m.label for m, _c in conversion.modules]
    assert labels == ["../pkg/runner.py", "../pkg/trainer.py"]  # runner imports a copy
    assert "from .trainer_ddp import Trainer\n" in copy_of(conversion, "../pkg/runner.py")
    assert "from pkg.runner_ddp import go\n" in conversion.code


def test_a_dotted_import_without_a_name_of_its_own_is_a_todo(tmp_path):
    main = MAIN.replace("import engine\n", "import pkg.engine\n").replace(
        "engine.fit(", "pkg.engine.fit("
    )
    files = {"train.py": main, "data.py": DATA, "pkg/engine.py": ENGINE, "pkg/__init__.py": ""}
    conversion = converted(project(tmp_path, files))
    assert [c.what for c in conversion.todos] == [
        "import pkg.engine: import genie's copy, pkg.engine_ddp, in its place"
    ]


def test_a_package_init_that_trains_is_refused_in_one_line(tmp_path):
    main = MAIN.replace("import engine\n", "import pkg\n").replace("engine.fit(", "pkg.fit(")
    files = {"train.py": main, "data.py": DATA, "pkg/__init__.py": ENGINE}
    with pytest.raises(GenieError, match=r"^pkg/__init__.py holds training genie must change"):
        converted(project(tmp_path, files))


def test_installed_packages_and_site_packages_on_the_path_are_never_followed(tmp_path, monkeypatch):
    site = tmp_path / "venv" / "lib" / "site-packages"
    project(site, {"engine.py": ENGINE})
    monkeypatch.setenv("PYTHONPATH", str(site))
    script = project(tmp_path / "p", {"train.py": MAIN, "data.py": DATA})
    assert program.roots(script) == [script.parent]
    found = program.read(script, script.read_text())
    assert sorted(found) == ["data"]  # torch, torch.nn: not the project's; engine: installed


def test_a_module_of_the_script_that_is_already_distributed_is_refused(tmp_path):
    engine = "import torch.distributed as dist\n\ndist.init_process_group('gloo')\n" + ENGINE
    script = project(tmp_path, {"train.py": MAIN, "data.py": DATA, "engine.py": engine})
    with pytest.raises(GenieError, match=r"engine.py:3 is already distributed"):
        converted(script)


def test_genie_convert_writes_the_copies_beside_the_modules_and_never_replaces_one(tmp_path):
    script = project(tmp_path, {"train.py": MAIN, "data.py": DATA, "engine.py": ENGINE})
    originals = {p: p.read_bytes() for p in tmp_path.glob("*.py")}
    (tmp_path / "engine_ddp.py").write_text("# mine\n")
    said = run_genie("convert", script.name, "--yes", "--no-check", cwd=tmp_path)
    assert said.returncode == 2 and "engine_ddp.py exists; pass --force" in said.stderr
    assert not (tmp_path / "train_ddp.py").exists() and not (tmp_path / "data_ddp.py").exists()
    assert (tmp_path / "engine_ddp.py").read_text() == "# mine\n"
    said = run_genie("convert", script.name, "--yes", "--no-check", "--force", cwd=tmp_path)
    assert said.returncode == 0, said.stderr
    assert "genie's copy of engine.py" in said.stdout
    assert "set_epoch" in (tmp_path / "engine_ddp.py").read_text()
    assert all(p.read_bytes() == text for p, text in originals.items())


SOLVER_MAIN = """\
import os

from data_loader import get_loader
from solver import Solver

if not os.path.exists("logs"):
    os.makedirs("logs")
faces = get_loader("faces", 8)
photos = get_loader("photos", 8)
Solver(faces, photos).train_multi(20)
"""
SOLVER_DATA = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def get_loader(name, batch_size):
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    data_loader = DataLoader(data, batch_size=batch_size, shuffle=True)
    return data_loader
"""
SOLVER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Solver:
    def __init__(self, faces_loader, photos_loader):
        self.faces_loader = faces_loader
        self.photos_loader = photos_loader
        self.build_model()

    def build_model(self):
        self.D = nn.Linear(4, 2)
        self.d_optimizer = torch.optim.Adam(self.D.parameters(), 1e-3)

    def train_multi(self, num_iters):
        faces_iter = iter(self.faces_loader)
        photos_iter = iter(self.photos_loader)
        for i in range(num_iters):
            for dataset in ["faces", "photos"]:
                data_iter = faces_iter if dataset == "faces" else photos_iter
                try:
                    x, y = next(data_iter)
                except StopIteration:
                    if dataset == "faces":
                        faces_iter = iter(self.faces_loader)
                        x, y = next(faces_iter)
                    else:
                        photos_iter = iter(self.photos_loader)
                        x, y = next(photos_iter)
                loss = F.cross_entropy(self.D(x), y)
                self.d_optimizer.zero_grad()
                loss.backward()
                self.d_optimizer.step()
"""


def test_research_code_whose_solver_steps_over_next_of_loaders_a_factory_made(tmp_path):
    """StarGAN's shape: loaders from a function of another module (``get_loader``) handed to
    a Solver, whose step loop (and its loop over dataset names) takes batches with next():
    split by the loaders' DistributedSampler, the steps not sharded again, each iterator made
    anew (when one ends) in the epoch of its step, the same on every rank; no TODO."""
    files = {"main.py": SOLVER_MAIN, "data_loader.py": SOLVER_DATA, "solver.py": SOLVER}
    conversion = converted(project(tmp_path, files))
    assert not conversion.todos and not any(c.todos for _m, c in conversion.modules)
    solver = copy_of(conversion, "solver.py")
    assert "self.D = DDP(\n" in solver and "shard(" not in solver
    step = "        for i in range(num_iters):\n"
    assert step + "            self.faces_loader.sampler.set_epoch(i)\n" in solver  # re-made
    assert "            self.photos_loader.sampler.set_epoch(i)\n" in solver  # iterators
    assert "sampler=DistributedSampler(data, shuffle=True)" in copy_of(conversion, "data_loader.py")
    assert 'os.makedirs("logs", exist_ok=True)' in conversion.code
    assert conversion.split

"""The script's own modules: where the model, the optimizer, the DataLoader and the loop live
when they are not all in the script (a course's ``engine.train(...)``, minGPT's ``Trainer``).

:func:`read` follows the script's imports into the files of its own project: the script's
folder and the ``PYTHONPATH`` entries, never site-packages. :func:`facts` tells every file's
rewrite what the others hold (an optimizer built by a method of a model class in another
file, a loader built in one file whose epoch loop is in another). A module whose conversion
changes more than its prints and file writes is written as a copy, ``NAME_ddp.py`` beside
it, never over it, and the imports of the script (and of the other copies) point there.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from genie.convert import batches, loaders, model, refuse, unused
from genie.convert.base import PROGRAM, Context, Program, Rewrite, code, dotted, walk
from genie.errors import GenieError
from genie.i18n import N_, _

SUFFIX = "_ddp"


@dataclass(frozen=True)
class Local:
    """A module of the script's own project."""

    name: str  # its dotted import name: "engine", "mingpt.trainer"
    path: Path
    source: str
    label: str  # its path as the report names it, relative to the script's folder
    imports: frozenset[str] = frozenset()  # the dotted names it may import

    @property
    def copy_path(self) -> Path:
        return self.path.with_name(self.path.stem + SUFFIX + self.path.suffix)


def roots(script: Path) -> list[Path]:
    """Where ``python script.py`` finds the script's own modules: its folder, then
    ``PYTHONPATH`` (an editable install's checkout), never an installed package's folder."""
    found = [script.absolute().parent]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        path = Path(entry).absolute() if entry else None
        if path and path.is_dir() and not {"site-packages", "dist-packages"} & set(path.parts):
            found.append(path)
    return found


def _find(name: str, places: list[Path]) -> Path | None:
    parts = name.split(".")
    for root in places:
        base = root.joinpath(*parts)
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
    return None


def absolute(name: str, is_package: bool, base: str, level: int) -> str:
    """``from <level dots><base> import`` in the module ``name``, as an absolute name."""
    if not level:
        return base
    package = name if is_package else name.rpartition(".")[0]
    parent = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join([p for p in parent if p] + ([base] if base else []))


def _imported(tree: ast.Module, name: str, is_package: bool) -> list[str]:
    """Dotted names ``tree`` (the module ``name``) may import; relative ones made absolute."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = absolute(name, is_package, node.module or "", node.level)
            found += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return [n for n in found if n]


def read(script: Path, source: str) -> dict[str, Local]:
    """Every module of the script's own project that it imports, directly or through
    another: dotted name -> :class:`Local`."""
    places, folder = roots(script), script.absolute().parent
    found: dict[str, Local] = {}
    todo = [("__main__", source, False)]
    while todo:
        name, text, package = todo.pop()
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue  # converted, it would fail to parse there and say so
        imported = _imported(tree, name, package)
        if name in found:
            found[name] = dataclasses.replace(found[name], imports=frozenset(imported))
        for wanted in imported:
            path = _find(wanted, places)
            if wanted in found or path is None or path == script.absolute():
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            label = os.path.relpath(path, folder)
            found[wanted] = Local(wanted, path, text, label)
            todo.append((wanted, text, path.name == "__init__.py"))
    return found


def facts(trees: Mapping[str, cst.Module]) -> Program:
    """What every file's rewrite must know of the others (``trees``: every file's module)."""
    methods = frozenset().union(*(refuse.optimizer_methods(t) for t in trees.values()))
    functions = {k: v for t in trees.values() for k, v in batches.callables(t).items()}
    token = PROGRAM.set(Program(optimizer_methods=methods))
    try:
        # by name; ``self`` (a model class optimizing its own parameters) names no model
        models = frozenset().union(*(model.find(t).keys for t in trees.values())) - {"self"}
        built = set().union(*(loaders.find(t).train.values() for t in trees.values()))
        made = _made_by_factories(trees, built)
        names = built | set(made)
        trained = set().union(
            *(batches.fed(t, functions, names, strict=True) for t in trees.values())
        )
        params = {param for _function, param in trained}
        looped = set().union(*(loaders.epoch_loaders(t, names | params) for t in trees.values()))
    finally:
        PROGRAM.reset(token)
    if looped & (set(made) | params):  # what a factory made, or was handed, has its epochs
        looped |= set(made.values())
    given = set().union(
        *(batches.fed(t, functions, loaders.known_data(t) | names) for t in trees.values())
    )
    idle = frozenset(unused.unused(trees.values()).items())
    return Program(
        methods,
        models,
        frozenset(names),
        frozenset(looped),
        frozenset(given),
        frozenset(trained),
        idle,
    )


def _made_by_factories(trees: Mapping[str, cst.Module], names: set[str]) -> dict[str, str]:
    """Names bound to what a function of the program returns when it returns a training
    loader it built (StarGAN's ``celeba_loader = get_loader(...)``), each with that loader's
    name: split loaders too."""
    factories = {
        function.name.value: code(r.value)
        for tree in trees.values()
        for function in walk(tree)
        if isinstance(function, cst.FunctionDef)
        for r in walk(function.body)
        if isinstance(r, cst.Return) and r.value is not None and code(r.value) in names
    }
    return {
        code(node.targets[0].target): factories[dotted(node.value.func).rpartition(".")[2]]
        for tree in trees.values()
        for node in walk(tree)
        if isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.value, cst.Call)
        and dotted(node.value.func).rpartition(".")[2] in factories
    }


def copies(
    modules: Mapping[str, Local], trees: Mapping[str, cst.Module], training: set[str]
) -> set[str]:
    """The modules written as copies: those whose conversion does some of the training's
    work (``training``), and those that import one of them (else the program would hold
    two different modules of the same name, their classes different); GenieError for a
    package's ``__init__.py``, which a copy cannot replace."""
    for name in sorted(training):
        if modules[name].path.name == "__init__.py":
            raise GenieError(
                _(
                    "{m} holds training genie must change (a loader, an optimizer, a loop): "
                    "genie copies modules, not a package's __init__.py; move that code to a "
                    "module of the package"
                ).format(m=modules[name].label)
            )
    chosen = set(training)
    grew = True
    while grew:
        grew = False
        for name in trees:
            if name not in chosen and modules[name].imports & chosen:
                chosen.add(name)
                grew = True
    return chosen


class ImportRewrite(Rewrite):
    """``import engine`` -> ``import engine_ddp as engine``, ``from mingpt.trainer import
    Trainer`` -> ``from mingpt.trainer_ddp import Trainer``: the copies, under the same
    names as before."""

    def __init__(self, ctx: Context, local: Local | None, chosen: set[str]) -> None:
        super().__init__(ctx)
        self.name = local.name if local else "__main__"
        self.package = bool(local and local.path.name == "__init__.py")
        self.chosen = chosen

    def _absolute(self, node: cst.ImportFrom) -> str:
        base = dotted(node.module) if node.module else ""
        return absolute(self.name, self.package, base, len(node.relative))

    def _said(self, node: cst.CSTNode, old: str) -> None:
        self.ctx.change(
            node,
            _("imports genie's copy {c}.py instead of {m}").format(
                c=old.rpartition(".")[2] + SUFFIX, m=old
            ),
        )

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:
        names = []
        for alias in updated.names:
            old = dotted(alias.name)
            if old in self.chosen and "." in old and alias.asname is None:
                todo = N_("import {m}: import genie's copy, {m}{s}, in its place")
                self.mark_todo(original, todo, m=old, s=SUFFIX)
            elif old in self.chosen:
                bound = alias.asname.name if alias.asname else cst.Name(old)
                new = cst.AsName(name=bound)
                alias = alias.with_changes(name=_dotted(old + SUFFIX), asname=new)
                self._said(original, old)
            names.append(alias)
        return updated.with_changes(names=names)

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> cst.ImportFrom:
        base = self._absolute(original)
        if base in self.chosen and updated.module is not None:
            self._said(original, base)
            return updated.with_changes(module=_dotted(dotted(updated.module) + SUFFIX))
        if isinstance(updated.names, cst.ImportStar):
            return updated
        names = []
        for alias in updated.names:
            old = f"{base}.{dotted(alias.name)}" if base else dotted(alias.name)
            if old in self.chosen:
                bound = alias.asname.name if alias.asname else cst.Name(dotted(alias.name))
                assert isinstance(bound, cst.Name)
                alias = alias.with_changes(
                    name=cst.Name(dotted(alias.name) + SUFFIX), asname=cst.AsName(name=bound)
                )
                self._said(original, old)
            names.append(alias)
        return updated.with_changes(names=names)


def _dotted(text: str) -> cst.Name | cst.Attribute:
    node = cst.parse_expression(text)
    assert isinstance(node, (cst.Name, cst.Attribute))
    return node

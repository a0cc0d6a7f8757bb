"""Models with parameters that take no part in ``forward()``: DDP waits for a gradient of
every parameter, so without ``find_unused_parameters=True`` the step after the first fails
("Expected to have finished reduction in the prior iteration"). With it, every step pays for
a search of the graph, so genie asks for it only where a model's class holds a submodule that
nothing reached from ``forward()`` uses (an auxiliary head kept for evaluation)."""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from genie.convert.base import code, dotted, walk

# nn layers without parameters: holding one unused costs DDP nothing
PARAMETER_FREE = ("Loss", "Dropout", "ReLU", "ReLU6", "GELU", "SiLU", "ELU", "Tanh",
                  "Sigmoid", "Softmax", "LogSoftmax", "Identity", "Flatten", "Pool",
                  "Upsample", "Mish", "Hardswish", "Softplus")  # fmt: skip
# forward() reaching its submodules by a loop or by name: each may be used, genie cannot tell
DYNAMIC = ("children", "modules", "named_children", "named_modules", "_modules", "__dict__")


def _holds_parameters(value: cst.BaseExpression) -> bool:
    """``nn.Linear(...)``, ``Block(...)``, ``nn.ModuleList(...)``: a module with parameters."""
    if not isinstance(value, cst.Call):
        return False
    name = dotted(value.func).rpartition(".")[2]
    return name[:1].isupper() and not any(mark in name for mark in PARAMETER_FREE)


def unused(trees: Iterable[cst.Module]) -> dict[str, tuple[str, ...]]:
    """Class name -> its submodules (``self.aux``) that nothing reached from ``forward()``
    uses, for the classes of ``trees`` that define ``forward``."""
    found: dict[str, tuple[str, ...]] = {}
    for cls in (n for tree in trees for n in walk(tree) if isinstance(n, cst.ClassDef)):
        methods = {
            f.name.value: f for f in cls.body.body if isinstance(f, cst.FunctionDef)
        }  # fmt: skip
        if "forward" not in methods or "__init__" not in methods:
            continue
        held = [
            code(target.target)[len("self.") :]
            for node in walk(methods["__init__"])
            if isinstance(node, cst.Assign) and _holds_parameters(node.value)
            for target in node.targets
            if code(target.target).startswith("self.") and code(target.target).count(".") == 1
        ]
        used = _reached(methods)
        if used is not None and (missing := tuple(a for a in held if a not in used)):
            found[cls.name.value] = missing
    return found


def _reached(methods: dict[str, cst.FunctionDef]) -> set[str] | None:
    """The ``self.x`` names used by ``forward`` and the methods it calls; None where it
    reaches its submodules dynamically."""
    used: set[str] = set()
    todo, seen = ["forward"], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        for node in walk(methods[name]):
            if isinstance(node, cst.Attribute) and code(node.value) == "self":
                used.add(node.attr.value)
                todo.append(node.attr.value)
            elif isinstance(node, cst.Call) and dotted(node.func) in ("getattr", "setattr"):
                return None
    return None if used & set(DYNAMIC) else used


def model_class(module: cst.Module, key: str) -> str | None:
    """The class ``key`` is built from: ``model = Net(...).to(device)`` -> ``Net``."""
    for node in walk(module):
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
            continue
        if code(node.targets[0].target) != key:
            continue
        value = node.value
        while (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in ("to", "cuda", "float", "double", "half", "train")
        ):
            value = value.func.value
        if isinstance(value, cst.Call):
            return dotted(value.func).rpartition(".")[2]
    return None

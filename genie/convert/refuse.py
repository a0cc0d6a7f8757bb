"""Scripts genie will not convert: already distributed, or with nothing to distribute."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import PositionProvider

from genie.convert.base import calls, code, current, dotted, method_calls, walk
from genie.errors import GenieError
from genie.i18n import _

# (kind, mark, what it is, what to use instead); the first that matches is reported. An
# "api" mark is a name used anywhere, a "package" one a top-level import, an "import" one an
# imported dotted name (so the user's own Trainer class is not the Hugging Face one).
DISTRIBUTED = (
    ("api", "init_process_group", _("init_process_group"), _("run it with torchrun as it is")),
    ("api", "DistributedDataParallel", _("DistributedDataParallel"), _("run it with torchrun")),
    ("api", "FullyShardedDataParallel", _("FSDP"), _("run it with torchrun")),
    ("api", "fully_shard", _("FSDP"), _("run it with torchrun")),
    ("package", "accelerate", _("Hugging Face Accelerate"), _("use `accelerate launch`")),
    ("package", "lightning", _("PyTorch Lightning"), _("use Trainer(strategy='ddp')")),
    ("package", "pytorch_lightning", _("PyTorch Lightning"), _("use Trainer(strategy='ddp')")),
    ("package", "deepspeed", _("DeepSpeed"), _("use the deepspeed launcher")),
    ("import", "transformers.Trainer", _("the Hugging Face Trainer"), _("run it with torchrun")),
)


def _import_names(node: cst.CSTNode) -> set[str]:
    """The dotted names an import statement brings in (none for any other node)."""
    if isinstance(node, cst.Import):
        return {dotted(alias.name) for alias in node.names}
    if isinstance(node, cst.ImportFrom) and node.module is not None:
        source = dotted(node.module)
        if isinstance(node.names, cst.ImportStar):
            return {source}
        return {source} | {f"{source}.{dotted(alias.name)}" for alias in node.names}
    return set()


def _imported_names(module: cst.Module) -> set[str]:
    """Dotted names the script imports: ``accelerate``, ``transformers.Trainer``..."""
    return set().union(*(_import_names(node) for node in walk(module)))


def _use_names(node: cst.CSTNode) -> set[str]:
    """A name or attribute as used: its dotted form and its last part (none for any other)."""
    if not isinstance(node, (cst.Name, cst.Attribute)):
        return set()
    name = dotted(node)
    return {name, name.rsplit(".", 1)[-1]}


def _used_names(module: cst.Module) -> set[str]:
    return set().union(*(_use_names(node) for node in walk(module)))


def check(module: cst.Module, script: str, others: dict[str, cst.Module] | None = None) -> None:
    """Raise a one-line :class:`GenieError` when ``module`` (with the local modules it
    imports, ``others``: file -> module) must not be converted."""
    others = others or {}
    for name, tree in [(script, module), *others.items()]:
        distributed(tree, name)
    if not any(optimized(t) or hand_updated(t) for t in [module, *others.values()]):
        raise GenieError(
            _(
                "{s}: no optimizer over a model's parameters found (e.g. "
                "torch.optim.SGD(model.parameters())); genie converts training scripts only"
            ).format(s=script)
        )


def distributed(module: cst.Module, script: str) -> None:
    """Refuse ``module`` when it is already distributed, naming the first place that says so."""
    imported, used = _imported_names(module), _used_names(module)
    top = {name.split(".")[0] for name in imported}
    for kind, mark, what, instead in DISTRIBUTED:
        where = {"api": used, "package": top, "import": imported | used}[kind]
        if mark in where:
            raise GenieError(
                _("{s}:{n} is already distributed ({what} found); {instead}").format(
                    s=script, n=_first_line(module, kind, mark), what=what, instead=instead
                )
            )


def _first_line(module: cst.Module, kind: str, mark: str) -> int:
    """The line of the first import or name that ``mark`` of ``kind`` matched."""

    def says(node: cst.CSTNode) -> bool:
        names = _import_names(node) or (_use_names(node) if kind != "package" else set())
        if kind == "package":
            return mark in {n.split(".")[0] for n in names}
        return mark in names

    positions = cst.MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return next((positions[n].start.line for n in walk(module) if says(n)), 1)


OPTIMIZERS = (
    "SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "RMSprop", "NAdam", "RAdam",
    "LBFGS", "Rprop", "SparseAdam", "Adafactor", "Muon",
)  # fmt: skip


def optimizer_calls(node: cst.CSTNode) -> list[cst.Call]:
    """Calls below ``node`` that build an optimizer: ``torch.optim.AdamW(...)``, or one
    chosen by name, ``getattr(optim, args.optim)(...)``."""
    by_name = [
        n
        for n in walk(node)
        if isinstance(n, cst.Call)
        and isinstance(n.func, cst.Call)
        and dotted(n.func.func) == "getattr"
        and n.func.args
        and dotted(n.func.args[0].value).split(".")[-1] == "optim"
    ]
    return calls(node, *OPTIMIZERS) + by_name


def optimizer_methods(module: cst.Module) -> set[str]:
    """Methods of the script's classes that build an optimizer over their own parameters
    (nanoGPT's ``model.configure_optimizers(...)``)."""
    return {
        method.name.value
        for cls in walk(module)
        if isinstance(cls, cst.ClassDef)
        for method in walk(cls.body)
        if isinstance(method, cst.FunctionDef)
        and optimizer_calls(method)
        and any(
            code(c.func.value) == "self"  # type: ignore[attr-defined]
            for c in method_calls(method, "parameters") + method_calls(method, "named_parameters")
        )
    }


def optimized(node: cst.CSTNode, methods: set[str] | None = None) -> set[str]:
    """Models below ``node`` whose parameters an optimizer updates: ``model`` in
    ``torch.optim.SGD(model.parameters())`` or ``model.configure_optimizers()``, where
    ``methods`` (default: ``node``'s own, a module, and the program's) build optimizers."""
    if methods is None:
        methods = set(current().optimizer_methods)
        methods |= optimizer_methods(node) if isinstance(node, cst.Module) else set()
    found = set()
    for call in optimizer_calls(node):
        if call.args:
            for params in method_calls(call.args[0], "parameters"):
                assert isinstance(params.func, cst.Attribute)
                found.add(code(params.func.value))
    for name in methods:
        for call in method_calls(node, name):
            assert isinstance(call.func, cst.Attribute)
            if code(call.func.value) != "self":
                found.add(code(call.func.value))
    return found


def hand_updated(module: cst.Module) -> set[str]:
    """Models updated without an optimizer: ``for p in model.parameters(): p.data.add_(...)``
    inside a loop that calls ``backward()``."""
    found = set()
    for loop in (n for n in walk(module) if isinstance(n, (cst.For, cst.While))):
        if not method_calls(loop.body, "backward"):
            continue
        for inner in (n for n in walk(loop.body) if isinstance(n, cst.For)):
            for params in method_calls(inner.iter, "parameters"):
                assert isinstance(params.func, cst.Attribute)
                found.add(code(params.func.value))
    return found

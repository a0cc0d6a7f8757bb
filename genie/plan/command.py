"""``genie plan DIR``: each rank's predicted peak memory for the project as genie made it,
against its GPUs' memory; when it does not fit, what to change."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from genie import ui
from genie.compat.torch import FEATURES, format_minor
from genie.errors import DoesNotFit, GenieError
from genie.i18n import N_, _
from genie.plan import estimate
from genie.plan.estimate import GIB, Figures, Setup
from genie.spec.build import Spec

LABELS = {"parameters": N_("parameters"), "gradients": N_("gradients"),
          "optimizer": N_("optimizer state"), "activations": N_("activations"),
          "temporaries": N_("temporaries")}  # fmt: skip
Tracer = Callable[[list[Setup]], tuple[list[Figures | str], str]]


@dataclass
class Plan:
    figures: Figures
    memory: int | None  # bytes per GPU; None: not known, no verdict
    torch: str
    # (what changes, its figures), in the order they are offered
    suggestions: list[tuple[str, Figures]] = field(default_factory=list)
    untraced: list[tuple[str, str]] = field(default_factory=list)  # (what, why)

    @property
    def fits(self) -> bool | None:
        """None without a memory size, or where activations were not counted."""
        if self.memory is None or not self.figures.traced:
            return None
        return self.figures.total <= self.memory

    def holds(self, figures: Figures) -> bool:
        return self.memory is not None and figures.total <= self.memory

    def as_json(self) -> dict:
        spare = None if self.memory is None else self.memory - self.figures.total
        offered = [{"change": what, "flags": f.setup.flags(), **f.as_json(),
                    "fits": self.holds(f)} for what, f in self.suggestions]  # fmt: skip
        return {"torch": self.torch, "method": "traced" if self.figures.traced else "counted",
                "setup": self.figures.setup.request(), "gpu_memory": self.memory,
                "model_parameters": self.figures.model_parameters,
                "ranks": [self.figures.as_json()], "verdict": {"fits": self.fits, "spare": spare},
                "suggestions": offered,
                "not_traced": [{"change": w, "error": e} for w, e in self.untraced]}  # fmt: skip


def base_setup(spec: Spec) -> Setup:
    if spec.strategy is None:  # DataParallel: one process, no torchrun
        raise GenieError(_("genie plan covers projects launched by torchrun, not DataParallel"))
    shard = {"ddp": 1, "fsdp": spec.world_size, "hsdp": spec.nproc_per_node or 1}
    return Setup(spec.strategy, spec.world_size, shard[spec.strategy], spec.precision,
                 bool(spec.activation_checkpointing), spec.batch_size, spec.grad_accum)  # fmt: skip


def make_plan(spec: Spec, directory: Path, memory: int | None, python: str,
              argv: list[str]) -> Plan:  # fmt: skip
    base = overridden(base_setup(spec), argv)
    on_gpu = spec.gpus_per_node > 0

    def trace(setups: list[Setup]) -> tuple[list[Figures | str], str]:
        return estimate.trace(directory, python, argv, setups, on_gpu=on_gpu)

    (figures,), torch = trace([base])
    if isinstance(figures, str):
        raise GenieError(_("tracing the project's step failed: {e}").format(e=figures))
    plan = Plan(figures, memory, torch)
    if memory is None or plan.fits is not False:
        return plan
    options = estimate.changes(base, spec.nodes, spec.gpus_per_node, lambda s: allowed(spec, s))
    singles = [setup for _what, setup in options]
    combined = estimate.combine(base, singles)
    extra = [combined] if combined not in singles + [base] and allowed(spec, combined) else []
    traced, _torch = trace(singles + extra)
    whats = [what for what, _s in options] + [_("all of the above")] * len(extra)
    for what, result in zip(whats, traced, strict=True):
        if isinstance(result, str):
            plan.untraced.append((what, result))
        else:
            plan.suggestions.append((what, result))
    best = [figures] + [f for f in traced[len(singles) :] if isinstance(f, Figures)]
    labels = [_("micro-batch {m}, accumulating {a}"),
              _("all of the above, micro-batch {m}, accumulating {a}")]  # fmt: skip
    for label, full in zip(labels, best, strict=False):
        smaller = smaller_batch(full, memory, trace) if full.total > memory else None
        if smaller is not None:
            what = label.format(m=smaller.setup.batch, a=smaller.setup.accumulation)
            plan.suggestions.append((what, smaller))
    return plan


def overridden(base: Setup, argv: list[str]) -> Setup:
    """The micro-batch and precision as train.py's arguments after -- set them, judged as
    genie new judges them."""
    from genie.spec.questions import FIELD_BY_NAME

    found = {}
    for i, word in enumerate(argv):
        name, _eq, value = word.partition("=")
        key = name[2:].replace("-", "_")
        if key in ("batch_size", "precision"):
            found[key] = FIELD_BY_NAME[key].parse(value or " ".join(argv[i + 1 : i + 2]))
    batch, precision = found.get("batch_size", base.batch), found.get("precision", base.precision)
    return replace(base, batch=batch, precision=precision)  # --grad-accum stays


def smaller_batch(full: Figures, memory: int, trace: Tracer) -> Figures | None:
    """The largest smaller micro-batch that keeps the global batch and fits, traced; None
    when none does. Candidates come from activations and temporaries shrinking with the
    micro-batch (the rest does not); a traced candidate that still does not fit gives way
    to the next smaller one."""
    fixed = sum(full.sizes[c] or 0 for c in ("parameters", "gradients", "optimizer"))
    scaled = (full.sizes["activations"] or 0) + (full.sizes["temporaries"] or 0)
    tries = 3
    for m in estimate.micro_batches(full.setup):
        guess = fixed + scaled * m / full.setup.batch
        if guess + estimate.overhead(int(guess), full.overhead > 0) > memory:
            continue
        (traced,), _torch = trace([estimate.with_batch(full.setup, m)])
        tries -= 1
        if isinstance(traced, Figures) and traced.total <= memory:
            return traced
        if tries == 0:
            return None
    return None


def allowed(spec: Spec, setup: Setup) -> bool:
    """Whether genie would make this project with ``setup``: the one validation."""
    from genie import detect
    from genie.spec import build_spec

    try:
        build_spec({**spec.answers(), **setup_answers(setup)}, detect.machine())
    except GenieError:
        return False
    return True


def setup_answers(setup: Setup) -> dict[str, object]:
    """The answers of genie new that make a project run as ``setup``."""
    return {"strategy": setup.strategy, "precision": setup.precision,
            "activation_checkpointing": setup.checkpointing, "batch_size": setup.batch,
            "grad_accum": setup.accumulation}  # fmt: skip


def first_fit(plan: Plan) -> tuple[str, Figures] | None:
    """The cheapest suggestion that fits (they are offered cheapest first), or None."""
    return next(((w, f) for w, f in plan.suggestions if plan.holds(f)), None)


def gib(size: int | None) -> str:
    if size is None:
        return _("not counted")
    if size == 0:
        return "0 B"
    for unit, name in ((GIB, "GiB"), (1024**2, "MiB")):
        if size >= unit:
            return f"{size / unit:.2f} {name}"
    return f"{size / 1024:.1f} KiB"


def show(plan: Plan, spec: Spec) -> None:
    from rich.table import Table

    s = plan.figures.setup
    title = _("Peak memory per rank: {w} ranks, {st}, {p}, micro-batch {b}{ac}").format(
        w=s.world, st=s.strategy, p=s.precision, b=s.batch,
        ac=_(", activation checkpointing") if s.checkpointing else "")  # fmt: skip
    ui.console().print(title, markup=False, style="bold", soft_wrap=True)
    table = Table(show_header=False, box=None)
    for name in estimate.CATEGORIES:
        table.add_row(_(LABELS[name]), gib(plan.figures.sizes[name]))
    if spec.gpus_per_node:
        table.add_row(_("overhead"), gib(plan.figures.overhead) + " " + _("(CUDA, NCCL, "
                      "allocator: estimated)"))  # fmt: skip
    table.add_row(_("total"), gib(plan.figures.total))
    ui.console().print(table)
    how = _("traced on fake tensors, torch {t}") if plan.figures.traced else _(
        "counted from the parameters, activations left out: torch {t} has no memory tracker "
        "(torch {first} and later have)")  # fmt: skip
    first = format_minor(FEATURES["memory_trackers"])
    ui.console().print(how.format(t=plan.torch, first=first), markup=False, style="dim")
    if plan.memory is None:
        ui.warn(_("no GPU found here: pass --gpu-memory (80GiB, or a GPU such as H100) for a "
                  "verdict"))  # fmt: skip
        return
    verdict(plan)


def verdict(plan: Plan) -> None:
    """Fits or not against the GPU's memory, and each suggestion with its peak."""
    if plan.memory is None or plan.fits is None:  # counted: without activations, no verdict
        return
    left = plan.memory - plan.figures.total
    line = (_("fits in {m}: {s} to spare") if left >= 0 else _("does not fit in {m}: {s} "
            "over")).format(m=gib(plan.memory), s=gib(abs(left)))  # fmt: skip
    ui.console().print(line, markup=False, style="bold green" if left >= 0 else "bold red")
    for what, f in plan.suggestions:
        mark = "✓" if plan.holds(f) else "✗"
        ui.console().print(f"  {mark} {what}: {gib(f.total)}    {f.setup.flags()}",
                           markup=False, soft_wrap=True)  # fmt: skip
    for what, why in plan.untraced:
        line = _("  ? {w}: could not be traced here ({e})").format(w=what, e=why)
        ui.console().print(line, markup=False, style="dim", soft_wrap=True)


def plan(directory: Path, *, gpu_memory: str | None, python: str | None, as_json: bool,
         argv: list[str]) -> None:  # fmt: skip
    from genie import detect
    from genie.spec.project import load_project

    spec = load_project(directory)
    # --gpu-memory, else genie new's answer, else this machine's GPUs
    answer = gpu_memory if gpu_memory is not None else spec.gpu_memory
    if answer is not None:
        memory = estimate.parse_memory(answer)
    else:
        memory = detect.gpu_memory()
    made = make_plan(spec, directory.absolute(), memory, estimate.python_of(python), argv)
    if as_json:
        print(json.dumps(made.as_json(), indent=2))
    else:
        show(made, spec)
    if made.fits is False:
        raise DoesNotFit("")

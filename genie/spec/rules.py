"""Rules that involve several answers, each written once.

The same rules make the final check (:func:`genie.spec.build_spec`), filter the wizard's
choices (:func:`allowed`), validate its replies (:func:`problem_with`) and judge defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genie import compat
from genie.i18n import _
from genie.registry import FRAMEWORKS, SHARDED, TASKS
from genie.spec.fields import Answers, Field


@dataclass(frozen=True)
class Rule:
    """One rule that involves several answers. ``problem`` reads only the answers named in
    ``needs`` and returns what is wrong, or None. ``blames`` is the answer that gets re-asked.

    The same rules make the final check (:func:`_cross_check`), filter the wizard's choices
    (:func:`allowed`) and judge defaults (:func:`resolve`): they are written once."""

    blames: str
    needs: tuple[str, ...]
    problem: Callable[[Answers], str | None]

    def ready(self, answers: Answers) -> bool:
        return all(k in answers for k in self.needs)


def _dp_one_node(v: Answers) -> str | None:
    if not FRAMEWORKS[v["framework"]].multi_node and int(v["nodes"]) > 1:
        return _(
            "DataParallel runs in one process on one node; use --framework ddp for --nodes > 1"
        )
    return None


def _task_framework(v: Answers) -> str | None:
    task = TASKS[v["task"]]
    if task.frameworks is not None and v["framework"] not in task.frameworks:
        return task.other_frameworks
    return None


def _task_sharded(v: Answers) -> str | None:
    task = TASKS[v["task"]]
    written = task.sharded_frameworks
    if v["strategy"] in SHARDED and written is not None and v["framework"] not in written:
        return task.other_sharded
    return None


def _one_process_per_gpu(v: Answers) -> str | None:
    gpus, nproc = v["gpus_per_node"], v["nproc_per_node"]
    if gpus and nproc and nproc > gpus:
        return _("at most one process per GPU: {n} or fewer").format(n=gpus)
    return None


def _fp16_needs_gpus(v: Answers) -> str | None:
    if v["precision"] == "fp16" and not v["gpus_per_node"]:
        return _("fp16 mixed precision needs CUDA GPUs; use bf16 or fp32 on CPU")
    return None


def _hsdp_across_nodes(v: Answers) -> str | None:
    if v["strategy"] != "hsdp":
        return None
    if "hsdp" not in FRAMEWORKS[v["framework"]].strategies:
        return _("--strategy hsdp is written for --framework ddp; use --strategy fsdp here")
    if v["nodes"] < 2:
        return _(
            "hsdp shards within a node and replicates across nodes: it needs --nodes 2 or "
            "more; on one node use --strategy fsdp"
        )
    return None


def _fsdp_here(v: Answers) -> str | None:
    if v["strategy"] not in SHARDED:
        return None
    if compat.parse_minor(v["torch"]) < compat.FEATURES["fsdp"]:
        return compat.fsdp_problem(v["torch"], "fp32")
    needs_gpus = compat.fsdp_needs_gpus(v["framework"], v["torch"])
    if not v["gpus_per_node"] and needs_gpus:
        return needs_gpus + _(
            "; set --gpus-per-node, or use --framework ddp with torch {v} for FSDP on CPU"
        ).format(v=compat.format_minor(compat.FSDP_CPU_FROM))
    return None


def _fsdp_precision(v: Answers) -> str | None:
    if v["strategy"] not in SHARDED:
        return None
    return compat.fsdp_problem(v["torch"], v["precision"])


def _manifests_launch_torchrun(v: Answers) -> str | None:
    if v["scheduler"] == "kubernetes" and not FRAMEWORKS[v["framework"]].torchrun:
        return _("the Kubeflow manifests launch torchrun; use --framework ddp, or --scheduler none")
    return None


def _torch_on_python(v: Answers) -> str | None:
    return compat.python_problem(v["torch"], v["python"])


def _compile_here(v: Answers) -> str | None:
    if not v["compile"]:
        return None
    problem = compat.compile_problem(v["torch"], v["python"])
    return problem + _("; use --no-compile") if problem else None


def _libraries_exist(v: Answers) -> str | None:
    try:
        compat.requirements(v["torch"], v["python"], v["framework"], v["task"])
    except LookupError as err:
        return str(err)
    return None


# In the order the final check reports them.
RULES: tuple[Rule, ...] = (
    Rule("framework", ("framework", "nodes"), _dp_one_node),
    Rule("framework", ("task", "framework"), _task_framework),
    Rule("nproc_per_node", ("gpus_per_node", "nproc_per_node"), _one_process_per_gpu),
    Rule("precision", ("precision", "gpus_per_node"), _fp16_needs_gpus),
    Rule("strategy", ("strategy", "framework", "nodes"), _hsdp_across_nodes),
    Rule("strategy", ("task", "strategy", "framework"), _task_sharded),
    Rule("strategy", ("strategy", "torch", "framework", "gpus_per_node"), _fsdp_here),
    Rule("strategy", ("strategy", "torch", "precision"), _fsdp_precision),
    Rule("scheduler", ("scheduler", "framework"), _manifests_launch_torchrun),
    Rule("torch", ("torch", "python"), _torch_on_python),
    Rule("compile", ("compile", "torch", "python"), _compile_here),
    Rule("framework", ("torch", "python", "framework", "task"), _libraries_exist),
)


def problems(answers: Answers, only: str | None = None) -> list[tuple[Rule, str]]:
    """Every rule that the answers so far break (rules whose answers are not all in yet
    are skipped); with ``only``, just the rules that read that answer."""
    found = []
    for rule in RULES:
        if only is not None and only not in rule.needs:
            continue
        if rule.ready(answers):
            problem = rule.problem(answers)
            if problem:
                found.append((rule, problem))
    return found


def problem_with(field: Field, value: Any, answers: Answers) -> str | None:
    """What a rule says against answering ``field`` with ``value``, given the answers so
    far; None when nothing does (what the wizard validates a reply with)."""
    found = problems({**answers, field.name: value}, only=field.name)
    return found[0][1] if found else None


def allowed(field: Field, answers: Answers) -> tuple[Any, ...]:
    """The choices (or, for a yes/no answer, the values) of ``field`` that no rule rejects
    given the answers so far: what the wizard offers."""
    options: tuple[Any, ...] = (True, False) if field.kind is bool else field.choices or ()
    return tuple(c for c in options if problem_with(field, c, answers) is None)

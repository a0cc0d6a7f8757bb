"""The frozen :class:`Spec` and how answers become one. The field table is
:mod:`genie.spec.questions`, the cross-field rules :mod:`genie.spec.rules`.

Answers arrive as one raw mapping (flags over answers file over wizard); :func:`build_spec`
turns it into a :class:`Spec`. The wizard and the CLI flags are generated from
:data:`FIELDS`, and both go through :meth:`Field.parse`, so a value is judged the same way
whichever way it came in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from genie.detect import Machine
from genie.errors import GenieError, SpecError
from genie.i18n import _
from genie.registry import SHARDED
from genie.spec.fields import Answers, Field
from genie.spec.questions import FIELD_BY_NAME, FIELDS, META_KEYS
from genie.spec.rules import allowed, problem_with, problems


@dataclass(frozen=True)
class Spec:
    """A validated project description. Fields not applicable are None."""

    name: str
    nodes: int
    scheduler: str
    master_addr: str | None
    master_port: int | None
    rdzv: str | None
    gpus_per_node: int
    gpu_memory: str | None  # "80GiB" or a GPU's name; None: not known (no verdict)
    torch: str
    python: str
    task: str
    framework: str
    strategy: str | None  # None for DataParallel
    nproc_per_node: int | None  # None for DataParallel: one process
    precision: str
    batch_size: int
    grad_accum: int
    epochs: int
    lr: float
    compile: bool
    activation_checkpointing: bool | None  # None for DataParallel
    tracker: str
    seed: int
    partition: str | None  # SLURM only, and only when given
    account: str | None
    time: str | None
    image: str | None  # Kubernetes only
    storage_size: str | None
    storage_class: str | None  # None: the cluster's default storage class
    docs_lang: str  # "zh" adds README.zh-CN.md

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def multi_node_script(self) -> bool:
        """Several nodes, each started by launch/multi_node.sh (by hand or by SLURM); on
        Kubernetes the operator starts the pods and gives them the master's address."""
        return self.multi_node and self.scheduler != "kubernetes"

    @property
    def sharded(self) -> bool:
        """FSDP or HSDP: the model is sharded (fsdp.py), not replicated."""
        return self.strategy in SHARDED

    @property
    def processes_per_node(self) -> int:
        return self.nproc_per_node or 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    def warnings(self) -> list[str]:
        """What the user should know about the choices made (e.g. DataParallel is slow)."""
        answers = self.answers()
        return [
            f.warnings[answers[f.name]]
            for f in FIELDS
            if f.warnings and answers.get(f.name) in f.warnings
        ]

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size * self.grad_accum

    def answers(self) -> dict[str, Any]:
        """The applicable answers, in declaration order (what the answers file holds)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


# The wizard's hook: given a field, its default and the answers so far, return the
# user's (parsed) answer.
Ask = Callable[[Field, Any, Answers], Any]


def resolve(raw: Answers, machine: Machine, ask: Ask | None = None) -> dict[str, Any]:
    """Fill every applicable field from ``raw``, else from ``ask`` (the wizard), else its
    default, validating each one. Fields are visited in declaration order, so whether a
    field applies and what its default is can depend on the answers before it.

    Returns the values in declaration order; fields that do not apply are None."""
    unknown = sorted(set(raw) - set(FIELD_BY_NAME) - set(META_KEYS))
    if unknown:
        raise GenieError(
            _("unknown answer {keys}; known answers: {known}").format(
                keys=", ".join(repr(k) for k in unknown), known=", ".join(FIELD_BY_NAME)
            )
        )
    values: dict[str, Any] = {}
    for f in FIELDS:
        given = raw.get(f.name)
        if not f.applies(values):
            if given is not None:
                raise SpecError(f.label, given, f.not_applicable)
            values[f.name] = None
        elif given is not None:
            values[f.name] = f.parse(given)
        elif ask is not None:
            values[f.name] = ask(f, default(f, values, machine), values)
        else:
            values[f.name] = default(f, values, machine)
            if values[f.name] is None and f.no_default is not None:
                raise SpecError(f.label, *f.no_default(machine))
    return values


def default(field: Field, answers: Answers, machine: Machine) -> Any:
    """``field``'s default given the answers so far, held to the same rules as an answer:
    when the plain default breaks one, the field's nearest value that does not, else the first
    allowed choice."""
    value = field.default(answers, machine)
    if value is None or problem_with(field, value, answers) is None:
        return value
    nearest = field.nearest(value, answers) if field.nearest else None
    if nearest is not None:
        return nearest
    options = allowed(field, answers)
    return options[0] if options else value


def _cross_check(v: Mapping[str, Any]) -> None:
    """Rules that involve several answers; they run once, after every answer is in."""
    found = problems(v)
    if found:
        rule, problem = found[0]
        raise SpecError(FIELD_BY_NAME[rule.blames].label, v[rule.blames], problem)


def build_spec(raw: Answers, machine: Machine, ask: Ask | None = None) -> Spec:
    """The one way to get a :class:`Spec`: resolve defaults, validate fields, then cross-check."""
    return finish(resolve(raw, machine, ask))


def finish(values: dict[str, Any]) -> Spec:
    """Resolved values to a :class:`Spec`, after the rules that involve several answers."""
    if values["name"] is None:
        raise SpecError(FIELD_BY_NAME["name"].label, None, _("a project name is required"))
    _cross_check(values)
    return Spec(**values)

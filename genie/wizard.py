"""The interactive wizard: questionary prompts generated from :data:`genie.spec.FIELDS`.

It asks the essentials first (nodes, and for several nodes the master and rendezvous; GPUs
per node; PyTorch version; task; framework), shows the summary, then offers "Generate /
Change a setting / Customize training settings / Cancel". Everything else keeps its default
unless the user chooses to change it.

Choices are filtered by the answers already given, with the same rules the final check uses
(:func:`genie.rules.allowed`), and a reply is validated by those rules too; a problem that
still slips through (a rule about an answer asked later) re-asks the offending question
instead of exiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from genie.detect import Machine
from genie.errors import SpecError
from genie.i18n import _, ngettext
from genie.spec import build as spec_mod
from genie.spec import rules
from genie.spec.build import Spec
from genie.spec.fields import Answers, Field
from genie.spec.questions import FIELD_BY_NAME, FIELDS

# Asked before the summary; the rest is asked only under "Customize training settings".
ESSENTIALS = (
    "nodes",
    "master_addr",
    "master_port",
    "rdzv",
    "gpus_per_node",
    "torch",
    "task",
    "framework",
)
NOT_TRAINING = ("name", "docs_lang")  # offered by "Change a setting", not by "Customize"
GENERATE, CHANGE, CUSTOMIZE, CANCEL = "generate", "change", "customize", "cancel"
_MAX_REASKS = 20  # a bound on "re-ask the offending question" (each re-ask narrows a choice)

# What the machine told us, shown next to the question it informs.
_DETECTED: dict[str, Callable[[Machine], str | None]] = {
    "gpus_per_node": lambda m: ngettext("{n} GPU found here", "{n} GPUs found here", m.gpus).format(
        n=m.gpus
    ),
    "torch": lambda m: _("torch {v} installed here").format(v=m.torch) if m.torch else None,
    "python": lambda m: _("running Python {v}").format(v=m.python),
}


def _hint(field: Field, machine: Machine) -> str:
    """The question's hint (questionary puts a space after it, except for yes/no)."""
    detected = _DETECTED.get(field.name, lambda m: None)(machine)
    if detected:
        return _("({help} {detected}.)").format(help=field.help, detected=detected)
    return _("({help})").format(help=field.help)


def _validator(field: Field, answers: Answers) -> Callable[[str], Any]:
    def validate(text: str) -> Any:
        try:
            value = field.parse(text)
        except SpecError as err:
            return err.accepted
        return rules.problem_with(field, value, answers) or True

    return validate


Ask = Callable[[Field, Any, Answers], Any]


def make_ask(machine: Machine, **prompt_kwargs: Any) -> Ask:
    """An ``ask`` callback for build_spec: one question for one field. ``prompt_kwargs``
    (``input``/``output``) go to prompt_toolkit, which is how tests type into the wizard."""
    import questionary

    def ask(field: Field, default: Any, answers: Answers) -> Any:
        hint = _hint(field, machine)
        if field.kind is bool:
            offered = rules.allowed(field, answers)
            if len(offered) == 1:  # the rules leave one value: nothing to ask
                return offered[0]
            yes_no = _("(Y/n)") if default else _("(y/N)")
            # The trailing space: "(y/N) No", not "(y/N)No".
            question = questionary.confirm(
                field.question,
                default=bool(default),
                instruction=f"{hint} {yes_no} ",
                **prompt_kwargs,
            )
        elif field.choices:
            offered = rules.allowed(field, answers) or field.choices
            described = field.choice_help or {}
            question = questionary.select(
                field.question,
                choices=[
                    questionary.Choice(title, value=c, description=described.get(c))
                    for c, title in zip(offered, field.titles(offered), strict=True)
                ],
                default=default if default in offered else None,
                instruction=hint,
                **prompt_kwargs,
            )
        else:
            question = questionary.text(
                field.question,
                default="" if default is None else str(default),
                validate=_validator(field, answers),
                instruction=hint,
                **prompt_kwargs,
            )
        # unsafe_ask lets Ctrl-C (KeyboardInterrupt) and end of input (EOFError) through.
        value = field.parse(question.unsafe_ask())
        if field.warnings and value in field.warnings:
            _say("  ! " + field.warnings[value], prompt_kwargs)
        return value

    return ask


def _say(text: str, prompt_kwargs: dict[str, Any]) -> None:
    import questionary

    out = {"output": prompt_kwargs["output"]} if "output" in prompt_kwargs else {}
    questionary.print(text, style="fg:ansiyellow", **out)


class Session:
    """One run of the wizard: the answers the user gave, and how to ask for more."""

    def __init__(self, raw: Answers, machine: Machine, ask: Ask, **prompt_kwargs: Any) -> None:
        self.raw, self.machine, self.ask = raw, machine, ask
        self.prompt_kwargs = prompt_kwargs
        self.answered: dict[str, Any] = {}  # what the user answered here (flags are in raw)
        self.to_ask: set[str] = set(ESSENTIALS)  # fields to ask on the next pass
        self.reask: dict[str, str] = {}  # field -> the problem that made it be asked again

    def _hook(self, field: Field, default: Any, answers: Answers) -> Any:
        name = field.name
        if name in self.to_ask:
            self.to_ask.discard(name)
            if name in self.answered:
                default = self.answered[name]
            self.answered[name] = self.ask(field, default, answers)
        return self.answered.get(name, default)

    def values(self) -> dict[str, Any]:
        """Resolve every field, asking what is due; re-ask whatever a rule rejects."""
        for _attempt in range(_MAX_REASKS):
            values = spec_mod.resolve(self.raw, self.machine, self._hook)
            found = rules.problems(values)
            if not found:
                return values
            rule, problem = found[0]
            # Re-ask the answer the rule blames, or another it reads that the user gave here.
            askable = [n for n in (rule.blames, *rule.needs) if n not in self.raw]
            if not askable:
                break
            name = askable[0]
            _say("  ! " + problem, self.prompt_kwargs)
            context = {k: v for k, v in values.items() if k != name}
            field = FIELD_BY_NAME[name]
            self.answered[name] = self.ask(
                field, spec_mod.default(field, context, self.machine), context
            )
        spec_mod.finish(values)  # raises the problem, as --yes would
        return values

    def customize(self, values: dict[str, Any]) -> None:
        self.to_ask = {f.name for f in FIELDS if f.name not in (*ESSENTIALS, *NOT_TRAINING)}
        self.to_ask -= set(self.raw)
        for name in self.to_ask:
            if values.get(name) is not None:
                self.answered.setdefault(name, values[name])

    def changeable(self, values: dict[str, Any]) -> list[Field]:
        return [
            f
            for f in FIELDS
            if f.name != "name" and f.name not in self.raw and values.get(f.name) is not None
        ]


def run(
    raw: Answers, machine: Machine, show: Callable[[Spec], None], **prompt_kwargs: Any
) -> Spec | None:
    """The whole wizard: essentials, summary, then the menu until Generate (the spec) or
    Cancel (None). ``show`` prints the summary."""
    import questionary

    ask = make_ask(machine, **prompt_kwargs)
    session = Session(raw, machine, ask, **prompt_kwargs)
    while True:
        values = session.values()
        project = spec_mod.finish(values)
        show(project)
        action = questionary.select(
            _("Generate this project?"),
            choices=[
                questionary.Choice(_("Generate"), value=GENERATE, shortcut_key="y"),
                questionary.Choice(_("Change a setting"), value=CHANGE, shortcut_key="c"),
                questionary.Choice(
                    _("Customize training settings"), value=CUSTOMIZE, shortcut_key="t"
                ),
                questionary.Choice(_("Cancel: write nothing"), value=CANCEL, shortcut_key="n"),
            ],
            use_shortcuts=True,
            instruction=" ",
            **prompt_kwargs,
        ).unsafe_ask()
        if action == GENERATE:
            return project
        if action == CANCEL:
            return None
        if action == CUSTOMIZE:
            session.customize(values)
            continue
        fields = session.changeable(values)
        name = questionary.select(
            _("Which setting?"),
            choices=[
                questionary.Choice(f"{f.question.rstrip('?？')}: {values[f.name]}", value=f.name)
                for f in fields
            ],
            instruction=" ",
            **prompt_kwargs,
        ).unsafe_ask()
        session.to_ask = {name}

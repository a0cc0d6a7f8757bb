"""The interactive wizard: questionary prompts generated from :data:`genie.spec.FIELDS`.

It asks the essentials first (nodes, and for several nodes the master and rendezvous; GPUs
per node; PyTorch version; task; framework), shows the summary, then offers "Generate /
Change a setting / Customize training settings / Cancel". Everything else keeps its default
unless the user chooses to change it.

Choices are filtered by the answers already given, with the same rules the final check uses
(:func:`genie.rules.allowed`), and a reply is validated by those rules too; a problem that
still slips through (a rule about an answer asked later) re-asks the offending question
instead of exiting.

The back key (Esc, or Ctrl-Z; :mod:`genie.prompts`) asks the question answered last again,
with its answer as the default: the fields are resolved again from the first, and only the
questions still due are asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from genie import prompts
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
    "scheduler",
    "master_addr",
    "master_port",
    "rdzv",
    "gpus_per_node",
    "gpu_memory",
    "torch",
    "task",
    "framework",
)
NOT_TRAINING = ("name", "docs_lang")  # offered by "Change a setting", not by "Customize"
GENERATE, FIT, CHANGE, CUSTOMIZE, CANCEL = "generate", "fit", "change", "customize", "cancel"
# What the summary offers besides the menu: a line, and the answers it sets (genie plan's
# cheapest change that makes the model fit its GPUs)
Offer = tuple[str, dict[str, Any]]
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
    (``input``/``output``) go to prompt_toolkit, which is how tests type into the wizard.
    The back key raises :class:`genie.prompts.Back`; Ctrl-C KeyboardInterrupt, and the end
    of input EOFError."""

    def ask(field: Field, default: Any, answers: Answers) -> Any:
        hint = _hint(field, machine)
        if field.kind is bool:
            offered = rules.allowed(field, answers)
            if len(offered) == 1:  # the rules leave one value: nothing to ask
                return offered[0]
            yes_no = _("(Y/n)") if default else _("(y/N)")
            reply = prompts.confirm(field.question, hint, bool(default), yes_no, **prompt_kwargs)
        elif field.choices:
            offered = rules.allowed(field, answers) or field.choices
            described = field.choice_help or {}
            titles = zip(offered, field.titles(offered), strict=True)
            choices = [(c, title, described.get(c), None) for c, title in titles]
            chosen = default if default in offered else None
            reply = prompts.select(field.question, hint, choices, chosen, **prompt_kwargs)
        else:
            typed = "" if default is None else str(default)
            validate = _validator(field, answers)
            reply = prompts.text(field.question, hint, typed, validate, **prompt_kwargs)
        value = field.parse(reply)
        if field.warnings and value in field.warnings:
            _say("! " + field.warnings[value], prompt_kwargs)
        return value

    return ask


def _say(text: str, prompt_kwargs: dict[str, Any], style: str = "fg:ansiyellow") -> None:
    prompts.say(prompts.INDENT + text, style, **prompt_kwargs)


class _Restart(Exception):
    """Go through the fields again from the first: the user went back one question."""


class Session:
    """One run of the wizard: the answers the user gave, and how to ask for more."""

    def __init__(
        self, raw: dict[str, Any], machine: Machine, ask: Ask, **prompt_kwargs: Any
    ) -> None:
        self.raw, self.machine, self.ask = raw, machine, ask
        self.prompt_kwargs = prompt_kwargs
        self.answered: dict[str, Any] = {}  # what the user answered here (flags are in raw)
        self.to_ask: set[str] = set(ESSENTIALS)  # fields to ask on the next pass
        self.asked: list[str] = []  # this round's questions as answered: the back key's path

    def _hook(self, field: Field, default: Any, answers: Answers) -> Any:
        name = field.name
        if name not in self.to_ask:
            return self.answered.get(name, default)
        if name in self.answered:
            default = self.answered[name]
        while True:
            try:
                value = self.ask(field, default, answers)
                break
            except prompts.Back:
                if self.back():
                    raise _Restart from None
        self.to_ask.discard(name)  # only now: going back from here asks this one again
        self.answered[name] = value
        self.asked.append(name)
        return value

    def back(self) -> bool:
        """Ask the question answered last again, its answer the default (True), or say there
        is none (False)."""
        if not self.asked:
            _say(_("No earlier question to go back to."), self.prompt_kwargs, style="")
            return False
        self.to_ask.add(self.asked.pop())
        return True

    def _resolve(self) -> dict[str, Any]:
        while True:
            try:
                return spec_mod.resolve(self.raw, self.machine, self._hook)
            except _Restart:
                continue

    def values(self) -> dict[str, Any]:
        """Resolve every field, asking what is due; re-ask whatever a rule rejects."""
        for _attempt in range(_MAX_REASKS):
            values = self._resolve()
            found = rules.problems(values)
            if not found:
                return values
            rule, problem = found[0]
            # Re-ask the answer the rule blames, or another it reads that the user gave here.
            askable = [n for n in (rule.blames, *rule.needs) if n not in self.raw]
            if not askable:
                break
            _say("! " + problem, self.prompt_kwargs)
            self.answered[askable[0]] = self._ask_again(FIELD_BY_NAME[askable[0]], values)
        spec_mod.finish(values)  # raises the problem, as --yes would
        return values

    def _ask_again(self, field: Field, values: dict[str, Any]) -> Any:
        """The answer a rule rejected, asked alone; the back key stays on it."""
        context = {k: v for k, v in values.items() if k != field.name}
        default = spec_mod.default(field, context, self.machine)
        while True:
            try:
                return self.ask(field, default, context)
            except prompts.Back:
                _say(_("No earlier question to go back to."), self.prompt_kwargs, style="")

    def customize(self, values: dict[str, Any]) -> None:
        self.to_ask = {f.name for f in FIELDS if f.name not in (*ESSENTIALS, *NOT_TRAINING)}
        self.to_ask -= set(self.raw)
        self.asked = []  # a new round of questions: the back key goes no further
        for name in self.to_ask:
            if values.get(name) is not None:
                self.answered.setdefault(name, values[name])

    def apply(self, answers: dict[str, Any]) -> None:
        """Take ``answers`` as if the user had given them (over flags too: chosen here)."""
        for name, value in answers.items():
            if name in self.raw:
                self.raw[name] = value
            self.answered[name] = value
        self.to_ask, self.asked = set(), []

    def changeable(self, values: dict[str, Any]) -> list[Field]:
        return [
            f
            for f in FIELDS
            if f.name != "name" and f.name not in self.raw and values.get(f.name) is not None
        ]


def run(
    raw: Answers, machine: Machine, show: Callable[[Spec], Offer | None], **prompt_kwargs: Any
) -> Spec | None:
    """The whole wizard: essentials, summary, then the menu until Generate (the spec) or
    Cancel (None). ``show`` prints the summary and returns a change to offer, if any."""
    session = Session(dict(raw), machine, make_ask(machine, **prompt_kwargs), **prompt_kwargs)
    intro = _("Enter keeps the default shown; Esc goes back one question; Ctrl-C quits.")
    prompts.say(intro, "", **prompt_kwargs)
    while True:
        values = session.values()
        project = spec_mod.finish(values)
        offer = show(project)
        try:
            menu = _menu(offer[0] if offer else None)
            action = prompts.select(_("Generate this project?"), " ", menu, **prompt_kwargs)
        except prompts.Back:
            session.back()  # to the last question; the summary comes again after it
            continue
        if action in (GENERATE, CANCEL):
            return project if action == GENERATE else None
        if action == CUSTOMIZE:
            session.customize(values)
            continue
        if action == FIT and offer:
            session.apply(offer[1])
            continue
        choices = [
            (f.name, f"{f.question.rstrip('?？')}: {values[f.name]}", None, None)
            for f in session.changeable(values)
        ]
        try:
            session.to_ask = {prompts.select(_("Which setting?"), " ", choices, **prompt_kwargs)}
        except prompts.Back:
            continue  # back to the summary and its menu
        session.asked = []  # a new round of questions: the back key goes no further


def _menu(offer: str | None = None) -> list[tuple[str, str, None, str]]:
    """The summary's menu, with ``offer`` second where there is one: each letter chooses
    its entry at once."""
    fit = [(FIT, offer, None, "f")] if offer else []
    return [
        (GENERATE, _("Generate"), None, "y"),
        *fit,
        (CHANGE, _("Change a setting"), None, "c"),
        (CUSTOMIZE, _("Customize training settings"), None, "t"),
        (CANCEL, _("Cancel: write nothing"), None, "n"),
    ]

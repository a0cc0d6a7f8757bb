"""The interactive wizard: questionary prompts generated from :data:`genie.spec.FIELDS`.

It only supplies :func:`genie.spec.build_spec` with an ``ask`` callback, so it asks exactly
the fields that apply and are still missing, and every reply goes through ``Field.parse``.
"""

from __future__ import annotations

from typing import Any, Callable

from genie.detect import Machine
from genie.errors import SpecError
from genie.fields import Answers, Field
from genie.i18n import _
from genie.spec import Spec

# What the machine told us, shown next to the question it informs.
_DETECTED: dict[str, Callable[[Machine], str | None]] = {
    "gpus_per_node": lambda m: _("{n} GPU(s) found here").format(n=m.gpus),
    "torch": lambda m: _("torch {v} installed here").format(v=m.torch) if m.torch else None,
    "python": lambda m: _("running Python {v}").format(v=m.python),
}


def _hint(field: Field, machine: Machine) -> str:
    detected = _DETECTED.get(field.name, lambda m: None)(machine)
    return f"({field.help}" + (f" {detected}." if detected else "") + ")"


def _validator(field: Field) -> Callable[[str], Any]:
    def validate(text: str) -> Any:
        try:
            field.parse(text)
        except SpecError as err:
            return err.accepted
        return True

    return validate


def make_ask(machine: Machine, **prompt_kwargs: Any) -> Callable[[Field, Any, Answers], Any]:
    """An ``ask`` callback for build_spec. ``prompt_kwargs`` (``input``/``output``) go to
    prompt_toolkit, which is how tests type into the wizard."""
    import questionary

    def ask(field: Field, default: Any, answers: Answers) -> Any:
        hint = _hint(field, machine)
        if field.choices:
            offered = field.available(answers) if field.available else field.choices
            described = field.choice_help or {}
            question = questionary.select(
                field.question,
                choices=[
                    questionary.Choice(c, value=c, description=described.get(c)) for c in offered
                ],
                default=default if default in offered else None,
                instruction=hint,
                **prompt_kwargs,
            )
        elif field.kind is bool:
            question = questionary.confirm(
                field.question, default=bool(default), instruction=hint, **prompt_kwargs
            )
        else:
            question = questionary.text(
                field.question,
                default="" if default is None else str(default),
                validate=_validator(field),
                instruction=hint,
                **prompt_kwargs,
            )
        # unsafe_ask lets Ctrl-C (KeyboardInterrupt) and end of input (EOFError) through.
        value = field.parse(question.unsafe_ask())
        if field.warnings and value in field.warnings:
            questionary.print(
                "  ! " + field.warnings[value],
                style="fg:ansiyellow",
                **_print_kwargs(prompt_kwargs),
            )
        return value

    return ask


def _print_kwargs(prompt_kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"output": prompt_kwargs["output"]} if "output" in prompt_kwargs else {}


def confirm(spec: Spec, **prompt_kwargs: Any) -> bool:
    import questionary

    question = questionary.confirm(_("Generate this project?"), default=True, **prompt_kwargs)
    return bool(question.unsafe_ask())

"""The flags of ``genie new``, generated from the field table: help with the accepted values
and the default, choice completion. Values stay strings: Field.parse judges them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from genie import contract
from genie.compat import NEWEST
from genie.i18n import _
from genie.spec.fields import Field
from genie.spec.questions import FIELDS

_DEFAULTS_SHOWN = {
    "name": _("the directory's name"),
    "master_addr": _("this machine's hostname, unless it resolves to loopback here"),
    "gpus_per_node": _("the GPUs found here"),
    "gpu_memory": _("the memory of the GPUs found here, else not known"),
    "torch": _("the installed torch if supported, else {v}").format(v=NEWEST),
    "python": _("this Python, within what the torch version supports"),
    "nproc_per_node": _("the GPU count, or {n} on CPU").format(n=contract.CPU_PROCESSES),
    "precision": _("bf16 with GPUs, fp32 on CPU"),
    "scheduler": _("slurm where sbatch is installed, else none"),
    "image": _("ghcr.io/your-org/NAME:latest (build your own)"),
    "lr": _("5e-5 for the nlp task, 2e-5 for llm, else 1e-3"),
    "batch_size": _("8 for the llm task (blocks of 1024 tokens), else 32"),
}


def _default_shown(f: Field) -> str:
    if f.name in _DEFAULTS_SHOWN:
        return _DEFAULTS_SHOWN[f.name]
    value = f.default({}, None)  # type: ignore[arg-type]  # the rest are constants
    if f.kind is bool:
        return f.flag if value else "--no-" + f.flag[2:]
    return str(value)


def _completer(f: Field) -> Callable[[click.Context, click.Parameter, str], list[str]]:
    choices = f.choices or ()
    return lambda ctx, param, incomplete: [c for c in choices if c.startswith(incomplete)]


def _field_option(
    f: Field, default: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A click option for a spec field. Values stay strings: Field.parse judges them, the
    same way it judges answers files and wizard replies. ``default``: what an absent flag
    means, when not the field's default."""
    help_text = _("{help} [{accepted}; default: {default}]").format(
        help=f.help, accepted=f.accepted(), default=default or _default_shown(f)
    )
    if f.kind is bool:
        return click.option(f"{f.flag}/--no-{f.flag[2:]}", f.name, default=None, help=help_text)
    return click.option(
        f.flag,
        f.name,
        default=None,
        metavar=f.kind.__name__.upper(),
        help=help_text,
        shell_complete=_completer(f) if f.choices else None,
    )


def seconds_option(
    flag: str, default: float, help: str, name: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A time limit in seconds (at least 1), with its default shown."""
    names = (flag, name) if name else (flag,)
    return click.option(
        *names, type=click.FloatRange(min=1), default=default, show_default=True, help=help
    )


def python_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--python: the interpreter with the project's requirements."""
    return click.option(
        "--python", "python", type=click.Path(exists=True, dir_okay=False), help=help
    )


def field_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for f in reversed(FIELDS):
        func = _field_option(f)(func)
    return func


def retarget_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The field flags of ``genie upgrade``: an absent flag keeps the project's answer."""
    for f in reversed(FIELDS):
        func = _field_option(f, _("the project's answer, from .genie.yml"))(func)
    return func


def smoke_after_options(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--smoke/--no-smoke (``help`` says after what) and --smoke-timeout, for the commands
    that end with a smoke test."""

    def add(func: Callable[..., Any]) -> Callable[..., Any]:
        func = seconds_option(
            "--smoke-timeout", contract.SMOKE_TIMEOUT, _("Seconds before the smoke test is killed.")
        )(func)
        return click.option("--smoke/--no-smoke", "run_smoke_after", default=True, help=help)(func)

    return add

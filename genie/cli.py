"""genie's command line: parse, call, print. The logic lives in the modules it calls."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import click

from genie import __version__, contract
from genie.compat import NEWEST
from genie.errors import Aborted, GenieError, SmokeFailed
from genie.fields import Field
from genie.i18n import _
from genie.spec import FIELDS

TAIL_LINES = 15  # raw output lines shown after a failed smoke test's explanation
DECLINED = 1  # exit status when the user cancels at the summary (Ctrl-C is 130)


# Defaults that depend on the machine or on other answers, as --help states them.
_DEFAULTS_SHOWN = {
    "name": _("the directory's name"),
    "master_addr": _("this machine's hostname"),
    "gpus_per_node": _("the GPUs found here"),
    "torch": _("the installed torch if supported, else {v}").format(v=NEWEST),
    "python": _("this Python, within what the torch version supports"),
    "nproc_per_node": _("the GPU count, or {n} on CPU").format(n=contract.CPU_PROCESSES),
    "precision": _("bf16 with GPUs, fp32 on CPU"),
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


def _field_option(f: Field) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A click option for a spec field. Values stay strings: Field.parse judges them, the
    same way it judges answers files and wizard replies."""
    help_text = _("{help} [{accepted}; default: {default}]").format(
        help=f.help, accepted=f.accepted(), default=_default_shown(f)
    )
    if f.kind is bool:
        return click.option(f"{f.flag}/--no-{f.flag[2:]}", f.name, default=None, help=help_text)
    return click.option(
        f.flag, f.name, default=None, metavar=f.kind.__name__.upper(), help=help_text,
        shell_complete=_completer(f) if f.choices else None,
    )  # fmt: skip


def _field_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for f in reversed(FIELDS):
        func = _field_option(f)(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="genie")
def cli() -> None:
    """Answer a few questions, get a distributed PyTorch training project that runs."""


@cli.command()
@click.argument("directory", type=click.Path(path_type=Path))
@_field_options
@click.option(
    "--answers",
    "answers_file",
    type=click.Path(path_type=Path),
    help="YAML answers file; flags override it.",
)
@click.option(
    "--yes", "-y", is_flag=True, help="Ask nothing: take defaults for every missing answer."
)
@click.option(
    "--force",
    is_flag=True,
    help="Write into a non-empty directory (never replaces files genie did not write).",
)
@click.option(
    "--smoke/--no-smoke",
    "run_smoke",
    default=True,
    help="Smoke-test the project after generating it.",
)
@click.option(
    "--smoke-timeout",
    type=click.FloatRange(min=1),
    default=contract.SMOKE_TIMEOUT,
    show_default=True,
    help="Seconds before the smoke test is killed.",
)
def new(
    directory: Path,
    answers_file: Path | None,
    yes: bool,
    force: bool,
    run_smoke: bool,
    smoke_timeout: float,
    **flags: Any,
) -> None:
    """Generate a distributed training project in DIRECTORY, then smoke-test it.

    Without --yes, genie asks the essentials (nodes, GPUs, PyTorch, task, framework), shows a
    summary, then offers to generate, change a setting or customize the training settings.
    Cancelling there writes nothing and exits 1; Ctrl-C exits 130.

    Examples:

    \b
      genie new ../demo                  # a few questions, then the summary
      genie new ../demo --yes            # no questions: every default
      genie new ../big --yes --nodes 2 --master-addr 10.0.0.5 --gpus-per-node 8
    """
    from genie import answers as answers_mod
    from genie import detect, render, spec, ui

    target = directory.absolute()
    render.check_target(target, force)  # before any question is asked
    # Lowest priority first: the directory's name, then the answers file, then flags.
    raw: dict[str, Any] = {"name": target.name}
    if answers_file is not None:
        raw.update(answers_mod.load_answers(answers_file))
    raw.update({k: v for k, v in flags.items() if v is not None})
    machine = detect.machine()
    if yes:
        project = spec.build_spec(raw, machine)
        ui.summary(project, machine)
    else:
        if not sys.stdin.isatty():
            raise GenieError(
                _("no terminal to ask questions in; pass --yes (and flags or --answers)")
            )
        from genie import wizard

        chosen = wizard.run(raw, machine, show=lambda s: ui.summary(s, machine))
        if chosen is None:
            ui.info(_("Cancelled: nothing written."))
            sys.exit(DECLINED)
        project = chosen
    render.write_project(target, render.render(project), force=force)
    ui.files(str(directory), render.project_files(project))
    from genie import launch

    ui.commands(str(directory), launch.commands(project))
    if run_smoke:
        try:
            _smoke(project, target, machine, smoke_timeout, asked=False)
        except KeyboardInterrupt:
            raise Aborted(
                _(
                    "smoke test interrupted; the project was written to {d}: "
                    "run `genie smoke {d}` to test it"
                ).format(d=directory)
            ) from None


@cli.command()
@click.argument("directory", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=contract.SMOKE_TIMEOUT,
    show_default=True,
    help="Seconds before the run is killed.",
)
@click.option(
    "--python",
    "python",
    type=click.Path(exists=True, dir_okay=False),
    help="Interpreter with the project's requirements (default: the one running genie).",
)
@click.option(
    "--on",
    "where",
    type=click.Choice(["here", "slurm"]),
    default="here",
    show_default=True,
    help=_("here: this machine (several nodes are simulated); slurm: submit "
           "launch/slurm.sbatch --smoke with sbatch --wait and judge the job's output."),
)  # fmt: skip
def smoke(directory: Path, timeout: float, python: str | None, where: str) -> None:
    """Smoke-test an existing genie project: a few real training steps under torchrun."""
    from genie import detect

    project = _load_project(directory)
    if where == "slurm":
        _smoke_slurm(project, directory.absolute(), timeout, python or sys.executable)
        return
    machine = detect.machine()
    _smoke(project, directory.absolute(), machine, timeout, python or sys.executable)


def _smoke_slurm(project: Any, target: Path, timeout: float, python: str) -> None:
    from genie import smoke_slurm, ui

    ui.info(_("\nSmoke test: launch/slurm.sbatch --smoke, submitted with sbatch --wait..."))
    result = smoke_slurm.run(project, target, timeout, echo=ui.stream, python=python)
    _report(result, target)


def _report(result: Any, target: Path) -> None:
    from genie import ui

    ui.verdict(result)
    if not result.passed:
        from genie import smoke_signatures

        found = smoke_signatures.explain(result.output, result.returncode, result.timed_out)
        ui.explain(found, result.output.splitlines()[-TAIL_LINES:], str(target))
        raise SmokeFailed(_("smoke test failed: ") + "; ".join(result.problems))


def _smoke(
    project: Any,
    target: Path,
    machine: Any,
    timeout: float,
    python: str = sys.executable,
    asked: bool = True,
) -> None:
    """Run the smoke test. When this machine cannot run it: an error if the user asked for
    it (``genie smoke``), a warning after ``genie new`` (the project is written and fine)."""
    from genie import smoke as smoke_mod
    from genie import ui

    why = smoke_mod.unavailable(project, machine)
    if why is not None:
        if asked:
            raise GenieError(_("cannot smoke-test here: ") + why)
        ui.warn(_("smoke test not run: ") + why)
        return
    smoke_mod.require_packages(project, python)  # before announcing a run
    ui.info(_("\nSmoke test: a few real training steps under torchrun..."))
    result = smoke_mod.run(project, target, machine, timeout=timeout, echo=ui.stream, python=python)
    _report(result, target)


@cli.command()
@click.option(
    "--project",
    "project_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help=_("A genie project: its answers supply what the flags do not, and its pins are checked."),
)
@click.option("--master-addr", help=_("Node 0's address: it must resolve, and not to loopback."))
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    help=_("Rendezvous port (default: the project's, else 29500); must be free on the master."),
)
@click.option("--reach", is_flag=True, help=_("Also open a TCP connection to the master's port."))
@click.option(
    "--python",
    "python",
    type=click.Path(exists=True, dir_okay=False),
    help=_("Interpreter whose torch and packages are checked (default: the one running genie)."),
)
@click.option("--json", "as_json", is_flag=True, help=_("Print the checks as a JSON list."))
def doctor(
    project_dir: Path | None,
    master_addr: str | None,
    master_port: int | None,
    reach: bool,
    python: str | None,
    as_json: bool,
) -> None:
    """Check this machine for what breaks distributed training, with a fix for each problem.

    Exit status: 0 when no check fails (warnings allowed), 1 when a check fails, 2 on bad
    input.
    """
    from genie import doctor as doctor_mod
    from genie import ui

    ctx = doctor_mod.Context(master_addr=master_addr, master_port=master_port, reach=reach)
    ctx.python = python or sys.executable
    if project_dir is not None:
        ctx.spec, ctx.project_dir = _load_project(project_dir), project_dir.absolute()
    if reach and ctx.addr is None:
        raise GenieError(_("--reach needs --master-addr, or a multi-node --project"))
    results = doctor_mod.run(ctx)
    if as_json:
        import json

        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        ui.doctor(results)
    doctor_mod.ensure_passed(results)


def _load_project(directory: Path) -> Any:
    from genie import answers as answers_mod
    from genie import detect, render, spec

    answers = directory / render.ANSWERS_FILE
    if not answers.is_file():
        raise GenieError(_("{f} not found: is {d} a genie project?").format(f=answers, d=directory))
    return spec.build_spec(answers_mod.load_answers(answers), detect.machine())


@cli.command()
@click.argument("script", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="Converted script [SCRIPT_ddp.py]."
)
@click.option(
    "--nproc-per-node", type=click.IntRange(min=1), help="Processes per node [GPUs here, or 2]."
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Nodes to train on (2 or more also writes a multi-node launch script).",
)
@click.option("--master-addr", help="Node 0's hostname or IP (several nodes).")
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    default=29500,
    show_default=True,
    help="Node 0's rendezvous port (several nodes).",
)
@click.option(
    "--check/--no-check",
    "run_check",
    default=True,
    help="Prove it: train on 2 processes under torchrun, parameters in sync at the end.",
)
@click.option("--check-args", default="", help='Arguments for the check run, e.g. "--epochs 1".')
@click.option(
    "--check-dir",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="Where the check runs (relative paths resolve there) [a new temporary directory].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Seconds before the check is killed.",
)
@click.option("--force", is_flag=True, help="Replace existing output files (never SCRIPT).")
@click.option("--yes", "-y", is_flag=True, help="Write without asking.")
def convert(
    script: Path,
    output: Path | None,
    nproc_per_node: int | None,
    nodes: int,
    master_addr: str | None,
    master_port: int,
    run_check: bool,
    check_args: str,
    check_dir: Path | None,
    timeout: float,
    force: bool,
    yes: bool,
) -> None:
    """Turn a single-device training SCRIPT into a DDP script for torchrun, and prove it."""
    from genie.convert import command

    command.run(
        script, output, nproc_per_node, nodes, master_addr, master_port,
        check_args if run_check else None, check_dir, timeout, force, yes,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors print one line and exit non-zero, never a traceback."""
    try:
        cli.main(args=argv, prog_name="genie", standalone_mode=False)
    except click.exceptions.Abort as err:
        # click turns KeyboardInterrupt and EOFError into Abort; the cause tells them apart.
        if isinstance(err.__cause__, EOFError):
            _fail(_("no more input; answer every question, or pass --yes and flags"), 130)
        _fail(_("interrupted; nothing written"), 130)
    except click.ClickException as err:
        if isinstance(err, click.NoSuchOption):
            _suggest(err)
        err.show()
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        _fail(_("interrupted; nothing written"), 130)
    except GenieError as err:
        _fail(str(err), err.exit_code)


def _suggest(err: click.NoSuchOption) -> None:
    """Add the options that ``err``'s unknown one starts, or nearly spells (``--gpu`` ->
    ``--gpus-per-node``), to what click suggests."""
    from difflib import get_close_matches

    if err.ctx is None:
        return
    known = [o for p in err.ctx.command.params for o in (*p.opts, *p.secondary_opts)]
    typed = err.option_name
    found = [o for o in known if o.startswith(typed)]
    found += get_close_matches(typed, known, n=3, cutoff=0.5)
    if found:
        err.possibilities = list(dict.fromkeys(found))[:3]  # type: ignore[misc]


def _fail(message: str, code: int) -> None:
    from genie import ui

    ui.error(message)
    sys.exit(code)

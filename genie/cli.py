"""genie's command line: parse, call, print. The logic lives in the modules it calls."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from genie import __version__, contract
from genie.cli_options import field_options
from genie.errors import Aborted, GenieError, SmokeFailed
from genie.i18n import LANGUAGES, _, translate_click

TAIL_LINES = 15  # raw output lines shown after a failed smoke test's explanation
translate_click()  # click's own messages in genie's language

DECLINED = 1  # exit status when the user cancels at the summary (Ctrl-C is 130)


# Defaults that depend on the machine or on other answers, as --help states them.
@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    help=_("Answer a few questions, get a distributed PyTorch training project that runs."),
)
@click.version_option(__version__, prog_name="genie", message=_("%(prog)s, version %(version)s"))
@click.option(
    "--lang",
    type=click.Choice(LANGUAGES),
    help=_("Language of genie's messages [from LANGUAGE, LC_ALL, LC_MESSAGES or LANG; else en]."),
)
def cli(lang: str | None) -> None:
    # --lang was read before any message was translated (genie.i18n): here it is validated
    # and listed in --help.
    pass


@cli.command(
    help=_(
        "Generate a distributed training project in DIRECTORY, then smoke-test it.\n\n"
        "Without --yes, genie asks the essentials (nodes, GPUs, PyTorch, task, framework), "
        "shows a summary, then offers to generate, change a setting or customize the training "
        "settings. Cancelling there writes nothing and exits 1; Ctrl-C exits 130.\n\n"
        "Examples:\n\n"
        "\b\n"
        "  genie new ../demo                  # a few questions, then the summary\n"
        "  genie new ../demo --yes            # no questions: every default\n"
        "  genie new ../big --yes --nodes 2 --master-addr 10.0.0.5 --gpus-per-node 8"
    )
)
@click.argument("directory", type=click.Path(path_type=Path))
@field_options
@click.option(
    "--answers",
    "answers_file",
    type=click.Path(path_type=Path),
    help=_("YAML answers file; flags override it."),
)
@click.option(
    "--yes", "-y", is_flag=True, help=_("Ask nothing: take defaults for every missing answer.")
)
@click.option(
    "--force",
    is_flag=True,
    help=_("Write into a non-empty directory (never replaces files genie did not write)."),
)
@click.option(
    "--smoke/--no-smoke",
    "run_smoke",
    default=True,
    help=_("Smoke-test the project after generating it."),
)
@click.option(
    "--smoke-timeout",
    type=click.FloatRange(min=1),
    default=contract.SMOKE_TIMEOUT,
    show_default=True,
    help=_("Seconds before the smoke test is killed."),
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


@cli.command(
    help=_("Smoke-test an existing genie project: a few real training steps under torchrun.")
)
@click.argument("directory", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=contract.SMOKE_TIMEOUT,
    show_default=True,
    help=_("Seconds before the run is killed."),
)
@click.option(
    "--python",
    "python",
    type=click.Path(exists=True, dir_okay=False),
    help=_("Interpreter with the project's requirements (default: the one running genie)."),
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


@cli.command(
    help=_(
        "Check this machine for what breaks distributed training, with a fix for each "
        "problem.\n\n"
        "Exit status: 0 when no check fails (warnings allowed), 1 when a check fails, 2 on bad "
        "input."
    )
)
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


@cli.command(
    help=_("Turn a single-device training SCRIPT into a DDP script for torchrun, and prove it.")
)
@click.argument("script", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help=_("Converted script [SCRIPT_ddp.py].")
)
@click.option(
    "--nproc-per-node", type=click.IntRange(min=1), help=_("Processes per node [GPUs here, or 2].")
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help=_("Nodes to train on (2 or more also writes a multi-node launch script)."),
)
@click.option("--master-addr", help=_("Node 0's hostname or IP (several nodes)."))
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    default=29500,
    show_default=True,
    help=_("Node 0's rendezvous port (several nodes)."),
)
@click.option(
    "--check/--no-check",
    "run_check",
    default=True,
    help=_("Prove it: train on 2 processes under torchrun, parameters in sync at the end."),
)
@click.option("--check-args", default="", help=_('Arguments for the check run, e.g. "--epochs 1".'))
@click.option(
    "--check-dir",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help=_("Where the check runs (relative paths resolve there) [a new temporary directory]."),
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help=_("Seconds before the check is killed."),
)
@click.option("--force", is_flag=True, help=_("Replace existing output files (never SCRIPT)."))
@click.option("--yes", "-y", is_flag=True, help=_("Write without asking."))
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
        if isinstance(err, click.NoSuchOption) and err.option_name == "--lang":
            name = err.ctx.info_name if err.ctx else "new"
            _fail(_("--lang is genie's own option: put it before the command, e.g. "
                    "genie --lang zh {c} ...").format(c=name), 2)  # fmt: skip
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

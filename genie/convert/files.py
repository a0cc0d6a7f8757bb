"""What ``genie convert`` writes (planned purely) and writing it safely: the original script
is never written, and no existing file is replaced without ``--force``."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from genie.errors import GenieError
from genie.generate import launch
from genie.i18n import _

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class Layout:
    """Where the converted script runs and how it is launched."""

    nproc_per_node: int
    nodes: int = 1
    master_addr: str | None = None
    master_port: int = DEFAULT_PORT


def default_output(script: Path) -> Path:
    return script.with_name(f"{script.stem}_ddp{script.suffix or '.py'}")


def commands(output: Path, layout: Layout) -> list[launch.Command]:
    """How to launch the converted script, from genie's launch planner."""
    name, stem = output.name, output.stem
    if layout.nodes <= 1:
        argv = launch.torchrun_args(name, layout.nproc_per_node)
        return [launch.Command(_("this machine"), f"bash launch/{stem}.sh", tuple(argv))]
    result = []
    for rank in range(layout.nodes):
        argv = launch.torchrun_args(
            name,
            layout.nproc_per_node,
            layout.nodes,
            master_addr=layout.master_addr,
            master_port=layout.master_port,
            node_rank=rank,
        )
        where = f"node {rank}" + (f" ({layout.master_addr})" if rank == 0 else "")
        result.append(
            launch.Command(where, f"bash launch/{stem}_multi_node.sh {rank}", tuple(argv))
        )
    return result


# as in the generated projects' launch scripts
OMP = (
    "# One OpenMP thread per process (torchrun's own default, set here so it does not warn).\n"
    'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"\n'
)


def launch_scripts(output: Path, layout: Layout) -> dict[str, str]:
    """launch/<stem>.sh, and launch/<stem>_multi_node.sh for several nodes."""
    name, stem, n = output.name, output.stem, layout.nproc_per_node
    single = launch.shell_join(launch.torchrun_args(name, n))
    files = {
        f"launch/{stem}.sh": (
            "#!/usr/bin/env bash\n"
            f"# Train {name} on this machine: {n} processes, one per GPU (or CPU worker).\n"
            f"# Extra arguments go to {name}.\n"
            f'set -euo pipefail\n{OMP}cd "$(dirname "$0")/.."\n'
            f'exec {single} "$@"\n'
        )
    }
    if layout.nodes > 1:
        multi = launch.shell_join(
            launch.torchrun_args(
                name,
                n,
                layout.nodes,
                master_addr=layout.master_addr,
                master_port=layout.master_port,
            )
        )
        usage = f"usage: bash launch/{stem}_multi_node.sh NODE_RANK [{name} arguments...]"
        files[f"launch/{stem}_multi_node.sh"] = (
            "#!/usr/bin/env bash\n"
            f"# Train {name} on {layout.nodes} nodes x {n} processes (static rendezvous at "
            f"{layout.master_addr}:{layout.master_port}).\n"
            f"# Run on every node with its own NODE_RANK (0 on {layout.master_addr}).\n"
            f'set -euo pipefail\n{OMP}cd "$(dirname "$0")/.."\nNODE_RANK="${{1:-}}"\n'
            f'if [[ ! "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= {layout.nodes} )); then\n'
            f'    echo "{usage}  (NODE_RANK: 0-{layout.nodes - 1})" >&2\n'
            "    exit 2\nfi\nshift\n"
            f'exec {multi} "$@"\n'
        )
    return files


def plan(script: Path, output: Path, code: str, layout: Layout) -> dict[Path, str]:
    """Absolute path -> text of every file to write."""
    files = {output.absolute(): code}
    for relative, text in launch_scripts(output, layout).items():
        files[output.absolute().parent / relative] = text
    return files


def check_writable(
    script: Path, files: dict[Path, str], force: bool, modules: list[Path] | None = None
) -> None:
    """Refuse before anything is written: the original (or a module of the script's), or
    existing files without --force."""
    originals = {p.resolve() for p in [script, *(modules or [])]}
    for path in files:
        if path.resolve() in originals:
            raise GenieError(
                _(
                    "{p} is the script being converted; genie never overwrites it: pick another -o"
                ).format(p=path)
            )
        if path.exists() and (not path.is_file() or not force):
            raise GenieError(
                _("{p} exists; pass --force to replace it, or pick another -o").format(p=path)
            )


def write(files: dict[Path, str]) -> None:
    """Each file through a temporary file in its directory, so none is ever half-written."""
    for path, text in files.items():
        try:
            _write(path, text)
        except OSError as err:
            raise GenieError(_("cannot write {p}: {e}").format(p=path, e=err.strerror)) from None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o755 if path.suffix == ".sh" else 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise

"""``genie doctor``: find what will break a distributed run before it hangs, and say how to
fix it. Each check is a small function of a :class:`Context` returning a :class:`Result`
(``id``, ``status`` pass/warn/fail, ``detail``, ``fix``); adding one is a function here plus
its line in :data:`CHECKS`.

Nothing here imports torch: checks that need it ask a subprocess, with a timeout.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from genie.doctor import collective, hostname, machine, network, project, system
from genie.doctor.base import Check, Context, Result
from genie.errors import CheckFailed
from genie.i18n import _, ngettext

__all__ = ["CHECKS", "Context", "Result", "run", "failed"]

# In the order they are printed.
CHECKS: tuple[Check, ...] = (
    machine.python,
    machine.torch,
    machine.cuda,
    machine.nccl,
    machine.gpus,
    machine.visible_devices,
    system.topology,
    system.infiniband,
    system.nccl_env,
    system.shm,
    system.open_files,
    network.master_port,
    network.master_addr,
    network.network,
    hostname.hostname,
    hostname.binding,
    project.packages,
    project.processes,
    collective.collective,
)


def run(ctx: Context, checks: tuple[Check, ...] = CHECKS) -> list[Result]:
    """Every check that applies, in order. They run side by side: the slow ones (the torch
    probe, the collective) overlap, and each bounds its own waiting."""
    with ThreadPoolExecutor(max_workers=len(checks)) as pool:
        results = list(pool.map(lambda check: _guarded(check, ctx), checks))
    return [r for r in results if r is not None]


def _guarded(check: Check, ctx: Context) -> Result | None:
    """A check that crashes (a genie bug, or a machine genie did not foresee) is reported as a
    warning instead of hiding every other result behind a traceback."""
    try:
        return check(ctx)
    except Exception as err:  # reported, not hidden
        return Result(
            check.__name__,
            "warn",
            _("the check itself failed: {e!r}").format(e=err),
            _("please report this as a genie bug"),
        )


def failed(results: list[Result]) -> list[Result]:
    return [r for r in results if r.status == "fail"]


def ensure_passed(results: list[Result]) -> None:
    """Raise :class:`~genie.errors.CheckFailed` naming the failed checks, if any."""
    bad = failed(results)
    if bad:
        raise CheckFailed(
            ngettext("{n} check failed: {ids}", "{n} checks failed: {ids}", len(bad)).format(
                n=len(bad), ids=", ".join(r.id for r in bad)
            )
        )

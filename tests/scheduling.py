"""How pytest-xdist hands out the tests: ``--dist loadgroup``, with the tests that mostly wait
on a worker of their own.

The waiting tests (the WAITING xdist group: separate hosts, the test SLURM, timeouts) leave
their core idle for minutes at a time, then start a dozen processes at once: beside one
computing worker they left about 200 core-seconds unused (docs/performance.md). With
``-n auto`` genie's tests start one worker per core plus ``gw0``, which runs only them, and
the computing workers run at nice NICENESS (``renice_computing_worker``), so that the
waiting tests' processes, whose timeouts are measured, get a core first when they want one.
"""

from __future__ import annotations

import os

import pytest
from xdist.scheduler import LoadGroupScheduling

WAITING = "waiting"  # the xdist group of the tests that mostly wait
ASIDE = "gw0"  # the worker that runs them, where there are three or more
NICENESS = 5  # of the computing workers: CFS weighs a nice-0 process 3 times one of theirs


def auto_workers() -> int | None:
    """One worker per core, plus the waiting tests' own; None: pytest-xdist's own count
    (PYTEST_XDIST_AUTO_NUM_WORKERS set, or a single core)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0))
    return cores + 1 if cores > 1 else None


def renice_computing_worker() -> None:
    """In a worker: a computing one (not ASIDE, among three or more) runs nice NICENESS,
    and so do the processes its tests start."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if worker is not None and worker != ASIDE and count >= 3:
        os.nice(NICENESS)


class WaitingAside(LoadGroupScheduling):
    """loadgroup, but where it starts with three or more workers ASIDE takes only the WAITING
    group and the others everything else (all of it, should ASIDE be gone); a worker stops
    once the queue holds nothing for it."""

    aside = False

    def schedule(self) -> None:
        if self.collection is None:  # the first call: the workers as started
            self.aside = len(self.nodes) >= 3 and any(self._is_aside(n) for n in self.nodes)
        super().schedule()

    @staticmethod
    def _is_aside(node) -> bool:  # type: ignore[no-untyped-def]
        return node.gateway.id == ASIDE

    def _next_scope(self, node) -> str | None:  # type: ignore[no-untyped-def]
        if not (self.aside and any(self._is_aside(n) for n in self.nodes)):
            return next(iter(self.workqueue), None)
        mine = self._is_aside(node)
        return next((s for s in self.workqueue if (s == WAITING) == mine), None)

    def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
        scope = self._next_scope(node)
        if scope is None:
            node.shutdown()
            return
        self.workqueue.move_to_end(scope, last=False)  # the base class takes the first unit
        super()._assign_work_unit(node)

    def _reschedule(self, node) -> None:  # type: ignore[no-untyped-def]
        if node.shutting_down:
            return
        if self._next_scope(node) is None:
            node.shutdown()
        elif self._pending_of(self.assigned_work[node]) <= 2:
            self._assign_work_unit(node)


def waiting_group() -> pytest.MarkDecorator:
    return pytest.mark.xdist_group(WAITING)

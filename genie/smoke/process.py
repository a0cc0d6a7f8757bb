"""Run a command tree (torchrun and its ranks) with a timeout that kills all of it.

At the timeout each rank is first asked for its Python stack (``SIGABRT`` under
``PYTHONFAULTHANDLER=1``), so a hang can say which rank was where; then the whole tree goes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KILL_GRACE = 5.0
GONE_WITHIN = 20.0  # seconds SIGKILLed processes get to be gone (a loaded host is slow)
# Every process of a tree started here carries it, with a value of its own: a process that
# left the tree (its parent died first and it was re-parented) is still found and killed.
TREE = "GENIE_PROCESS_TREE"
_TREES: dict[int, str] = {}  # pid of a process started by popen() -> its TREE value
DUMP_GRACE = 2.0  # seconds the ranks get to write their stacks


@dataclass
class Outcome:
    returncode: int | None
    lines: list[str]
    seconds: float
    timed_out: bool


def execute(
    argv: tuple[str, ...] | list[str],
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    echo: Callable[[str], None] = lambda line: None,
) -> Outcome:
    """Run ``argv`` in its own session, stream its output to ``echo``, kill it at ``timeout``."""
    lines: list[str] = []
    started = time.perf_counter()
    proc = popen(argv, cwd, env)
    reader = threading.Thread(target=_pump, args=(proc, lines, echo), daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        if env.get("PYTHONFAULTHANDLER"):
            _dump_stacks(proc)
        kill_tree(proc)
    except BaseException:
        kill_tree(proc)
        raise
    reader.join(timeout=KILL_GRACE)
    _TREES.pop(proc.pid, None)  # ended (kill_tree has popped a killed one)
    return Outcome(proc.returncode, lines, time.perf_counter() - started, timed_out)


def popen(
    argv: tuple[str, ...] | list[str], cwd: Path, env: dict[str, str], merge_stderr: bool = True
) -> subprocess.Popen:
    """``argv`` with its output piped as text, in a session of its own."""
    tree = uuid.uuid4().hex
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**env, TREE: tree},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,  # its own process group: a timeout kills every rank
    )
    _TREES[proc.pid] = tree
    return proc


def _pump(proc: subprocess.Popen, lines: list[str], echo: Callable[[str], None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        echo(line.rstrip("\n"))


def _dump_stacks(proc: subprocess.Popen) -> None:
    """SIGABRT the ranks (torchrun's children, or the process itself without torchrun): with
    faulthandler on, each writes its stack before it dies."""
    ranks = _children(proc.pid) or [proc.pid]
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGABRT)
    deadline = time.monotonic() + DUMP_GRACE
    while time.monotonic() < deadline and any(_running(pid) for pid in ranks):
        time.sleep(0.05)


def _parents() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    return children


def _children(pid: int) -> list[int]:
    return _parents().get(pid, [])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc). torchrun starts each worker in a session of
    its own, so killing torchrun's process group alone would leave the ranks running."""
    children = _parents()
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGTERM torchrun (it forwards to the ranks), then SIGKILL every process that is left:
    its descendants and every process of its tree that was re-parented, until none runs."""
    tree = _TREES.pop(proc.pid, "")
    victims = set(descendants(proc.pid))  # before torchrun dies and its children move
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=KILL_GRACE)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + GONE_WITHIN
    while True:
        victims |= _marked(tree)
        left = [pid for pid in victims if _running(pid)]
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    proc.wait()


def _marked(tree: str) -> set[int]:
    """Every process (but this one) started with ``TREE=tree``."""
    if not tree:
        return set()
    needle = f"{TREE}={tree}".encode()
    found = set()
    for entry in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in entry.read_bytes():
                found.add(int(entry.parent.name))
        except (OSError, ValueError):
            continue
    found.discard(os.getpid())
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class Job:
    argv: tuple[str, ...] | list[str]
    cwd: Path
    env: dict[str, str]
    label: str  # prefixed to each line it prints, e.g. "[node 1] "


@dataclass
class JobOutcome(Outcome):
    started_children: bool = False  # whether it ever had children (torchrun: workers started)
    stopped: bool = False  # killed by us: at the timeout, or after another job failed


def execute_all(
    jobs: list[Job],
    timeout: float,
    echo: Callable[[str], None] = lambda line: None,
    grace: float = 30.0,
) -> list[JobOutcome]:
    """Run ``jobs`` side by side (one torchrun agent per simulated node), each in its own
    session. At ``timeout``, or ``grace`` seconds after one job fails while others still run
    (they would wait for it until the timeout), every process of every job is killed."""
    started = time.perf_counter()
    running: list[_Running] = []
    try:
        for job in jobs:
            running.append(_Running.start(job, echo))
        timed_out = _watch(running, started, timeout, grace)
    except BaseException:
        for r in running:
            if r.proc.poll() is None:
                kill_tree(r.proc)
        raise
    for r in running:
        r.reader.join(timeout=KILL_GRACE)
        _TREES.pop(r.proc.pid, None)
    seconds = time.perf_counter() - started
    return [
        JobOutcome(
            r.proc.returncode, r.lines, seconds, timed_out and r.stopped, r.children, r.stopped
        )
        for r in running
    ]


@dataclass
class _Running:
    job: Job
    proc: subprocess.Popen
    reader: threading.Thread
    lines: list[str]
    children: bool = False  # it has had children (torchrun: its workers started)
    stopped: bool = False  # we killed it

    @classmethod
    def start(cls, job: Job, echo: Callable[[str], None]) -> _Running:
        lines: list[str] = []
        proc = popen(job.argv, job.cwd, job.env)

        def show(line: str) -> None:
            echo(job.label + line)

        reader = threading.Thread(target=_pump, args=(proc, lines, show), daemon=True)
        reader.start()
        return cls(job, proc, reader, lines)

    def stop(self, dump_stacks: bool) -> None:
        self.stopped = True
        if dump_stacks and self.job.env.get("PYTHONFAULTHANDLER"):
            _dump_stacks(self.proc)
        kill_tree(self.proc)


def _watch(running: list[_Running], started: float, timeout: float, grace: float) -> bool:
    """Wait for every job; stop the rest at the timeout or ``grace`` after a failure. True
    when the timeout struck."""
    failed_at: float | None = None
    while True:
        tree = _parents()
        for r in running:
            r.children = r.children or bool(tree.get(r.proc.pid))
        codes = [r.proc.poll() for r in running]
        if all(code is not None for code in codes):
            return False
        now = time.perf_counter()
        if failed_at is None and any(code not in (None, 0) for code in codes):
            failed_at = now
        timed_out = now - started > timeout
        if timed_out or (failed_at is not None and now - failed_at > grace):
            for r in running:
                if r.proc.poll() is None:
                    r.stop(dump_stacks=timed_out)
            return timed_out
        time.sleep(0.2)

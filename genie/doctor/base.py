"""What a check is: a function of a :class:`Context` returning a :class:`Result`.

The context carries what the user asked (project, master address and port) and the facts
several checks share (the torch probe, nvidia-smi), gathered once and only when asked for.
Paths and the environment are fields, so a test can point a check at a prepared one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from genie.i18n import _

if TYPE_CHECKING:
    from genie.spec import Spec

Status = Literal["pass", "warn", "fail"]
DEFAULT_PORT = 29500
COMMAND_TIMEOUT = 10.0  # seconds any external command may take
T = TypeVar("T")


@dataclass(frozen=True)
class Result:
    id: str
    status: Status
    detail: str  # what was found
    fix: str = ""  # one concrete thing to do; empty when nothing needs doing

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass
class Context:
    spec: Spec | None = None
    project_dir: Path | None = None
    master_addr: str | None = None
    master_port: int | None = None
    reach: bool = False
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    python: str = sys.executable
    shm_path: Path = Path("/dev/shm")
    infiniband_path: Path = Path("/sys/class/infiniband")
    net_path: Path = Path("/sys/class/net")
    collective_timeout: float = 12.0
    _facts: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def addr(self) -> str | None:
        """The master address: the flag, else the project's (None for a one-node project)."""
        if self.master_addr is not None:
            return self.master_addr
        return self.spec.master_addr if self.spec is not None else None

    @property
    def port(self) -> int:
        if self.master_port is not None:
            return self.master_port
        if self.spec is not None and self.spec.master_port is not None:
            return self.spec.master_port
        return DEFAULT_PORT

    @property
    def multi_node(self) -> bool:
        return self.spec is not None and self.spec.multi_node

    def once(self, key: str, make: Callable[[], T]) -> T:
        """``make()`` the first time ``key`` is asked for (by any thread), then its value."""
        with self._lock:
            lock = self._facts.setdefault("lock:" + key, threading.Lock())
        with lock:
            if key not in self._facts:
                self._facts[key] = make()
            return self._facts[key]


Check = Callable[[Context], "Result | None"]  # None: does not apply (e.g. needs a project)


def command(argv: list[str], env: Mapping[str, str], timeout: float = COMMAND_TIMEOUT) -> str:
    """stdout of ``argv``; raises OSError or subprocess.SubprocessError (timeout, exit != 0)."""
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
        env=dict(env),
        stdin=subprocess.DEVNULL,
    ).stdout


def why(err: BaseException) -> str:
    """A one-line reason for a failed command."""
    if isinstance(err, subprocess.TimeoutExpired):
        return _("no answer within {t:.0f} s").format(t=err.timeout)
    if isinstance(err, subprocess.CalledProcessError):
        text = (err.stderr or err.stdout or "").strip().splitlines()
        return _("exit {c}").format(c=err.returncode) + (f": {text[-1]}" if text else "")
    return str(err)

"""Known ways a distributed run fails, as one table: a pattern over the run's output (and its
exit status) -> the likely cause and the fix. Pure: text in, explanations out.

Adding a signature is one :class:`Signature` in :data:`SIGNATURES`; ``{name}`` in its cause
or fix is filled from the pattern's named group of the same name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from genie.i18n import _
from genie.smoke.torchrun_output import main_stacks, strip_prefixes


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: str  # a regex searched in the output, multi-line, case-sensitive
    cause: str
    fix: str
    timed_out: bool | None = None  # True: only when the run was killed at the timeout


@dataclass(frozen=True)
class Explanation:
    id: str
    cause: str
    fix: str
    evidence: str  # the output line that matched, unprefixed


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "address_in_use",
        r"failed to listen on any local network address\. port: (?P<port>\d+)|"
        r"EADDRINUSE|[Aa]ddress already in use",
        _("the rendezvous port is already taken on this host (another run, or a stale one)"),
        _(
            "stop the other run (`ss -ltnp 'sport = :{port}'` shows who holds it), or pick "
            "another port: --master-port / MASTER_PORT"
        ),
    ),
    Signature(
        "rendezvous_timeout",
        r"RendezvousTimeoutError|client socket has timed out after .*connect to|"
        r"DistStoreError: .*[Tt]imed? ?out|Timed out after \d+ seconds waiting for clients|"
        r"Connection refused.*(?:TCPStore|rendezvous)",
        _(
            "the nodes never met: the master address is localhost/127.0.0.1 on a multi-node run, "
            "a firewall blocks the master port, node 0 was not started, or the traffic takes the "
            "wrong network interface"
        ),
        _(
            "use node 0's real IP as --master-addr, open the port, start node 0 first, set "
            "NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME; check with genie doctor --master-addr HOST "
            "--reach"
        ),
    ),
    Signature(
        "nccl",
        r"NCCL error|nccl(?:Internal|System|UnhandledCuda|InvalidUsage|Remote)Error|"
        r"NCCL WARN|ProcessGroupNCCL.*(?:[Ww]atchdog|[Tt]imeout)|DistBackendError",
        _("NCCL failed: peer-to-peer transport, network interface or driver trouble"),
        _(
            "rerun with NCCL_DEBUG=INFO to see which transport fails; try NCCL_P2P_DISABLE=1 "
            "(common on PCIe boxes with IOMMU/ACS), NCCL_IB_DISABLE=1 without working "
            "InfiniBand, NCCL_SOCKET_IFNAME=<interface>"
        ),
    ),
    Signature(
        "cuda_oom",
        r"CUDA out of memory|OutOfMemoryError",
        _("a GPU ran out of memory"),
        _(
            "lower --batch-size and raise --grad-accum by the same factor (same global batch), "
            "use --precision bf16, or --strategy fsdp for a model too big for one GPU"
        ),
    ),
    Signature(
        "numpy",
        r"Numpy is not available|compiled using NumPy 1\.x cannot be run in\s*NumPy 2|"
        r"_ARRAY_API not found",
        _("this torch was built against NumPy 1.x and NumPy 2 is installed (or none is)"),
        _(
            'pip install "numpy<2" (genie pins it for torch below 2.3), or upgrade torch; '
            "pip install -r requirements.txt"
        ),
    ),
    Signature(
        "missing_package",
        r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'",
        _("the package providing '{module}' is not installed in the interpreter that ran"),
        _(
            "pip install -r requirements.txt in that environment (or genie smoke --python PATH "
            "to use another one)"
        ),
    ),
    Signature(
        "killed",
        r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b",
        _("a rank was killed with SIGKILL, usually by the out-of-memory killer (host RAM)"),
        _("lower --batch-size or --num-workers, or give the job more memory (dmesg says who)"),
        timed_out=False,
    ),
    Signature(
        "hung",
        r"\A",  # any output: what matters is that the run was killed at the timeout
        _("a rank hung past the timeout{where}"),
        _(
            "a rank stuck in a collective waits for one that is elsewhere (a rank skipped a "
            "collective, or the network drops); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL and "
            "NCCL_DEBUG=INFO"
        ),
        timed_out=True,
    ),
)

# Used when nothing more specific matched: the exception a rank raised.
_RAISED = Signature(
    "rank_raised",
    r"^(?P<error>(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)): (?P<message>.*)$",
    _("a rank raised {error}: {message}"),
    _("the traceback above shows where; fix that code (genie doctor checks the machine)"),
)


def explain(output: str, returncode: int | None, timed_out: bool = False) -> list[Explanation]:
    """Every known signature found in a failed run's output, in table order."""
    text = strip_prefixes(output)
    found = []
    for sig in SIGNATURES:
        if sig.timed_out is not None and sig.timed_out != timed_out:
            continue
        m = re.search(sig.pattern, text, re.MULTILINE)
        if m is None:
            continue
        values = {k: v for k, v in m.groupdict().items() if v is not None}
        if sig.id == "hung":
            values["where"] = _where_ranks_were(output)
        evidence = "" if sig.id == "hung" else _line_at(text, m.start())
        found.append(_fill(sig, values, evidence))
    if not found and returncode not in (0, None):
        errors = list(re.finditer(_RAISED.pattern, text, re.MULTILINE))
        if errors:
            m = errors[0]  # the first raised is the root cause; later ones are fallout
            found.append(_fill(_RAISED, m.groupdict(), m.group(0)))
    return found


def _fill(sig: Signature, values: dict[str, str], evidence: str) -> Explanation:
    return Explanation(
        sig.id,
        sig.cause.format_map(_Default(values)),
        sig.fix.format_map(_Default(values)),
        evidence.strip()[:200],
    )


class _Default(dict):
    def __missing__(self, key: str) -> str:
        return key.upper()  # a placeholder the user fills in: PORT, MODULE


def _line_at(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end >= 0 else len(text)]


def _where_ranks_were(output: str) -> str:
    """From faulthandler dumps: each rank's innermost frame outside the libraries, and the
    library function it was inside (``barrier``, ``all_reduce``)."""
    where = []
    for rank, frames in sorted(main_stacks(output).items()):
        own = next((f for f in frames if not f.library), None)
        if own is None:
            continue
        place = str(own)
        if frames[0].library:
            place += _(" (inside {f})").format(f=frames[0].function)
        where.append(_("rank {r} at {place}").format(r=rank, place=place))
    return ": " + "; ".join(where) if where else ""

"""Known ways a distributed run fails, as one table: a pattern over the run's output (and its
exit status) -> the likely cause and the fix. Data only; :mod:`genie.smoke.signatures` applies
it to a run's output.

Adding a signature is one :class:`Signature` in :data:`SIGNATURES`; ``{name}`` in its cause
or fix is filled from the pattern's named group of the same name. Patterns see the output with
torchrun's prefixes removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from genie.i18n import _


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
        "hostname_unresolved",
        r"The IPv6 network addresses of \((?P<host>[^,]+), (?P<port>\d+)\) cannot be retrieved",
        _(
            "a node was handed the hostname {host} as the address to connect to, and that name "
            "does not resolve there (the rendezvous advertises each node by its hostname)"
        ),
        _(
            "start every node through launch/multi_node.sh (it passes torchrun --local_addr with "
            "the node's own IP), or add every node's hostname to DNS or /etc/hosts on every node"
        ),
    ),
    Signature(
        "loopback_peer",
        r"Gloo connectFullMesh failed.*remote=\[(?P<remote>127\.[\d.]+)\]|"
        r"Unable to resolve hostname to a \(local\) address\. Using the loopback address",
        _(
            "gloo advertised a loopback address ({remote}) to the other nodes: this node's "
            "hostname maps to 127.0.1.1 (Debian's default /etc/hosts) or to nothing"
        ),
        _(
            "export GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to the interface on the route to "
            "the master, as launch/multi_node.sh does; or map the hostname to the node's real IP"
        ),
    ),
    Signature(
        "full_mesh",
        r"Gloo connectFullMesh failed(?!.*remote=\[127\.)",
        _(
            "gloo ranks could not connect to each other: they bound an interface the others "
            "cannot reach (a container bridge, a second network)"
        ),
        _(
            "export GLOO_SOCKET_IFNAME=<the interface on the route to the master> on every node "
            "(launch/multi_node.sh picks it); check with bash launch/multi_node.sh N --preflight"
        ),
    ),
    Signature(
        "no_route",
        r"failed to connect to any network address of \((?P<host>[^,]+), (?P<port>\d+)\).*"
        r"(?:No route to host|Network is unreachable)",
        _("nothing answers at {host}: no host has that address on this node's networks"),
        _("check MASTER_ADDR on this node: it must be node 0's address as this node sees it"),
    ),
    Signature(
        "store_closed",
        # closed (FIN), or reset (RST: the store's host died with bytes unread, as it does
        # on a loaded machine); a reset says so in c10d's socket log and in the exception
        r"Failed to recv, got 0 bytes\. Connection was likely closed|"
        r"\[c10d\] \w+ failed on SocketImpl\(.*\): (?:Connection reset by peer|Broken pipe)|"
        r"DistNetworkError: (?:Connection reset by peer|Broken pipe)",
        _("the rendezvous store on node 0 went away: node 0's torchrun stopped or was killed"),
        _("look at node 0's log first; restart node 0, then the others"),
    ),
    Signature(
        "peer_lost",
        # gloo, when the process at the other end of a pair went away mid-run: its socket
        # closed (FIN) or reset (RST)
        r"(?:Connection closed by peer|Read error|Connection reset by peer) "
        r"\[(?P<peer>[\w.:-]+)\]",
        _(
            "the process at {peer} went away mid-run (killed, crashed, out of memory, or its "
            "node lost): this rank's error is what that loss left here, not a bug in its code"
        ),
        _(
            "read the log of the node with address {peer} first (genie explain on it); with "
            "--rdzv c10d, starting that node again with the same command lets training resume "
            "from the last checkpoint"
        ),
    ),
    Signature(
        "not_rejoined",
        # torchrun's workers had run (one failed), then its new rendezvous timed out
        r"failed \(exitcode: -?\d+\) local_rank[\s\S]*?(?P<at>RendezvousTimeoutError)",
        _(
            "the nodes had trained together, then lost one: torchrun restarted the workers and "
            "waited for every node to rejoin, and one never came back in time"
        ),
        _(
            "start the lost node again with the same command within RDZV_TIMEOUT seconds "
            "(launch/multi_node.sh reads it; torch's default is 600), and read its log for why "
            "it went: the cause listed before this one is usually it"
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
            "{install}"
        ),
    ),
    Signature(
        "missing_package",
        r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'",
        _("the package providing '{module}' is not installed in the interpreter that ran"),
        _("{install} in that environment (or genie smoke --python PATH to use another one)"),
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

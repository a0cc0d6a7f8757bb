"""Separate hosts on one machine: a Linux network namespace per host, each with its own
hostname (a UTS namespace per process tree), its own ``/etc/hosts`` and its own network stack,
joined by veth pairs to a bridge that lives in a namespace of its own.

Nothing is routed anywhere else: no host has a default route and the root namespace holds no
part of the network, so traffic stays between the hosts made here. Everything made is removed
on exit (and a later genie removes what a killed one left: names carry the pid).

Needs root and iproute2 (``ip``); :func:`unavailable` says why not otherwise. The knobs of
:class:`HostConfig` make the misconfigurations clusters have: hostnames the others cannot
resolve, a hostname that maps to 127.0.1.1, a decoy interface listed first, interface names
that differ, a firewall that drops a port (nftables).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from genie.i18n import _

SUBNET = "10.77.0"  # host k is SUBNET.(k+1)/24; private to the namespaces made here
NETNS_ETC = Path("/etc/netns")  # ip netns exec bind-mounts NETNS_ETC/NAME/hosts on /etc/hosts
_PREFIX = "genie"
_STALE = re.compile(rf"^{_PREFIX}(?P<pid>\d+)[a-z]\d+$")
# Sets the hostname in the new UTS namespace, then becomes the command.
_BECOME = (
    "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"
)


@dataclass(frozen=True)
class HostConfig:
    """How one host is set up; the defaults are a well-configured container."""

    hostname: str
    interface: str = "eth0"  # its link to the others
    # /etc/hosts maps its hostname to: "address", "127.0.1.1", "decoy" (the decoy's), "none"
    own_name: str = "address"
    decoy: bool = False  # a docker0-like bridge with another subnet's address, listed first
    drop_tcp_port: int | None = None  # nftables drops connections to this port on this host


@dataclass(frozen=True)
class Host:
    index: int
    netns: str
    config: HostConfig
    address: str

    @property
    def hostname(self) -> str:
        return self.config.hostname

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host: in its network namespace, under its own hostname."""
        ip, unshare = shutil.which("ip") or "ip", shutil.which("unshare") or "unshare"
        return [
            ip, "netns", "exec", self.netns, unshare, "--uts", "--",
            sys.executable, "-c", _BECOME, self.hostname, *argv,
        ]  # fmt: skip

    def pids(self) -> list[int]:
        """Every process running in this host's network namespace."""
        out = _ip("netns", "pids", self.netns, check=False)
        return [int(p) for p in out.split()]

    def kill_all(self) -> None:
        """SIGKILL every process on this host: a node lost for real."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def unavailable() -> str | None:
    """Why separate hosts cannot be made here, or None."""
    if sys.platform != "linux":
        return _("network namespaces need Linux")
    if os.geteuid() != 0:
        return _("network namespaces need root")
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return _("{tool} is not installed (iproute2, util-linux)").format(tool=tool)
    return None


def _ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def _nft(netns: str, rules: str) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "-f", "-"],
        input=rules, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if done.returncode != 0:
        raise OSError(f"nft in {netns}: {done.stderr.strip()}")


def _hosts_file(host: Host) -> str:
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    if host.config.own_name == "address":
        lines.append(f"{host.address} {host.hostname}")
    elif host.config.own_name == "127.0.1.1":
        lines.append(f"127.0.1.1 {host.hostname}")  # Debian's default
    elif host.config.own_name == "decoy":
        lines.append(f"{_decoy_address(host)} {host.hostname}")
    return "\n".join(lines) + "\n"


def _decoy_address(host: Host) -> str:
    return f"172.17.{host.index}.1"


def _make_host(host: Host, switch: str) -> None:
    _ip("netns", "add", host.netns)
    _ip("link", "set", "lo", "up", netns=host.netns)
    if host.config.decoy:  # made first, so it is listed first
        _ip("link", "add", "docker0", "type", "bridge", netns=host.netns)
        _ip("addr", "add", f"{_decoy_address(host)}/16", "dev", "docker0", netns=host.netns)
        _ip("link", "set", "docker0", "up", netns=host.netns)
    port = f"gp{os.getpid()}_{host.index}"  # interface names: 15 characters at most
    _ip("link", "add", host.config.interface, "netns", host.netns, "type", "veth", "peer",
        "name", port, "netns", switch)  # fmt: skip
    _ip("addr", "add", f"{host.address}/24", "dev", host.config.interface, netns=host.netns)
    _ip("link", "set", host.config.interface, "up", netns=host.netns)
    _ip("link", "set", port, "master", "br0", netns=switch)
    _ip("link", "set", port, "up", netns=switch)
    etc = NETNS_ETC / host.netns
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text(_hosts_file(host))
    if host.config.drop_tcp_port is not None:
        rules = (
            "table inet genie {\n  chain input {\n"
            "    type filter hook input priority 0; policy accept;\n"
            f'    iifname != "lo" tcp dport {host.config.drop_tcp_port} drop\n  }}\n}}\n'
        )
        _nft(host.netns, rules)


def _remove(netns: str) -> None:
    if netns in _ip("netns", "list", check=False).split():
        for pid in _ip("netns", "pids", netns, check=False).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", netns, check=False)
    shutil.rmtree(NETNS_ETC / netns, ignore_errors=True)


def sweep() -> None:
    """Remove the namespaces that a genie which is no longer running made."""
    for line in _ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        found = _STALE.match(name)
        if found and not Path(f"/proc/{found['pid']}").exists():
            _remove(name)


@dataclass
class Network:
    """The hosts made by :func:`network`, host k at ``SUBNET.(k+1)``."""

    hosts: list[Host] = field(default_factory=list)
    switch: str = ""


@contextlib.contextmanager
def network(configs: Sequence[HostConfig]) -> Iterator[Network]:
    """Make one host per config, joined on one subnet; remove them all on exit, whatever
    happened (the processes still running on them are killed)."""
    sweep()
    tag = f"{_PREFIX}{os.getpid()}"
    made = Network(switch=f"{tag}s0")
    try:
        _ip("netns", "add", made.switch)
        _ip("link", "add", "br0", "type", "bridge", netns=made.switch)
        _ip("link", "set", "br0", "up", netns=made.switch)
        for k, config in enumerate(configs):
            host = Host(k, f"{tag}h{k}", config, f"{SUBNET}.{k + 1}")
            made.hosts.append(host)
            _make_host(host, made.switch)
        yield made
    finally:
        for host in made.hosts:
            _remove(host.netns)
        _remove(made.switch)

"""Checks of the rendezvous: the master port, the master address, the network interfaces."""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from genie.detect import resolve
from genie.doctor.base import Context, Result, Status
from genie.i18n import _

CONNECT_TIMEOUT = 3.0
# Interfaces a rendezvous should not use: container bridges, virtual pairs, tunnels.
VIRTUAL = re.compile(r"^(docker|br-|veth|virbr|cni|flannel|cali|vxlan|tun|tap|lxc|podman|ifb)")


def port_free(port: int, host: str = "") -> str | None:
    """None when a server can listen on ``port`` here (as torch's TCPStore does, with
    SO_REUSEADDR), else why not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
        except OSError as err:
            return err.strerror or str(err)
    return None


def master_port(ctx: Context) -> Result:
    addr = ctx.addr
    if addr is not None and not _is_local(ctx, addr):
        return Result(
            "master_port",
            "pass",
            _("port {p} is checked on the master ({a}), not on this host").format(
                p=ctx.port, a=addr
            ),
        )
    problem = port_free(ctx.port)
    if problem is not None:
        return Result(
            "master_port",
            "fail",
            _("port {p} is not free here: {why}").format(p=ctx.port, why=problem),
            _("stop what holds it (ss -ltnp 'sport = :{p}'), or use --master-port {q}").format(
                p=ctx.port, q=ctx.port + 1
            ),
        )
    return Result("master_port", "pass", _("port {p} is free").format(p=ctx.port))


def master_addr(ctx: Context) -> Result:
    addr = ctx.addr
    if addr is None:
        return Result(
            "master_addr", "pass", _("one node: torchrun --standalone rendezvous on localhost")
        )
    addresses = resolve(addr)
    if isinstance(addresses, str):
        return Result(
            "master_addr",
            "fail",
            _("{a} does not resolve: {why}").format(a=addr, why=addresses),
            _("use node 0's IP address, or add its name to DNS or /etc/hosts on every node"),
        )
    detail = _("{a} -> {ips}").format(a=addr, ips=", ".join(addresses))
    if all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        status: Status = "fail" if ctx.multi_node else "warn"
        return Result(
            "master_addr",
            status,
            detail + _(" is loopback: other nodes cannot reach it"),
            _("use node 0's IP as the other nodes see it (ip -4 addr on node 0)"),
        )
    if ctx.reach:
        problem = connect(addresses[0], ctx.port)
        if problem is not None:
            return Result(
                "master_addr",
                "fail",
                detail
                + _("; TCP connect to port {p} failed: {why}").format(p=ctx.port, why=problem),
                _(
                    "start node 0 first (it listens on the port), and open port {p} in the "
                    "firewall between the nodes"
                ).format(p=ctx.port),
            )
        detail += _("; port {p} answers").format(p=ctx.port)
    return Result("master_addr", "pass", detail)


def connect(address: str, port: int, timeout: float = CONNECT_TIMEOUT) -> str | None:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return None
    except OSError as err:
        return err.strerror or str(err) or type(err).__name__


def _is_local(ctx: Context, addr: str) -> bool:
    addresses = resolve(addr)
    if isinstance(addresses, str):
        return True  # unknown: check the port here anyway
    local = {i.address for i in interfaces(ctx.net_path)}
    return any(a in local or ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


@dataclass(frozen=True)
class Interface:
    name: str
    address: str  # IPv4, "" when it has none
    up: bool

    @property
    def virtual(self) -> bool:
        return bool(VIRTUAL.match(self.name))


def interfaces(net: Path) -> list[Interface]:
    """Network interfaces from sysfs, with their IPv4 address (Linux)."""
    found = []
    for path in sorted(net.glob("*")):
        try:
            flags = int((path / "flags").read_text().strip(), 16)
        except (OSError, ValueError):
            continue
        found.append(Interface(path.name, _ipv4(path.name), bool(flags & 0x1)))
    return found


def _ipv4(name: str) -> str:
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError:  # SIOCGIFADDR: no IPv4 address, or no such interface
            return ""
    return socket.inet_ntoa(packed[20:24])


def network(ctx: Context) -> Result:
    found = interfaces(ctx.net_path)
    listed = "; ".join(
        f"{i.name} {i.address or '-'} {'up' if i.up else 'down'}"
        + (_(" (virtual: a bad choice)") if i.virtual else "")
        for i in found
    )
    usable = [i for i in found if i.up and i.address and not i.virtual and i.name != "lo"]
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = ctx.env.get(var, "").strip()
        if value and not _ifname_matches(value, found, exact=var.startswith("GLOO")):
            return Result(
                "network",
                "fail",
                _("{var}={v} matches no interface that is up with an address; have: {l}").format(
                    var=var, v=value, l=listed
                ),
                _("export {var}={s}").format(var=var, s=usable[0].name if usable else "eth0"),
            )
    if not usable:
        return Result(
            "network",
            "fail" if ctx.multi_node else "pass",
            listed + _("; only loopback: one node only"),
            _("connect a network interface shared with the other nodes") if ctx.multi_node else "",
        )
    best = _route(ctx, usable) or usable[0]
    detail = listed + _("; suggested: NCCL_SOCKET_IFNAME={n} GLOO_SOCKET_IFNAME={n}").format(
        n=best.name
    )
    set_already = ctx.env.get("NCCL_SOCKET_IFNAME") or ctx.env.get("GLOO_SOCKET_IFNAME")
    if ctx.multi_node and len(usable) > 1 and not set_already:
        return Result(
            "network",
            "warn",
            detail + _(" (several interfaces: NCCL and gloo may pick different ones)"),
            _("export NCCL_SOCKET_IFNAME={n} GLOO_SOCKET_IFNAME={n} on every node").format(
                n=best.name
            ),
        )
    return Result("network", "pass", detail)


def _ifname_matches(value: str, found: list[Interface], exact: bool) -> bool:
    """Whether NCCL_SOCKET_IFNAME (prefixes; ``^`` excludes, ``=`` means exact) or
    GLOO_SOCKET_IFNAME (exact names) selects at least one interface that is up."""
    up = [i.name for i in found if i.up and i.address]
    if value.startswith("^"):
        return True  # an exclusion list always leaves NCCL something to try
    if value.startswith("="):
        exact, value = True, value[1:]
    wanted = [w.strip() for w in value.split(",") if w.strip()]
    if exact:
        return any(w in up for w in wanted)
    return any(name.startswith(w) for w in wanted for name in up)


def route_source(ctx: Context) -> str | None:
    """The address this host reaches the master from (a UDP connect picks the route and
    sends nothing), or None when the master does not resolve or is unreachable."""
    addr = ctx.addr
    addresses = resolve(addr) if addr else []
    if isinstance(addresses, str) or not addresses:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addresses[0], ctx.port))
            return str(s.getsockname()[0])
    except OSError:
        return None


def _route(ctx: Context, usable: list[Interface]) -> Interface | None:
    """The interface this host would use to reach the master, when there is one."""
    source = route_source(ctx)
    return next((i for i in usable if i.address == source), None)

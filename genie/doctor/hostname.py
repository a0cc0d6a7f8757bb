"""What this node tells the others about itself: its hostname (torch's rendezvous advertises a
node by it, and gloo binds what it resolves to) and the interfaces gloo and NCCL would bind.

Both checks apply to several nodes only (a master address, or a multi-node project). They
compare with the route to the master: the address and interface this node reaches it from.
"""

from __future__ import annotations

import ipaddress
import socket

from genie import compat
from genie.doctor.base import Context, Result, Status
from genie.doctor.network import Interface, interfaces, resolve, route_source
from genie.i18n import _


def _covered(ctx: Context) -> bool:
    """Whether the project's launch script passes this node's own address and interface (a
    multi-node project on a torch with ``--local_addr``)."""
    spec = ctx.spec
    return bool(spec and spec.multi_node and compat.features(spec.torch)["local_addr"])


def _owner(found: list[Interface], address: str) -> Interface | None:
    return next((i for i in found if i.address == address), None)


def hostname(ctx: Context) -> Result | None:
    """The hostname resolves to the address this node reaches the master from."""
    if ctx.addr is None:
        return None
    name, found = socket.gethostname(), interfaces(ctx.net_path)
    source = route_source(ctx)
    addresses = resolve(name)
    if isinstance(addresses, str):
        problem = _("{h} does not resolve here ({why})").format(h=name, why=addresses)
    elif source is not None and source in addresses:
        detail = _("{h} -> {a}, the address this node reaches the master from").format(
            h=name, a=source
        )
        return Result("hostname", "pass", detail)
    elif all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        problem = _("{h} -> {a} is loopback (Debian's default for a machine's own name)").format(
            h=name, a=", ".join(addresses)
        )
    else:
        problem = _("{h} -> {a}, not the address on the route to the master ({s})").format(
            h=name, a=", ".join(addresses), s=source or "?"
        )
    problem += _(": the rendezvous advertises this node by that name and gloo binds it")
    fix = _(
        "map {h} to {s} in /etc/hosts (and on the other nodes), or launch with "
        "torchrun --local_addr={s} and GLOO_SOCKET_IFNAME={i}"
    ).format(h=name, s=source or _("this node's IP"), i=_route_name(found, source))
    if _covered(ctx):
        detail = problem + _(
            "; launch/multi_node.sh passes --local_addr and GLOO_SOCKET_IFNAME, a torchrun "
            "started by hand would hang"
        )
        return Result("hostname", "warn", detail, fix)
    return Result("hostname", "fail", problem, fix)


def _route_name(found: list[Interface], source: str | None) -> str:
    owner = _owner(found, source) if source else None
    return owner.name if owner else "IFACE"


def binding(ctx: Context) -> Result | None:
    """The interfaces gloo and NCCL would bind leave towards the master."""
    if ctx.addr is None:
        return None
    found = interfaces(ctx.net_path)
    source = route_source(ctx)
    route = _owner(found, source) if source else None
    if route is None:
        return Result("binding", "warn", _("no route to the master from here to compare with"))
    gloo = ctx.env.get("GLOO_SOCKET_IFNAME") or _gloo_default(found)
    nccl = ctx.env.get("NCCL_SOCKET_IFNAME") or _nccl_default(found)
    detail = _("route to the master: {r} ({a}); gloo would bind {g}, NCCL {n}").format(
        r=route.name, a=route.address, g=gloo or "-", n=nccl or "-"
    )
    wrong = [who for who, name in (("gloo", gloo), ("NCCL", nccl)) if name != route.name]
    if not wrong:
        return Result("binding", "pass", detail)
    status: Status = "warn" if _covered(ctx) else "fail"
    if _covered(ctx):
        detail += _("; launch/multi_node.sh exports GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME")
    fix = _("export GLOO_SOCKET_IFNAME={i} NCCL_SOCKET_IFNAME={i} on this node").format(
        i=route.name
    )
    return Result("binding", status, detail, fix)


def _gloo_default(found: list[Interface]) -> str:
    """gloo without GLOO_SOCKET_IFNAME: the interface of the address the hostname resolves to,
    loopback when it resolves to nothing of this node's."""
    addresses = resolve(socket.gethostname())
    if isinstance(addresses, str):
        return "lo"
    owner = next((i for a in addresses if (i := _owner(found, a))), None)
    return owner.name if owner else "lo"


def _nccl_default(found: list[Interface]) -> str:
    """NCCL without NCCL_SOCKET_IFNAME: the first interface that is up with an address, not
    loopback and not a container bridge (``docker*``)."""
    usable = [i for i in found if i.up and i.address and i.name != "lo"]
    chosen = next((i for i in usable if not i.name.startswith("docker")), None)
    return chosen.name if chosen else "lo"

"""Checks that need a project (``--project DIR``): installed packages against the pins genie
wrote, and the processes per node against the GPUs this node can use."""

from __future__ import annotations

import json
import os
import re
import subprocess

from genie import compat
from genie.doctor.base import Context, Result, command, why
from genie.doctor.facts import torch_info
from genie.i18n import _, ngettext
from genie.registry import FRAMEWORKS

_CLAUSE = re.compile(r"^(>=|<=|==|!=|<|>)\s*([\d.]+)$")
_NAME = re.compile(r"^([A-Za-z0-9_.-]+)\s*(.*)$")
_VERSIONS = (
    "import json, sys\nfrom importlib import metadata\nout = {}\nfor n in sys.argv[1:]:\n"
    "    try:\n        out[n] = metadata.version(n)\n    except metadata.PackageNotFoundError:\n"
    "        out[n] = None\nprint(json.dumps(out))"
)
ALWAYS = ("numpy",)  # checked even when unpinned: torch needs a numpy it was built for


def release(version: str) -> tuple[int, ...]:
    """``"2.14.1+cu130"`` -> ``(2, 14, 1)``."""
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets ``specifier`` (the ``>=a.b,<c.d`` pins genie writes)."""
    have = release(version)
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        m = _CLAUSE.match(clause)
        if m is None:
            continue  # a form genie does not write: not judged
        op, want = m.group(1), release(m.group(2))
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, "<": a < b, ">": a > b}[op]
        if not ok:
            return False
    return True


def pins(ctx: Context) -> dict[str, str]:
    """Package -> specifier, by the rules genie pinned the project's requirements with."""
    spec = ctx.spec
    assert spec is not None
    lines = compat.requirements(spec.torch, spec.python, spec.framework, spec.task, spec.tracker)
    found = {}
    for line in lines:
        m = _NAME.match(line)
        if m and m.group(1) != "pytest":
            found[m.group(1)] = m.group(2)
    for name in ALWAYS:
        found.setdefault(name, "")
    return found


def packages(ctx: Context) -> Result | None:
    if ctx.spec is None:
        return None
    wanted = pins(ctx)
    try:
        installed = json.loads(command([ctx.python, "-c", _VERSIONS, *wanted], ctx.env))
    except (OSError, subprocess.SubprocessError, ValueError) as err:
        return Result(
            "packages", "fail", _("cannot ask {py}: {why}").format(py=ctx.python, why=why(err))
        )
    good: list[str] = []
    bad: list[str] = []
    other_torch: list[str] = []
    for name, specifier in wanted.items():
        version = installed.get(name)
        if version is None and not specifier:
            continue  # unpinned and absent: not needed
        if version is None:
            bad.append(_("{n} missing (wants {s})").format(n=name, s=specifier))
        elif not satisfies(version, specifier):
            found = _("{n} {v} (wants {s})").format(n=name, v=version, s=specifier)
            (other_torch if name in compat.TORCH_FAMILY else bad).append(found)
        else:
            good.append(f"{name} {version}")
    torch_missing = any(installed.get(n) is None for n in compat.TORCH_FAMILY if n in wanted)
    if bad:
        detail = "; ".join(bad + other_torch)
        detail += _("; fine: {g}").format(g=", ".join(good)) if good else ""
        # a torch of another version stays: it may be this machine's on purpose
        fix = compat.install_command(ctx.project_dir, torch=torch_missing)
        return Result("packages", "fail", detail, fix)
    if other_torch:
        detail = _(
            "{found}: another torch than the one planned (the cluster's), fine for a local "
            "test; the rest is as pinned"
        ).format(found="; ".join(other_torch))
        fix = _("where the project really runs: {install}").format(
            install=compat.install_command(ctx.project_dir)
        )
        return Result("packages", "warn", detail, fix)
    return Result("packages", "pass", ", ".join(good))


def processes(ctx: Context) -> Result | None:
    spec = ctx.spec
    if spec is None:
        return None
    per_node = spec.processes_per_node
    if not spec.gpus_per_node:
        cpus = os.cpu_count() or 1
        detail = _("{n} CPU process(es) per node with gloo; {c} CPU core(s) here").format(
            n=per_node, c=cpus
        )
        if per_node > cpus:
            return Result(
                "processes",
                "warn",
                detail,
                _(
                    "use --nproc-per-node {c} or fewer: more processes than cores only "
                    "time-share them"
                ).format(c=cpus),
            )
        return Result("processes", "pass", detail)
    # a one-process framework (DataParallel) drives every GPU of the node
    want = per_node if FRAMEWORKS[spec.framework].torchrun else spec.gpus_per_node
    usable = int(torch_info(ctx).get("devices", 0) or 0)
    detail = ngettext(
        "the project uses {w} GPU per node; torch sees {u} here",
        "the project uses {w} GPUs per node; torch sees {u} here",
        want,
    ).format(w=want, u=usable)
    if usable < want:
        fix = _("run on a node with {w} GPUs").format(w=want)
        if usable:
            fix += _(", or launch with --nproc_per_node {u} (the smoke test does)").format(u=usable)
        return Result("processes", "fail", detail, fix)
    return Result("processes", "pass", detail)

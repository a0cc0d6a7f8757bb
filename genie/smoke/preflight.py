"""The preflight's verdict in a multi-node smoke run: ``launch/multi_node.sh N --preflight``
on every node first, so that what breaks between nodes is named in one line each, within
seconds, before training starts. Pure: the nodes' output in, problems out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from genie.i18n import _

MARKER = "GENIE_PREFLIGHT "  # the verdict line of launch/preflight.py


@dataclass
class Preflight:
    ran: bool  # some node printed a verdict
    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # world, backend, gbps

    @property
    def passed(self) -> bool:
        return self.ran and not self.fails


def read(outputs: list[str]) -> Preflight:
    """Node 0's verdict when it printed one (it saw every node), else any node's; each node
    that could not reach node 0 adds its own reason."""
    verdicts: list[tuple[int, dict[str, Any]]] = []
    for node, text in enumerate(outputs):
        for line in text.splitlines():
            at = line.find(MARKER)
            if at >= 0:
                try:
                    verdicts.append((node, json.loads(line[at + len(MARKER) :])))
                except json.JSONDecodeError:
                    continue
    if not verdicts:
        return Preflight(ran=False)
    verdicts.sort(key=lambda v: (v[0], "world" not in v[1]))
    main = verdicts[0][1]
    fails = list(main.get("fails", []))
    for _node, other in verdicts[1:]:
        fails += [f for f in other.get("fails", []) if f not in fails]
    facts = {k: v for k, v in main.items() if k not in ("ok", "fails", "warns")}
    return Preflight(True, fails, list(main.get("warns", [])), facts)


def note(found: Preflight) -> str | None:
    """A line for the verdict table: what the preflight measured."""
    if not found.passed or "gbps" not in found.facts:
        return None
    return _("preflight: every node alike, all_reduce over {w} ranks, {b:.2f} GB/s").format(
        w=found.facts.get("world"), b=float(found.facts["gbps"])
    )

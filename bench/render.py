"""How long genie takes to render related projects (every torch version x framework of the
default task, as genie's tests and a re-targeting upgrade do), with black's output remembered
(genie.generate.engine.formatted) beside the baseline of formatting every file afresh, in one
run, alternating the two.

    python bench/render.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from genie import compat  # noqa: E402
from genie.detect import Machine  # noqa: E402
from genie.errors import SpecError  # noqa: E402
from genie.generate import engine  # noqa: E402
from genie.spec import build_spec  # noqa: E402

MACHINE = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0")
ROUNDS = 3


def specs() -> list:
    found = []
    for framework in ("ddp", "lightning", "hf", "dp"):
        for release in compat.RELEASES:
            python = "3.10" if release.version >= (2, 0) else "3.8"
            raw = {"name": "p", "torch": release.minor, "framework": framework, "python": python}
            try:
                found.append(build_spec(raw, MACHINE))
            except SpecError:
                continue
    return found


def seconds_per_render(projects: list, remembered: bool) -> float:
    engine.formatted.cache_clear()
    start = time.perf_counter()
    for spec in projects:
        if not remembered:
            engine.formatted.cache_clear()  # the baseline: black on every file
        engine.render(spec)
    return (time.perf_counter() - start) / len(projects)


def main() -> None:
    projects = specs()
    engine.render(projects[0])  # imports and the template read once, outside the timing
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(ROUNDS):
        for remembered in (False, True):
            times[remembered].append(seconds_per_render(projects, remembered))
    afresh, kept = statistics.median(times[False]), statistics.median(times[True])
    print(f"{len(projects)} related projects, median of {ROUNDS} alternating rounds")
    print(f"  black on every file (baseline)  {afresh:.3f} s per render")
    print(f"  black's output remembered       {kept:.3f} s per render  ({afresh / kept:.1f}x)")


if __name__ == "__main__":
    main()

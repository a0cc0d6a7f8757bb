"""How long ``genie doctor`` takes on this machine (target: under 15 s).

    python bench/doctor.py [--runs 3]

The median wall-clock seconds of ``genie doctor --json`` (every check, the 2-process
all_reduce included), and the slowest run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

TARGET = 15.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    env = {**os.environ, "NO_COLOR": "1"}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "genie", "doctor", "--json"], env=env,
                       capture_output=True, check=False)  # fmt: skip
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    verdict = "ok" if max(times) <= TARGET else "MISSED"
    print(f"genie doctor: median {median:.2f} s, slowest {max(times):.2f} s over {runs} runs, "
          f"{os.cpu_count()} CPUs   target <= {TARGET:.0f} s: {verdict}")  # fmt: skip


if __name__ == "__main__":
    main()

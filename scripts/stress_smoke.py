"""Run the smoke test of one generated project N times in a row and count failures.

    python scripts/stress_smoke.py [--runs 50]

Guards against the gloo abort at interpreter exit (pytorch/pytorch#190489): a correct but
naive DDP script hits it in about 1 run of 8 on torch 2.14.1. Not part of CI (minutes long).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--framework", default="ddp")
    parser.add_argument("--task", default="custom")
    args = parser.parse_args()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "NO_COLOR": "1"}
    with tempfile.TemporaryDirectory(prefix="genie-stress-") as tmp:
        project = Path(tmp, "proj")
        subprocess.run(
            [sys.executable, "-m", "genie", "new", str(project), "--yes", "--no-smoke",
             "--framework", args.framework, "--task", args.task],
            check=True, env=env, capture_output=True,
        )  # fmt: skip
        failures = 0
        started = time.perf_counter()
        for i in range(1, args.runs + 1):
            result = subprocess.run(
                [sys.executable, "-m", "genie", "smoke", str(project)],
                env=env, capture_output=True, text=True,
            )  # fmt: skip
            if result.returncode != 0:
                failures += 1
                print(f"run {i}: FAILED\n{result.stdout[-2000:]}\n{result.stderr[-500:]}")
            print(f"run {i}/{args.runs}: {'ok' if result.returncode == 0 else 'FAIL'}", flush=True)
        seconds = time.perf_counter() - started
        print(f"\n{failures} failures in {args.runs} consecutive smoke runs "
              f"({args.framework}/{args.task}, {seconds:.0f} s)")  # fmt: skip
        sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

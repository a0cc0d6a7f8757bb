"""Training throughput of generated projects vs the same framework used by hand.

    python bench/throughput.py [--runs 3]

Every run trains the same task (32768 synthetic samples, 32 -> 256 -> 256 -> 10 MLP,
batch 32 per process, 2 CPU processes with gloo) for 1 and for 1 + EXTRA epochs; the
difference removes start-up and shutdown, so samples/s per process = EXTRA epochs x
samples / 2 processes / time difference. Generated projects keep what they do every
epoch (the DDP project writes an atomic checkpoint, Lightning and HF their own
checkpoints); the baselines keep their framework's defaults (the minimal DDP loop writes
no checkpoint, Lightning by hand one per epoch, the HF Trainer one per 500 steps).
DataLoader workers are off on both sides: with 2 ranks on 2 cores, worker processes only
add scheduling noise.
Targets: generated ddp >= 0.95x the minimal DDP loop; lightning and hf no slower than
the same framework by hand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable
# Epochs long enough that what a project does once per epoch (a checkpoint) weighs about
# as little as it does in real training.
SAMPLES, PROCESSES, EXTRA = 32768, 2, 3
ENV = {
    **os.environ,
    "CUDA_VISIBLE_DEVICES": "",
    "NO_COLOR": "1",
    "PYTHONPATH": str(HERE / "baselines"),
    "BENCH_SAMPLES": str(SAMPLES),
}
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={PROCESSES}"]


def seconds(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=ENV, check=True, capture_output=True)
    return time.perf_counter() - start


def rate(seconds_diff: float) -> float:
    """Samples per second per process, from the time EXTRA more epochs took."""
    return EXTRA * SAMPLES / PROCESSES / seconds_diff


def paired(ours, ours_cwd: Path, theirs, theirs_cwd: Path, runs: int):
    """Median throughput of each side and the median of the per-run ratios.

    Each run times both sides back to back, in alternating order, so the slow drifts of
    a shared 2-core machine hit both sides of a ratio alike.
    """
    mine, base, ratios = [], [], []
    for i in range(runs):
        sides = [(ours, ours_cwd, mine), (theirs, theirs_cwd, base)]
        for make_cmd, cwd, out in sides if i % 2 == 0 else sides[::-1]:
            short = seconds(make_cmd(1), cwd)
            out.append(rate(seconds(make_cmd(1 + EXTRA), cwd) - short))
        ratios.append(mine[-1] / base[-1])
    return statistics.median(mine), statistics.median(base), statistics.median(ratios)


def generated(work: Path, framework: str):
    project = work / framework
    subprocess.run(
        [
            PY,
            "-m",
            "genie",
            "new",
            str(project),
            "--yes",
            "--no-smoke",
            "--framework",
            framework,
            "--batch-size",
            "32",
            "--lr",
            "0.001",
        ],
        env=ENV,
        check=True,
        capture_output=True,
    )

    def cmd(epochs: int) -> list[str]:
        shutil.rmtree(project / "ck", ignore_errors=True)
        return [
            *TORCHRUN,
            "train.py",
            "--epochs",
            str(epochs),
            "--checkpoint-dir",
            "ck",
            "--log-every",
            "1000000",
            "--num-samples",
            str(SAMPLES),
            "--num-workers",
            "0",
            # one validation sample: the baselines do not validate
            "--val-fraction",
            "0",
        ]

    return cmd, project


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=("ddp", "lightning", "hf"), help="one framework")
    options = parser.parse_args()
    runs = options.runs
    work = Path(tempfile.mkdtemp(prefix="genie-throughput-"))
    base = HERE / "baselines"
    try:
        rows = []
        baselines = {
            "ddp": ("minimal DDP loop", ["ddp_loop.py"]),
            "lightning": ("Lightning by hand", ["lightning_by_hand.py"]),
            "hf": ("HF Trainer by hand", ["hf_by_hand.py", "{epochs}", str(work / "hf-out")]),
        }
        for framework, (baseline_name, script) in baselines.items():
            if options.only and framework != options.only:
                continue

            def baseline(epochs: int, script: list[str] = script) -> list[str]:
                args = [a.format(epochs=epochs) for a in script[1:]] or [str(epochs)]
                return [*TORCHRUN, str(base / script[0]), *args]

            cmd, project = generated(work, framework)
            rows.append((framework, baseline_name, *paired(cmd, project, baseline, work, runs)))
        print(
            f"samples/s per process, 2 CPU processes (gloo), median of {runs} runs; "
            "ratio = median of the per-run ratios (both sides timed back to back)\n"
        )
        for framework, name, ours, theirs, ratio in rows:
            target = 0.95 if framework == "ddp" else 1.0
            verdict = "ok" if ratio >= target else "MISSED"
            print(
                f"generated {framework:<10} {ours:>8.0f}   {name:<20} {theirs:>8.0f}   "
                f"ratio {ratio:4.2f}   target >= {target:.2f}x: {verdict}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

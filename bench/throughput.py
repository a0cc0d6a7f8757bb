"""Training throughput of generated projects vs the same framework used by hand.

    python bench/throughput.py [--runs 3] [--only ddp|lightning|hf]

Every run trains the same task (32768 synthetic samples, 32 -> 256 -> 256 -> 10 MLP,
batch 32 per process, 2 CPU processes with gloo) for 1 and for 1 + EXTRA epochs; the
difference removes start-up and shutdown, so samples/s per process = EXTRA epochs x
samples / 2 processes / time difference.

Each generated project is timed twice:
- "same math": with the project's own flags set to do the per-step work its baseline does
  (SAME_MATH below: no gradient clipping against the minimal loop and Lightning by hand,
  whose defaults do not clip; no weight decay against the HF Trainer, whose default is 0;
  no tracker, as no baseline logs). The targets apply here:
  they are about what genie's scaffolding costs, not what a chosen feature costs.
- "defaults": as `genie new` writes it (clipping at norm 1.0, TensorBoard), for the record.
Both keep what a generated project always does once per epoch (a validation pass, here
over one held-out sample, and its checkpoints: atomic last/best for ddp, Lightning's and
HF's own otherwise); the baselines keep their framework's defaults (the minimal DDP loop
writes no checkpoint, Lightning by hand one per epoch, the HF Trainer one per 500 steps).
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


def seconds(cmd: list[str], cwd: Path, tries: int = 2) -> float:
    """Wall time of one run; a run that fails is reported and timed again, once."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        print(f"run failed ({done.returncode}): {' '.join(cmd[-4:])}: {tail}", file=sys.stderr)
        if tries > 1:
            return seconds(cmd, cwd, tries - 1)
        raise SystemExit("a benchmark run failed twice; see above")
    return time.perf_counter() - start


def rate(seconds_diff: float) -> float:
    """Samples per second per process, from the time EXTRA more epochs took."""
    return EXTRA * SAMPLES / PROCESSES / seconds_diff


def interleaved(sides: list, runs: int) -> list[list[float]]:
    """Throughput of each side in each run; side = (make_cmd, cwd).

    Each run times every side back to back, in an order that rotates from run to run, so
    the slow drifts of a shared 2-core machine hit all sides of a ratio alike.
    """
    rates: list[list[float]] = [[] for _ in sides]
    for i in range(runs):
        order = list(range(len(sides)))
        order = order[i % len(order) :] + order[: i % len(order)]
        for k in order:
            make_cmd, cwd = sides[k]
            short = seconds(make_cmd(1), cwd)
            rates[k].append(rate(seconds(make_cmd(1 + EXTRA), cwd) - short))
    return rates


def per_run(mine: list[float], base: list[float]) -> list[float]:
    """The ratio of each run (both sides timed in the same run)."""
    return [a / b for a, b in zip(mine, base)]


def ratio(mine: list[float], base: list[float]) -> float:
    return statistics.median(per_run(mine, base))


def spread(mine: list[float], base: list[float]) -> str:
    """The lowest and highest per-run ratio: how far one run can be off."""
    ratios = per_run(mine, base)
    return f"[{min(ratios):.2f}-{max(ratios):.2f}]"


def generated(work: Path, framework: str, flags: list[str]):
    project = work / framework
    work.mkdir(parents=True, exist_ok=True)
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
        for output in ("ck", "runs"):
            shutil.rmtree(project / output, ignore_errors=True)
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
            *flags,
        ]

    return cmd, project


# The generated project's flags that give it its baseline's per-step work: the minimal loop
# and Lightning by hand do not clip gradients (the HF Trainer clips at 1.0, as genie's
# default does, but its default weight decay is 0, genie's 0.01), and none of the baselines
# logs to a tracker.
SAME_MATH = {
    "ddp": ["--max-grad-norm", "0", "--tracker", "none"],
    "lightning": ["--max-grad-norm", "0", "--tracker", "none"],
    "hf": ["--weight-decay", "0", "--tracker", "none"],
}
TARGET = {"ddp": 0.95, "lightning": 1.0, "hf": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=("ddp", "lightning", "hf"), help="one framework")
    options = parser.parse_args()
    runs = options.runs
    work = Path(tempfile.mkdtemp(prefix="genie-throughput-"))
    base = HERE / "baselines"
    try:
        baselines = {
            "ddp": ("minimal DDP loop", ["ddp_loop.py"]),
            "lightning": ("Lightning by hand", ["lightning_by_hand.py"]),
            "hf": ("HF Trainer by hand", ["hf_by_hand.py", "{epochs}", str(work / "hf-out")]),
        }
        print(
            f"samples/s per process, 2 CPU processes (gloo), median of {runs} runs; "
            "ratio = median of the per-run ratios [lowest-highest] (all sides of a run timed "
            "back to back)\n",
            flush=True,
        )
        for framework, (name, script) in baselines.items():
            if options.only and framework != options.only:
                continue

            def baseline(epochs: int, script: list[str] = script) -> list[str]:
                args = [a.format(epochs=epochs) for a in script[1:]] or [str(epochs)]
                return [*TORCHRUN, str(base / script[0]), *args]

            same, defaults, theirs = interleaved(
                [
                    generated(work / "same", framework, SAME_MATH[framework]),
                    generated(work / "defaults", framework, []),
                    (baseline, work),
                ],
                runs,
            )
            target = TARGET[framework]
            verdict = "ok" if ratio(same, theirs) >= target else "MISSED"
            mid = statistics.median
            print(
                f"generated {framework:<9} same math {mid(same):>6.0f}   {name:<18} "
                f"{mid(theirs):>6.0f}   ratio {ratio(same, theirs):4.2f} "
                f"{spread(same, theirs)}   target >= {target:.2f}x: {verdict}\n"
                f"generated {framework:<9} defaults  {mid(defaults):>6.0f}   "
                f"{'':<18} {'':>6}   ratio {ratio(defaults, theirs):4.2f} "
                f"{spread(defaults, theirs)}   ({' '.join(SAME_MATH[framework])} not given)",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Training throughput of generated projects vs the same framework used by hand.

    python bench/throughput.py [--rounds 12] [--only ddp|lightning|hf]
    python bench/throughput.py --task llm [--rounds 12]
    python bench/throughput.py --recording-cost [--rounds 8]

All sides train the same task: 32768 synthetic samples, a 32 -> 256 -> 256 -> 10 MLP, batch
32 per process, 2 CPU processes with gloo, DataLoader workers off (with 2 ranks on 2 cores,
worker processes only add scheduling noise).

How it is timed. For each framework, one torchrun job imports the generated custom
project's train.py and the hand-written baseline (bench/baselines/) side by side, and its two
processes call their training functions in turn, each for EPOCHS epochs: no interpreter
start, import or process-group set-up is timed, and the sides of a ratio run seconds apart,
sharing the slow drifts of a shared 2-core machine. (Timing whole torchrun runs one after
another, as this script first did, left one run's ratio anywhere within +-20%.) Each round
calls every side once, in an order from a balanced Latin square (every side in every slot
and after every other side equally often), after a warm-up round that is not counted.
Two figures per call, in samples/s per process:
- per step: batch / the median time between two optimizer steps (a global optimizer hook
  stamps every step, the frameworks' too). A step is data loading, forward, backward,
  all-reduce, optimizer and the loop's bookkeeping; the median is what training runs at
  between epoch boundaries, and shrugs off the bursts of other load that make a single
  wall-clock figure noisy. The targets are judged on it.
- per call: EPOCHS x samples / 2 processes / the call's wall time between barriers, which
  adds what happens once per epoch or call (validation, checkpoints, building the Trainer,
  loading the best checkpoint at the end), for the record.
Ratio = median of the per-round ratios, with a distribution-free 95% confidence interval
for that median in brackets. A fourth side runs the same-math project once more and is
compared with it: that A/A ratio, between identical code, shows what the bench can resolve.

Each generated project is timed twice:
- "same math": with the project's own flags set to do the per-step work its baseline does
  (SAME_MATH below: no gradient clipping against the minimal loop and Lightning by hand,
  whose defaults do not clip; no weight decay against the HF Trainer, whose default is 0;
  no tracker, as no baseline logs). The targets apply here: they are about what genie's
  scaffolding costs, not what a chosen feature costs.
- "defaults": as `genie new` writes it (clipping at norm 1.0, TensorBoard), for the record.
Both keep what a generated project always does once per epoch (a validation pass, here
over one held-out sample, and its checkpoints: atomic last/best for ddp, Lightning's and
HF's own otherwise); the baselines keep their framework's defaults (the minimal DDP loop
writes no checkpoint, Lightning by hand one per epoch, the HF Trainer one per 500 steps).
Targets: generated ddp >= 0.95x the minimal DDP loop; lightning and hf no slower than
the same framework by hand.

--task llm times the llm project (ddp framework) in tokens/s per process against a minimal
causal-LM DDP loop (bench/baselines/lm_loop.py): its --smoke model (a 2-layer Llama, hidden
64), blocks of 128 tokens, 8 per process and step, 8 steps an epoch, LM_EPOCHS epochs a
call; same math: no weight decay, no clipping, no activation checkpointing, fp32. Target:
>= 0.95x. At this size a step is mostly the loop's own work, so the ratio prices genie's
scaffolding at its most visible.

The ddp job runs as a generated project does: the Flight Recorder on and hang.py's
heartbeat thread running (both process-wide, so the baseline is recorded too).
--recording-cost prices that: it runs the ddp job with recording off, on, off, on (one
process group cannot switch the Flight Recorder), and prints each job's per-step rates and
the on/off ratios beside each job's A/A resolution.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
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
SAMPLES, PROCESSES, EPOCHS, BATCH = 32768, 2, 2, 32
LM_EPOCHS, LM_SEQ_LEN, LM_BATCH = 6, 128, 8  # --task llm (lm_loop.py has the same shapes)
MARKER = "BENCH "
ENV = {
    **os.environ,
    "CUDA_VISIBLE_DEVICES": "",
    "NO_COLOR": "1",
    "BENCH_SAMPLES": str(SAMPLES),
}

# The generated project's flags that give it its baseline's per-step work: the minimal loop
# and Lightning by hand do not clip gradients (the HF Trainer clips at 1.0, as genie's
# default does, but its default weight decay is 0, genie's 0.01), and none of the baselines
# logs to a tracker.
SAME_MATH = {
    "ddp": ["--max-grad-norm", "0", "--tracker", "none"],
    "lightning": ["--max-grad-norm", "0", "--tracker", "none"],
    "hf": ["--weight-decay", "0", "--tracker", "none"],
}
BASELINE = {  # framework: (name, module in bench/baselines with run(epochs, out))
    "ddp": ("minimal DDP loop", "ddp_loop"),
    "lightning": ("Lightning by hand", "lightning_by_hand"),
    "hf": ("HF Trainer by hand", "hf_by_hand"),
}
TARGET = {"ddp": 0.95, "lightning": 1.0, "hf": 1.0}
# --task llm: the generated llm project's flags for its baseline's per-step work, and its
# --smoke shapes as lm_loop.py has them (checkpoints and logs out of the timed steps)
LM_SAME_MATH = ["--weight-decay", "0", "--max-grad-norm", "0", "--no-activation-checkpointing",
                "--tracker", "none", "--precision", "fp32"]  # fmt: skip
LM_FLAGS = ["--smoke", "--seq-len", str(LM_SEQ_LEN), "--batch-size", str(LM_BATCH),
            "--save-every", "1000000"]  # fmt: skip
# "again" is "same" once more: the ratio of the two is what the bench reads between
# identical code (an A/A check), its resolution on this machine.
SIDES = ("same", "defaults", "baseline", "again")


def orders(n: int) -> list[list[int]]:
    """A balanced Latin square (Williams design, n even): across its n rows every side runs
    in every position once and follows every other side once, so neither a slot in the
    round nor what ran just before (a carry-over) favours a side."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    return [[(k + shift) % n for k in first] for shift in range(n)]


def project_argv(epochs: int, out: Path, flags: list[str], task: str = "custom") -> list[str]:
    """A generated project's command line for one timed call."""
    sized = ["--num-samples", str(SAMPLES), "--num-workers", "0"] if task == "custom" else LM_FLAGS
    return [
        "--epochs", str(epochs),
        "--checkpoint-dir", str(out / "ck"),
        "--log-dir", str(out / "runs"),
        "--log-every", "1000000",
        "--val-fraction", "0",  # one validation sample: the baselines do not validate
        *sized,
        *flags,
    ]  # fmt: skip


def worker(framework: str, project: Path, work: Path, rounds: int, task: str) -> None:
    """Runs in each torchrun process: every side in turn, timed between barriers."""
    import torch
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_post_hook

    sys.path[:0] = [str(project), str(HERE / "baselines")]
    generated = importlib.import_module("train")  # the generated project's train.py
    llm = task == "llm"
    baseline = importlib.import_module("lm_loop" if llm else BASELINE[framework][1])
    if llm:
        os.environ["BENCH_LM_VOCAB"] = str(len(generated.data.smoke_tokenizer()))
    if framework == "ddp":
        # the project's own set-up, recording for a hang as its main() does
        recording = os.environ.get("BENCH_RECORDING", "1") == "1"
        device = generated.dist_utils.setup(10, work / "hang" if recording else None)

        def call(argv: list[str]) -> None:
            args = generated.parse_args(argv)
            loader, val_loader = generated.build_loaders(args, device)
            generated.train(generated.build_run(args, device, loader), loader, val_loader)

    else:
        dist.init_process_group("gloo")  # Lightning and the Trainer join this one

        def call(argv: list[str]) -> None:
            generated.train(generated.parse_args(argv))

    same = LM_SAME_MATH if llm else SAME_MATH[framework]
    sides = {
        "same": lambda e, out: call(project_argv(e, out, same, task)),
        "defaults": lambda e, out: call(project_argv(e, out, [], task)),
        "baseline": lambda e, out: baseline.run(e, str(out)),
    }
    sides["again"] = sides["same"]
    # Every optimizer step of every side (the frameworks' too) ends here: the time between
    # two is one training step, data loading, forward, backward, all-reduce and bookkeeping.
    stamps: list[float] = []
    register_optimizer_step_post_hook(lambda *_: stamps.append(time.perf_counter()))
    precision = torch.get_float32_matmul_precision()
    rank = dist.get_rank()
    for r in range(rounds + 1):  # round 0 warms every side up and is not reported
        for side in (SIDES[k] for k in orders(len(SIDES))[r % len(SIDES)]):
            out = work / f"{side}-{r}"
            gc.collect()
            dist.barrier()
            stamps.clear()
            start = time.perf_counter()
            sides[side]((LM_EPOCHS if llm else EPOCHS) if r else 1, out)
            dist.barrier()
            seconds = time.perf_counter() - start
            # what one side sets globally must not carry over to the next
            torch.set_float32_matmul_precision(precision)
            if rank == 0:
                step = statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False))
                record = {"round": r, "side": side, "seconds": seconds, "step": step,
                          "steps": len(stamps)}  # fmt: skip
                print(MARKER + json.dumps(record))
                sys.stdout.flush()
                shutil.rmtree(out, ignore_errors=True)
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()


def generate(work: Path, framework: str, task: str = "custom") -> Path:
    project = work / f"{framework}-{task}"
    sized = ["--batch-size", str(BATCH), "--lr", "0.001"] if task == "custom" else []
    subprocess.run(
        [PY, "-m", "genie", "new", str(project), "--yes", "--no-smoke",
         "--framework", framework, "--task", task, *sized],
        env=ENV, check=True, capture_output=True,
    )  # fmt: skip
    return project


def measure(
    framework: str,
    work: Path,
    rounds: int,
    projects: Path | None,
    recording: bool = True,
    task: str = "custom",
) -> dict[tuple[str, str], list[float]]:
    """samples/s (--task llm: tokens/s) per process, one figure per round, by (side, "step"
    or "call")."""
    if projects:
        project = projects.resolve() / (framework if task == "custom" else f"{framework}-{task}")
    else:
        project = work / f"{framework}-{task}"
        if not project.exists():
            generate(work, framework, task)
    cmd = [
        PY, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={PROCESSES}",
        str(Path(__file__).resolve()), "--worker", framework, "--task", task,
        "--project", str(project), "--work", str(work / "runs"), "--rounds", str(rounds),
    ]  # fmt: skip
    env = {**ENV, "BENCH_RECORDING": "1" if recording else "0"}
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"the {framework} benchmark job failed ({done.returncode}):\n{tail}")
    records = {}
    for line in done.stdout.splitlines():
        if line.startswith(MARKER):
            r = json.loads(line[len(MARKER) :])
            records[r["round"], r["side"]] = r
    rates = {}
    for side in SIDES:
        timed = [records[r, side] for r in range(1, rounds + 1)]
        if task == "llm":
            tokens = LM_BATCH * LM_SEQ_LEN  # per process and step
            rates[side, "step"] = [tokens / t["step"] for t in timed]
            rates[side, "call"] = [tokens * t["steps"] / t["seconds"] for t in timed]
            continue
        rates[side, "step"] = [BATCH / t["step"] for t in timed]
        rates[side, "call"] = [EPOCHS * SAMPLES / PROCESSES / t["seconds"] for t in timed]
    return rates


def summary(mine: list[float], base: list[float]) -> tuple[float, float, float]:
    """Median of the per-round ratios and a 95% confidence interval for it.

    The interval is distribution-free: the k-th lowest and k-th highest ratio, with k the
    largest for which fewer than k of n ratios fall below the true median with probability
    at most 2.5% (binomial, p = 1/2). Below 6 rounds there is none: the range stands in.
    """
    ratios = sorted(a / b for a, b in zip(mine, base, strict=True))
    n, k, below = len(ratios), 0, 0.0
    while k < n // 2 and 2 * (below + math.comb(n, k) / 2**n) <= 0.05:
        below += math.comb(n, k) / 2**n
        k += 1
    k = max(k, 1)
    return statistics.median(ratios), ratios[k - 1], ratios[n - k]


def verdict(median: float, high: float, target: float) -> str:
    if median >= target:
        return "met"
    return "within noise (interval reaches it)" if high >= target else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--only", choices=tuple(BASELINE), help="one framework")
    parser.add_argument(
        "--task", choices=("custom", "llm"), default="custom",
        help="llm: the llm project (ddp) in tokens/s against a minimal causal-LM loop",
    )  # fmt: skip
    parser.add_argument(
        "--recording-cost",
        action="store_true",
        help="the ddp job with the Flight Recorder and heartbeats off, on, off, on",
    )
    parser.add_argument(
        "--projects",
        type=Path,
        help="use DIR/ddp, DIR/lightning and DIR/hf, generated beforehand with "
        "--batch-size 32 --lr 0.001 (for a machine without genie's own dependencies)",
    )
    parser.add_argument("--worker", choices=tuple(BASELINE), help=argparse.SUPPRESS)
    parser.add_argument("--project", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.worker, options.project, options.work, options.rounds, options.task)
        return
    work = Path(tempfile.mkdtemp(prefix="genie-throughput-"))
    unit = "tokens/s" if options.task == "llm" else "samples/s"
    print(
        f"{unit} per process, 2 CPU processes (gloo), {options.rounds} rounds. Per step: "
        "from the median step time; per call: whole training calls, wall clock. Ratio = "
        "median of the per-round ratios [95% confidence interval]\n",
        flush=True,
    )
    mid = statistics.median
    if options.recording_cost:
        try:
            recording_cost(work, options.rounds, options.projects)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        for framework, (name, _) in BASELINE.items():
            if (options.only and framework != options.only) or (
                options.task == "llm" and framework != "ddp"
            ):
                continue
            rates = measure(framework, work, options.rounds, options.projects, task=options.task)
            if options.task == "llm":
                name = "minimal causal-LM DDP loop"
            target = TARGET[framework]
            print(
                f"{framework}: {name} {mid(rates['baseline', 'step']):.0f} per step, "
                f"{mid(rates['baseline', 'call']):.0f} per call",
                flush=True,
            )
            rows = (
                ("same", "baseline", "generated, same math"),
                ("defaults", "baseline", "generated, defaults "),
                ("again", "same", "A/A, same math again"),
            )
            for side, reference, label in rows:
                step, call = (
                    summary(rates[side, kind], rates[reference, kind]) for kind in ("step", "call")
                )
                figures = "   ".join(
                    f"{mid(rates[side, kind]):>6.0f} per {kind}: "
                    f"ratio {median:4.2f} [{low:.2f}-{high:.2f}]"
                    for kind, (median, low, high) in (("step", step), ("call", call))
                )
                if side == "same":
                    note = f"target >= {target:.2f}x: {verdict(step[0], step[2], target)}"
                elif side == "defaults":
                    same = LM_SAME_MATH if options.task == "llm" else SAME_MATH[framework]
                    note = f"({' '.join(same)} not given)"
                else:
                    note = "(identical code: the bench's own resolution)"
                print(f"  {label} {figures}   {note}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def recording_cost(work: Path, rounds: int, projects: Path | None) -> None:
    """The ddp job off, on, off, on: per-step rates, and on/off ratios by job pair."""
    jobs = []
    for recording in (False, True, False, True):
        rates = measure("ddp", work, rounds, projects, recording)
        mid = statistics.median
        same, base = mid(rates["same", "step"]), mid(rates["baseline", "step"])
        aa = summary(rates["again", "step"], rates["same", "step"])
        jobs.append((same, base))
        print(
            f"recording {'on ' if recording else 'off'}: generated {same:.0f}, minimal DDP "
            f"loop {base:.0f} per step; A/A {aa[0]:.2f} [{aa[1]:.2f}-{aa[2]:.2f}]",
            flush=True,
        )
    for pair in (0, 2):
        (same_off, base_off), (same_on, base_on) = jobs[pair], jobs[pair + 1]
        print(
            f"jobs {pair + 1}-{pair + 2}, on/off: generated {same_on / same_off:.3f}, "
            f"minimal DDP loop {base_on / base_off:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

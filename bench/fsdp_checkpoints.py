"""FSDP at the size it exists for, on 2 CPU processes with a model made big on purpose (the
custom task's MLP widened by flags): per rank, side by side in one run,

- saving: today's sharded save (every rank writes its shards, in the background) beside the
  full-state save genie's FSDP projects made before (the whole state gathered onto rank 0's
  CPU, then one file): each rank's peak memory above its training state while it saves,
  and when training could go on against when the write was done;
- accumulating gradients over 4 micro-batches: gradient memory per rank with a
  reduce-scatter at every micro-batch (today) beside FSDP's no_sync (before).

    python bench/fsdp_checkpoints.py

Takes a few minutes and about 10 GB of memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
CPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
BIG = ["--hidden", "4096", "--depth", "15"]  # 252M parameters: 1.0 GB in fp32, 3.0 GB with Adam

# Runs inside the generated project on each rank: builds the sharded model and its
# optimizer, takes one step (Adam's moments exist), then measures what MODE asks for.
DRIVE = r"""
import json, os, sys, threading, time
import torch, torch.distributed as dist
from torch import nn
import checkpoint, config, dist_utils, fsdp, optim
import model as task
peak = {"anon": 0}
def anon():
    fields = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
    return int(fields["RssAnon"].split()[0]) * 1024
def sample():
    while True:
        peak["anon"] = max(peak["anon"], anon())
        time.sleep(0.002)
args = config.parse_args(sys.argv[1:])
device = dist_utils.setup(30)
model = fsdp.build_sharded(lambda: task.build_model(args, 10), device, args)
optimizer = optim.build_optimizer(model, args)
x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))  # the custom task's features
def micro_batch():
    nn.functional.cross_entropy(model(features=x), y).backward()
micro_batch(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
mode, out = os.environ["MODE"], {}
if mode == "accumulate" or mode == "no_sync":
    if mode == "no_sync":
        model.set_requires_gradient_sync(False)  # what genie's FSDP did before
    time.sleep(0.05)
    base = anon()  # the gradients of the step before are freed (set_to_none)
    for _ in range(3):  # the micro-batches before the last one of a step
        micro_batch()
    time.sleep(0.05)
    out["gradient_bytes"] = anon() - base  # what the accumulating gradients hold
    out["full_bytes"] = sum(p.numel() * 4 for p in model.parameters())
else:
    threading.Thread(target=sample, daemon=True).start()
    time.sleep(0.05)
    base = peak["anon"]
    dist_utils.barrier()
    started = time.perf_counter()
    if mode == "sharded":
        state = {"step": 1, "rng": [], "config": {}}
        checkpoint.save(args.checkpoint_dir, model, optimizer, state, best=False, keep=1)
        out["returned_s"] = time.perf_counter() - started  # training goes on from here
        checkpoint.finish()
    else:  # the full state gathered onto rank 0's CPU, then one file (genie before)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights, moments = get_state_dict(model, optimizer, options=options)
        if dist.get_rank() == 0:
            torch.save({"model": weights, "optimizer": moments}, args.checkpoint_dir / "full.pt")
        del weights, moments
        dist_utils.barrier()
        out["returned_s"] = time.perf_counter() - started
    out["written_s"] = time.perf_counter() - started
    time.sleep(0.05)
    out["peak_above_training"] = peak["anon"] - base
(args.checkpoint_dir / f"bench-{dist.get_rank()}.json").write_text(json.dumps(out))
dist_utils.shutdown()
"""


def generate(root: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "genie", "new", "big", "--yes", "--no-smoke", "--strategy", "fsdp"],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    (root / "big" / "drive.py").write_text(DRIVE)
    return root / "big"


def measure(project: Path, mode: str) -> dict[int, dict]:
    """Each rank's figures for ``mode``."""
    checkpoints = project / f"ck-{mode}"
    checkpoints.mkdir()
    argv = [*TORCHRUN, "drive.py", *BIG, "--checkpoint-dir", str(checkpoints)]
    done = subprocess.run(
        argv, cwd=project, env={**os.environ, **CPU_ENV, "MODE": mode},
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
    return {rank: json.loads((checkpoints / f"bench-{rank}.json").read_text()) for rank in (0, 1)}


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = generate(Path(tmp))
        runs = {
            mode: measure(project, mode) for mode in ("sharded", "full", "accumulate", "no_sync")
        }
    print("FSDP on 2 CPU processes, a 252M-parameter MLP (1.0 GB fp32; 3.0 GB with AdamW)\n")
    print("| save | rank | peak memory above training | training goes on after | written after |")
    print("|---|---|---|---|---|")
    for mode, label in (
        ("sharded", "sharded, async (today)"),
        ("full", "full state on rank 0 (before)"),
    ):
        for rank, r in sorted(runs[mode].items()):
            row = (label, rank, gib(r["peak_above_training"]), f"{r['returned_s']:.2f} s",
                   f"{r['written_s']:.2f} s")  # fmt: skip
            print("| " + " | ".join(map(str, row)) + " |")
    ratio = runs["sharded"][0]["peak_above_training"] / runs["full"][0]["peak_above_training"]
    print(f"\nrank 0's peak while saving, sharded / full state: {ratio:.2f}")
    print("\n| accumulation (4 micro-batches) | rank | gradients held | share of full gradients |")
    print("|---|---|---|---|")
    for mode, label in (
        ("accumulate", "reduce-scatter each (today)"),
        ("no_sync", "no_sync (before)"),
    ):
        for rank, r in sorted(runs[mode].items()):
            share = r["gradient_bytes"] / r["full_bytes"]
            print(f"| {label} | {rank} | {gib(r['gradient_bytes'])} | {share:.2f} |")


if __name__ == "__main__":
    main()

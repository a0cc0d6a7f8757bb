"""Memory for big models on 2 CPU processes, as a ratio to one full copy: an FSDP build
from scratch now (every rank builds on the meta device and initialises its own shard)
beside rank 0 building it whole and sending the shards (the path before, still the one for
pretrained weights) and every rank building it whole (earlier); and a ddp resume of a
checkpoint every rank sees (memory-mapped) or only rank 0 holds (sent tensor by tensor)
beside every rank unpickling a whole copy (the path before).
``tests/e2e/test_big_models_e2e.py`` runs the same script.

    python bench/big_models.py

Takes a few minutes and about 4 GB of memory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
CPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
BIG = ["--hidden", "4096", "--depth", "15"]  # 252M parameters: 1.0 GB in fp32
MEDIUM = ["--hidden", "2048", "--depth", "12"]  # 50M parameters

# Measures this rank's memory while the project builds its model (and, with RESUME, while
# it resumes a checkpoint): the peak of anonymous memory, sampled every 2 ms (pages of a
# memory-mapped checkpoint are the node's page cache, not a copy of this rank's).
DRIVE = r"""
import json, os, sys, threading, time
import torch, torch.distributed as dist
import config, dist_utils, model as task
peak = {"anon": 0}
def sample():
    while True:
        fields = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
        anon = int(fields["RssAnon"].split()[0]) + int(fields["RssShmem"].split()[0])
        peak["anon"] = max(peak["anon"], anon)
        time.sleep(0.002)
args = config.parse_args(sys.argv[1:])
device = dist_utils.setup(5)
build = lambda: task.build_model(args, 10)
threading.Thread(target=sample, daemon=True).start()
time.sleep(0.05)
base = peak["anon"]
if os.environ.get("MODE") == "fsdp":
    import fsdp
    model = fsdp.build_sharded(build, device, args)
elif os.environ.get("MODE") == "fsdp-load":  # rank 0 builds it whole and sends the shards
    import fsdp
    model = fsdp.load_sharded(build, device, args)
elif os.environ.get("MODE") == "fsdp-full":  # every rank builds it whole, then shards
    import fsdp
    model = fsdp.shard(build().to(device), device, args)
else:
    import checkpoint, optim
    model = build().to(device)
    optimizer = optim.build_optimizer(model, args)
    scheduler = optim.lr_schedule(optimizer, 10, 0.0)
    scaler = optim.make_scaler(args.precision)
    # rank 1's checkpoint directory: rank 0's (shared), or one of its own (per-node disks)
    where = args.checkpoint_dir / ("node1" if os.environ["MODE"] == "per-node" else "node0")
    where = args.checkpoint_dir / "node0" if dist.get_rank() == 0 else where
    if os.environ["MODE"] == "save":
        model(features=torch.randn(2, 32)).sum().backward()
        optimizer.step()  # the optimizer's moments exist from here
        position = checkpoint.Position()
        state = checkpoint.training_state(model, optimizer, scaler, scheduler, position, args)
        if dist.get_rank() == 0:
            checkpoint.save_atomic(where / "last.pt", state)
    elif os.environ["MODE"] == "copy":  # every rank unpickles a whole copy (before)
        state = checkpoint.load_state(where / "last.pt")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    elif os.environ["MODE"] != "build":
        checkpoint.resume(where / "last.pt", model, optimizer, scaler, scheduler, None)
time.sleep(0.05)
with torch.device("meta"):
    params = sum(p.numel() * p.element_size() for p in build().parameters())
print("MEMORY " + json.dumps({"rank": dist.get_rank(), "peak": (peak["anon"] - base) * 1024,
                              "full": params}), flush=True)
dist_utils.shutdown()
"""


def measure(project: Path, mode: str, args: list[str], **env: str) -> dict:
    done = subprocess.run(
        [*TORCHRUN, "drive.py", "--smoke", *args], cwd=project, capture_output=True, text=True,
        env={**os.environ, **CPU_ENV, "MODE": mode, **env}, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    # the ranks' lines can land on one line of the shared output
    lines = [json.loads(x) for x in re.findall(r"MEMORY (\{[^}]*\})", done.stdout)]
    ranks = {r["rank"]: r for r in lines}
    # rank 1's figures; "peaks": every rank's
    return {**ranks[1], "peaks": [ranks[r]["peak"] for r in sorted(ranks)],
            "log": done.stdout + done.stderr}  # fmt: skip


def generate(root: Path, name: str, *flags: str) -> Path:
    argv = [sys.executable, "-m", "genie", "new", name, "--yes", "--no-smoke", "--tracker", "none"]
    subprocess.run([*argv, *flags], cwd=root, check=True, capture_output=True)
    (root / name / "drive.py").write_text(DRIVE)
    return root / name


def ratio(project: Path, mode: str, args: list[str], per: int, baseline: dict) -> str:
    big = measure(project, mode, args)
    return f"{(big['peak'] - baseline['peak']) / (per * big['full']):.2f}"


def ratios(project: Path, mode: str, args: list[str], baseline: dict) -> str:
    """Every rank's peak over one full copy of the weights, rank 0 first."""
    big = measure(project, mode, args)
    pairs = zip(big["peaks"], baseline["peaks"], strict=True)
    return "  ".join(f"{(peak - base) / big['full']:.2f}" for peak, base in pairs)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="genie-bench-") as tmp:
        root = Path(tmp)
        fsdp = generate(root, "fsdp", "--strategy", "fsdp")
        tiny = measure(fsdp, "fsdp", [])
        print("FSDP build from scratch, 252M parameters: each rank's peak / one full copy")
        print("                                           rank 0  rank 1")
        print(f"  every rank builds it whole (earlier)     {ratios(fsdp, 'fsdp-full', BIG, tiny)}")
        print(f"  rank 0 builds and sends (before)         {ratios(fsdp, 'fsdp-load', BIG, tiny)}")
        print(f"  every rank initialises its shard (now)   {ratios(fsdp, 'fsdp', BIG, tiny)}")
        ddp = generate(root, "ddp")
        measure(ddp, "save", MEDIUM)
        tiny = measure(ddp, "build", [])
        print("ddp resume, 50M parameters + AdamW: rank 1's peak / its model+optimizer state")
        print(f"  a whole copy unpickled (before)      {ratio(ddp, 'copy', MEDIUM, 3, tiny)}")
        print(f"  shared disk, memory-mapped (now)     {ratio(ddp, 'shared', MEDIUM, 3, tiny)}")
        print(f"  per-node disks, sent by rank 0 (now) {ratio(ddp, 'per-node', MEDIUM, 3, tiny)}")


if __name__ == "__main__":
    main()

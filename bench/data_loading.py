"""Data loading of the generated cv project: the old defaults beside the new, in one run.

    python bench/data_loading.py [--rounds 5] [--processes 2] [--images 2000]

A cv project (ddp) is generated, and a CIFAR-shaped image folder is written (10 classes of
32x32 PNGs; the real CIFAR-10 is a download, which benches do not make). Each side starts
--processes processes at once, as torchrun would on one node (LOCAL_WORLD_SIZE set), and
each process iterates the project's training DataLoader (train.build_loaders, the sampler,
transforms and workers as training gets them) over its shard for one epoch, without a
model: images/s per process is the speed its GPU could at best be fed at. Sides:
- old: 2 workers per process (the old --num-workers default), images upscaled to 224 px
  (the old --image-size default for CIFAR-10);
- old workers, 32 px: the old worker count at the new image size;
- new: the new defaults (workers from the CPUs each process has; CIFAR at 32 px).
Rounds alternate the sides; the figure is the median over rounds, with the range.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MARKER = "BENCH_DATA "
SIDES = {
    "old: 2 workers, 224 px": ["--num-workers", "2", "--image-size", "224"],
    "old workers, 32 px": ["--num-workers", "2", "--image-size", "32"],
    "new defaults": ["--image-size", "32"],
}
# one process: build the project's loaders and time one epoch of the training one
PROBE = """
import json, os, sys, time
import torch.distributed as dist
import config, train
args = config.parse_args(sys.argv[1:])
dist.init_process_group("gloo")
loader, _ = train.build_loaders(args, __import__("torch").device("cpu"))
started, images = time.perf_counter(), 0
for batch in loader:
    images += len(batch["labels"])
seconds = time.perf_counter() - started
print("%s" + json.dumps({"rate": images / seconds, "workers": args.num_workers}), flush=True)
dist.destroy_process_group()
"""


def image_folder(root: Path, images: int) -> Path:
    from PIL import Image

    generator = __import__("random").Random(0)
    for i in range(images):
        folder = root / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = bytes(generator.randrange(256) for _ in range(32 * 32 * 3))
        Image.frombytes("RGB", (32, 32), pixels).save(folder / f"{i}.png")
    return root


def run_side(project: Path, folder: Path, flags: list[str], processes: int) -> list[dict]:
    argv = ["--data-dir", str(folder), "--tracker", "none", "--batch-size", "64", *flags]
    procs = []
    for rank in range(processes):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(processes),
                   LOCAL_WORLD_SIZE=str(processes), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT="29731")  # fmt: skip
        procs.append(subprocess.Popen(
            [PY, "-c", PROBE % MARKER, *argv], cwd=project, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        ))  # fmt: skip
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"a loader process failed:\n{err[-2000:]}")
        [line] = [x for x in out.splitlines() if x.startswith(MARKER)]
        results.append(json.loads(line[len(MARKER) :]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--images", type=int, default=2000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        project = work / "cv"
        subprocess.run(
            [PY, "-m", "genie", "new", str(project), "--yes", "--no-smoke", "--task", "cv",
             "--framework", "ddp", "--tracker", "none"],
            check=True, capture_output=True, cwd=ROOT,
        )  # fmt: skip
        folder = image_folder(work / "images", options.images)
        rates: dict[str, list[float]] = {side: [] for side in SIDES}
        workers = {}
        for _ in range(options.rounds):
            for side, flags in SIDES.items():
                results = run_side(project, folder, flags, options.processes)
                rates[side].append(statistics.mean(r["rate"] for r in results))
                workers[side] = results[0]["workers"]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"cv training DataLoader, {options.processes} processes on {cpus} CPUs, "
          f"{options.images} 32x32 PNGs, batch 64, {options.rounds} rounds")  # fmt: skip
    for side, values in rates.items():
        print(f"  {side:<24} {workers[side]} workers/process  "
              f"{statistics.median(values):8.0f} images/s per process "
              f"(range {min(values):.0f}-{max(values):.0f})")  # fmt: skip


if __name__ == "__main__":
    main()

"""How close ``genie plan`` comes. First the time and memory of planning a 7B
Llama-shaped model (config only) at world size 64 with fsdp, and its per-rank states
against the hand count; then, for each configuration, the peak of one training step traced
on fake tensors (what the plan reports, without the GPU-only overhead) beside the same step
on real tensors, measured by the same tracker on 1 or 2 CPU processes under torchrun.
``tests/e2e/test_plan_e2e.py`` runs two rows of the same table.

    python bench/plan_accuracy.py [--rows N] [--no-scale]

Takes about ten minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRACE = HERE.parent / "genie" / "plan" / "trace.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
CPU_ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
# (task, strategy, world, precision, activation checkpointing, micro-batch, train.py args)
WIDE = ["--hidden", "1024", "--depth", "6"]
ROWS = [
    ("custom", "ddp", 1, "fp32", False, 64, WIDE),
    ("custom", "ddp", 1, "bf16", True, 256, WIDE),
    ("custom", "fsdp", 2, "fp32", False, 64, WIDE),
    ("custom", "fsdp", 2, "bf16", True, 256, WIDE),
    ("llm", "ddp", 1, "fp32", False, 4, ["--smoke", "--seq-len", "256"]),
    ("llm", "ddp", 2, "bf16", True, 8, ["--smoke", "--seq-len", "256"]),
    ("llm", "fsdp", 2, "fp32", True, 4, ["--smoke", "--seq-len", "256"]),
    ("llm", "fsdp", 2, "bf16", False, 8, ["--smoke", "--seq-len", "256"]),
    ("nlp", "ddp", 1, "fp32", False, 16, ["--smoke"]),
    ("nlp", "fsdp", 2, "bf16", True, 32, ["--smoke"]),
    ("cv", "ddp", 1, "fp32", False, 16, ["--image-size", "64"]),
    # fp32: on the CPU, real BatchNorm kernels refuse FSDP's bf16 weights under autocast
    ("cv", "fsdp", 2, "fp32", True, 32, ["--image-size", "64"]),
]
LLAMA_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-05, "tie_word_embeddings": False}  # fmt: skip
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries")


def generate(root: Path, task: str) -> Path:
    project = root / task
    if not project.exists():
        argv = [sys.executable, "-m", "genie", "new", str(project), "--yes", "--no-smoke",
                "--task", task, "--tracker", "none", "--gpus-per-node", "0"]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True, env=CPU_ENV)
    return project


def request(folder: Path, argv: list[str], variant: dict) -> Path:
    path = folder / f"request-{time.monotonic_ns()}.json"
    path.write_text(json.dumps({"argv": argv, "variants": [variant]}))
    return path


def figures(output: str) -> dict:
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    result = lines[-1]
    if "error" in result:
        raise SystemExit(result["error"])
    return result


def peak(result: dict) -> int:
    return sum(result[c] or 0 for c in CATEGORIES)


def measure(root: Path, row: tuple) -> tuple[dict, dict]:
    """The row's step traced on fake tensors, and run on real ones."""
    task, strategy, world, precision, checkpointing, batch, argv = row
    project = generate(root, task)
    variant = {"strategy": strategy, "world": world, "shard": 1 if strategy == "ddp" else world,
               "precision": precision, "checkpointing": checkpointing, "batch": batch}  # fmt: skip
    fake = subprocess.run([sys.executable, str(TRACE), str(request(root, argv, variant))],
                          cwd=project, capture_output=True, text=True, env=CPU_ENV)  # fmt: skip
    real_request = request(root, argv, {**variant, "real": True})
    real = subprocess.run([*TORCHRUN, f"--nproc_per_node={world}", str(TRACE), str(real_request)],
                          cwd=project, capture_output=True, text=True, env=CPU_ENV)  # fmt: skip
    if fake.returncode or real.returncode:
        raise SystemExit((fake.stderr + real.stderr)[-3000:])
    return figures(fake.stdout), figures(real.stdout)


def table(root: Path, rows: list[tuple]) -> list[dict]:
    print(f"{'task':7}{'strategy':9}{'ranks':>6} {'precision':10}{'ckpt':5}{'batch':>6}"
          f"{'traced MiB':>12}{'real MiB':>10}{'error':>8}")  # fmt: skip
    out = []
    for row in rows:
        fake, real = measure(root, row)
        error = peak(fake) / peak(real) - 1
        task, strategy, world, precision, checkpointing, batch, _argv = row
        print(f"{task:7}{strategy:9}{world:>6} {precision:10}{'on' if checkpointing else 'off':5}"
              f"{batch:>6}{peak(fake) / 2**20:>12.1f}{peak(real) / 2**20:>10.1f}"
              f"{error:>+8.1%}", flush=True)  # fmt: skip
        out.append({"row": row[:6], "traced": peak(fake), "real": peak(real), "error": error})
    return out


def scale(root: Path) -> dict:
    """A 7B Llama (config only) at world size 64 with fsdp: seconds, this process's peak
    memory, and the per-rank states against the hand count."""
    folder = root / "llama-7b"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA_7B))
    project = generate(root, "llm")
    variant = {"strategy": "fsdp", "world": 64, "shard": 64, "precision": "bf16",
               "checkpointing": True, "batch": 1}  # fmt: skip
    path = request(root, ["--model-name", str(folder), "--seq-len", "4096"], variant)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(TRACE), str(path)], cwd=project,
                          capture_output=True, text=True, env=CPU_ENV)  # fmt: skip
    seconds = time.perf_counter() - started
    result = figures(done.stdout)
    # the largest child's peak: the earlier children (genie new, the table's) are smaller
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    count, tensors = result["parameter_count"], result["parameter_tensors"]
    hand = {
        "parameters": count * 4 // 64 + result["buffer_bytes"],
        "optimizer": 2 * count * 4 // 64 + 4 * tensors,
    }  # two moments; a step count each
    print(f"\n7B Llama, fsdp, 64 ranks, bf16, checkpointing, 1 x 4096 tokens: {seconds:.1f} s, "
          f"{rss / 2**30:.2f} GiB of this machine's memory, {count:,} parameters")  # fmt: skip
    for name in ("parameters", "optimizer"):
        print(f"  {name}: traced {result[name]:,} B, hand count {hand[name]:,} B")
    return {"seconds": seconds, "rss": rss, "result": result, "hand": hand}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=len(ROWS))
    parser.add_argument("--no-scale", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="genie-plan-") as tmp:
        if not args.no_scale:  # first: its memory is read as the largest child's so far
            scale(Path(tmp))
        rows = table(Path(tmp), ROWS[: args.rows])
        worst = max(abs(r["error"]) for r in rows)
        print(f"worst: {worst:.1%} (target: within 10%)")


if __name__ == "__main__":
    main()

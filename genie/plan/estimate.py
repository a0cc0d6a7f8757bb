"""Will it fit: each rank's peak memory for a project's setup, from one traced step
(trace.py, run with the project's Python), against the GPU's memory, and what to change
when it does not fit. No torch here: genie's own process only reads the figures."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from genie.errors import GenieError
from genie.i18n import _
from genie.spec.gpus import GIB, memory_bytes

CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries")
# On a GPU, memory no tensor holds: the CUDA context with its kernels (about 0.5 GiB) and
# NCCL's buffers (about 0.5 GiB with a few communicators), plus the caching allocator's
# blocks that are reserved but not in use (fragmentation, about 5% of the peak). Estimates
# from public reports, not yet measured here (no GPU was lent): scripts/gpu_check.sh
# compares the plan with torch.cuda.max_memory_reserved() to replace them.
GPU_FIXED = GIB
GPU_FRAGMENTATION = 0.05


def parse_memory(text: str) -> int | None:
    """``--gpu-memory``'s value in bytes, judged as genie new judges the answer (a
    SpecError otherwise); None for an empty one."""
    from genie.spec.questions import FIELD_BY_NAME

    answer = FIELD_BY_NAME["gpu_memory"].parse(text)
    return None if answer is None else memory_bytes(answer)


@dataclass(frozen=True)
class Setup:
    """One way to run the project: what a traced step depends on."""

    strategy: str  # ddp, fsdp or hsdp
    world: int  # ranks in all
    shard: int  # ranks a parameter is split across (1 under ddp; a node's under hsdp)
    precision: str
    checkpointing: bool
    batch: int  # micro-batch per rank
    accumulation: int

    def request(self) -> dict:
        return {"strategy": self.strategy, "world": self.world, "shard": self.shard,
                "precision": self.precision, "checkpointing": self.checkpointing,
                "batch": self.batch}  # fmt: skip

    def flags(self) -> str:
        """The genie flags that make a project this setup."""
        checkpointing = "--activation-checkpointing" if self.checkpointing else ""
        words = [f"--strategy {self.strategy}", f"--precision {self.precision}", checkpointing,
                 f"--batch-size {self.batch}", f"--grad-accum {self.accumulation}"]  # fmt: skip
        return " ".join(w for w in words if w)


@dataclass(frozen=True)
class Figures:
    """A setup's peak memory per rank, bytes by category (activations None where they
    were not traced but counted)."""

    setup: Setup
    sizes: dict[str, int | None]
    overhead: int
    traced: bool
    model_parameters: int = 0  # the whole model's

    @property
    def total(self) -> int:
        return sum(v or 0 for v in self.sizes.values()) + self.overhead

    def as_json(self) -> dict:
        return {"role": "every rank", **self.sizes, "overhead": self.overhead, "total": self.total}


def overhead(peak: int, on_gpu: bool) -> int:
    return GPU_FIXED + int(peak * GPU_FRAGMENTATION) if on_gpu else 0


def trace(project: Path, python: str, argv: list[str], setups: list[Setup], *, on_gpu: bool,
          timeout: float = 900) -> tuple[list[Figures | str], str]:  # fmt: skip
    """Trace every setup in one run of trace.py with the project's Python: each setup's
    figures (or why it could not be traced), and the torch version that traced them."""
    request = {"argv": argv, "variants": [s.request() for s in setups]}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(request, file)
        file.flush()
        script = Path(__file__).with_name("trace.py")
        try:
            done = subprocess.run([python, str(script), file.name], cwd=project,
                                  capture_output=True, text=True, timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise GenieError(_("tracing the step took over {s:.0f} s").format(s=timeout)) from None
        except OSError as error:
            raise GenieError(_("cannot run {p}: {e}").format(p=python, e=error)) from None
    read = [read_line(line) for line in done.stdout.splitlines()]
    lines = [r for r in read if r is not None and ("error" in r or "traced" in r)]
    if done.returncode != 0 or len(lines) != len(setups) + 1:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GenieError(
            _("the project's modules do not load with {p}: {e} (install its requirements.txt "
              "there, or pass --python)").format(p=python, e=last)  # fmt: skip
        )
    figures: list[Figures | str] = []
    for setup, result in zip(setups, lines[1:], strict=True):
        if "error" in result:
            figures.append(result["error"])
            continue
        sizes = {c: result[c] for c in CATEGORIES}
        peak = sum(v or 0 for v in sizes.values())
        count = result.get("parameter_count", 0)
        figures.append(Figures(setup, sizes, overhead(peak, on_gpu), result["traced"], count))
    return figures, lines[0]["torch"]


def read_line(line: str) -> dict | None:
    """One of trace.py's JSON lines; None for anything else the project printed."""
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def micro_batches(setup: Setup) -> list[int]:
    """Smaller micro-batches that keep the global batch: the divisors of the per-rank
    batch (micro-batch x accumulation) below this one, largest first."""
    per_rank = setup.batch * setup.accumulation
    return [m for m in range(setup.batch - 1, 0, -1) if per_rank % m == 0]


def with_batch(setup: Setup, batch: int) -> Setup:
    return replace(setup, batch=batch, accumulation=setup.batch * setup.accumulation // batch)


def changes(
    base: Setup, nodes: int, gpus: int, allowed: Callable[[Setup], bool]
) -> list[tuple[str, Setup]]:
    """Single changes that use less memory, cheapest first (``allowed(setup)``: whether the
    project's framework and torch can have it)."""
    options = []
    if not base.checkpointing:
        options.append((_("activation checkpointing"), replace(base, checkpointing=True)))
    if base.strategy == "ddp":
        options.append((_("fsdp"), replace(base, strategy="fsdp", shard=base.world)))
        if nodes > 1 and base.world // nodes > 1:  # sharded within a node's ranks
            options.append((_("hsdp"), replace(base, strategy="hsdp", shard=base.world // nodes)))
    if base.precision == "fp32" and gpus > 0:
        options.append((_("bf16 from fp32"), replace(base, precision="bf16")))
    return [(what, setup) for what, setup in options if allowed(setup)]


def combine(base: Setup, changed: list[Setup]) -> Setup:
    """Every change at once (for when no single one suffices); of the strategies, the
    first (fsdp, which shards the most)."""
    out = base
    for setup in changed:
        if setup.strategy != base.strategy and out.strategy != base.strategy:
            continue
        differ = {k: v for k, v in asdict(setup).items() if v != getattr(base, k)}
        out = replace(out, **differ)
    return out


def python_of(python: str | None) -> str:
    return python or sys.executable

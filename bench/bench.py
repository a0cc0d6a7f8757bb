"""genie's benchmarks, each printed side by side with its baseline, in one run.

    python bench/bench.py [--runs 5]

1. ``genie --help`` vs ``python -c pass`` (interpreter start).       target: --help <= 0.15 s
   ``genie --lang zh --help`` (the Chinese catalogs loaded) vs ``genie --help``: same target.
2. ``genie new --yes --no-smoke`` vs raw cookiecutter + black on the same template and context.
3. ``genie smoke`` vs a minimal hand-written DDP script under
   ``torchrun --standalone --nproc_per_node=2``.                     target: smoke <= 1.3x
4. An nlp project's ``--smoke`` run under torchrun vs the same with the ``gc.freeze()`` of
   ``dist_utils.shutdown()`` taken out: what skipping the exit's collection saves.
Times are medians of wall-clock seconds over --runs runs; run on an idle machine.
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
CPU = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "NO_COLOR": "1"}

RAW_COOKIECUTTER = """
import sys, tempfile
from pathlib import Path
import black
from cookiecutter.main import cookiecutter
from genie.generate import engine
from genie.generate import context as template_context
from genie.detect import machine
from genie.spec import build_spec

spec = build_spec({"name": "p"}, machine())
out = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    cfg = Path(tmp, "c.yml")
    cfg.write_text(f"replay_dir: {tmp}/r\\ncookiecutters_dir: {tmp}/c\\n")
    template = engine.template_with_modules(spec, Path(tmp, "t"))  # what genie renders from
    project = cookiecutter(str(template), no_input=True, output_dir=str(out),
                           extra_context={"_genie": template_context.context(spec)},
                           config_file=str(cfg))
    for path in Path(project).rglob("*.py"):
        path.write_text(black.format_str(path.read_text(), mode=black.Mode()))
"""


def timed(cmd: list[str], runs: int, cwd: Path | None = None, before=None) -> float:
    times = []
    for _ in range(runs):
        if before:
            before()
        start = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=CPU, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(what: str, genie: float, baseline: float, baseline_name: str, target: str) -> None:
    print(f"{what:<28} {genie:>8.3f} s   {baseline_name:<34} {baseline:>8.3f} s   "
          f"ratio {genie / baseline:>5.2f}   {target}")  # fmt: skip


def exit_times(work: Path, runs: int) -> tuple[float, float]:
    """An nlp project's --smoke run under torchrun (torch and transformers loaded in each
    rank), as generated and with dist_utils.shutdown()'s gc.freeze() taken out."""
    subprocess.run([PY, "-m", "genie", "new", str(work / "nlp"), "--yes", "--no-smoke",
                    "--task", "nlp"], check=True, capture_output=True)  # fmt: skip
    shutil.copytree(work / "nlp", work / "unfrozen")
    utils = work / "unfrozen" / "dist_utils.py"
    source = utils.read_text()
    assert source.count("    gc.freeze()\n") == 1
    utils.write_text(source.replace("    gc.freeze()\n", ""))
    train = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
             "--smoke", "--checkpoint-dir", str(work / "checkpoints")]  # fmt: skip
    frozen, unfrozen = [], []
    for _ in range(runs):  # alternated: a drift in the machine's speed hits both alike
        frozen.append(timed([PY, *train], 1, cwd=work / "nlp"))
        unfrozen.append(timed([PY, *train], 1, cwd=work / "unfrozen"))
    return statistics.median(frozen), statistics.median(unfrozen)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="genie-bench-"))
    try:
        print(f"genie benchmarks: median of {runs} runs, {os.cpu_count()} CPUs\n")
        helped = timed([PY, "-m", "genie", "--help"], runs)
        start = timed([PY, "-c", "pass"], runs)
        row(
            "genie --help",
            helped,
            start,
            "python -c pass",
            f"target <= 0.15 s: {'ok' if helped <= 0.15 else 'MISSED'}",
        )
        chinese = timed([PY, "-m", "genie", "--lang", "zh", "--help"], runs)
        row(
            "genie --lang zh --help",
            chinese,
            helped,
            "genie --help (English)",
            f"target <= 0.15 s: {'ok' if chinese <= 0.15 else 'MISSED'}",
        )

        def clean():
            shutil.rmtree(work / "gen", ignore_errors=True)
            shutil.rmtree(work / "raw", ignore_errors=True)

        gen = timed(
            [PY, "-m", "genie", "new", str(work / "gen"), "--yes", "--no-smoke"], runs, before=clean
        )
        raw = timed([PY, "-c", RAW_COOKIECUTTER, str(work / "raw")], runs, before=clean)
        row("genie new --no-smoke", gen, raw, "raw cookiecutter + black", "(no target)")

        subprocess.run(
            [PY, "-m", "genie", "new", str(work / "proj"), "--yes", "--no-smoke"],
            check=True,
            capture_output=True,
        )
        smoke = timed([PY, "-m", "genie", "smoke", str(work / "proj")], runs)
        minimal = timed([PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                         str(HERE / "minimal_ddp.py")], runs)  # fmt: skip
        ratio = smoke / minimal
        row(
            "genie smoke (2 CPU ranks)",
            smoke,
            minimal,
            "minimal DDP script under torchrun",
            f"target <= 1.3x: {'ok' if ratio <= 1.3 else 'MISSED'}",
        )
        frozen, unfrozen = exit_times(work, runs)
        row("exit: nlp --smoke, gc.freeze", frozen, unfrozen, "the same without gc.freeze()", "")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Every framework x task really trains under torchrun, and the data paths work offline."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import TORCHRUN, run_genie
from ..variants import COMBOS
from .conftest import OFFLINE, THIS_PYTHON, combo_group, generate, report_of, torchrun

pytestmark = pytest.mark.e2e
# Lightning's notices a project has answered: the val metrics are reduced by the project
# itself, torchrun starts the ranks, a cloud logger advertisement, a torch deprecation inside
# Lightning.
NOISE = ("sync_dist=True", "`srun` command is available", "litlogger", "LeafSpec")
COMBO_PARAMS = [pytest.param(c, marks=combo_group(c)) for c in COMBOS]


@pytest.mark.parametrize("combo", COMBO_PARAMS)
def test_every_framework_and_task_generates_and_passes_its_smoke_test(combo_runs, combo):
    framework = combo.split("-")[0]
    result = combo_runs(combo).new
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    report = report_of(result.stdout)
    if framework == "dp":  # one process, one copy of the weights: nothing to compare
        assert report["world_size"] == 1 and report["replicas"] == 1
    else:
        assert report["world_size"] == 2 and report["params_in_sync"] is True
    assert report["steps"] >= 8 and "PASS" in result.stdout
    assert 0 <= report["val_accuracy"] <= 1 and report["checkpoint_loads"] is True
    # the run ends with one summary line (before the report)
    assert len([x for x in result.stdout.splitlines() if "done: " in x and " epochs" in x]) == 1
    # the progress bar is drawn only on a terminal: in genie's pipe it is off, so no log
    # line is glued onto it
    assert "it/s" not in result.stdout and "\r" not in result.stdout
    assert not [x for x in result.stdout.splitlines() if "[default1]" in x and "it/s" in x]
    # Lightning's notices the project has answered are silenced (quiet_answered_notices)
    noise = [x for x in (result.stdout + result.stderr).splitlines() if any(n in x for n in NOISE)]
    assert not noise


# The scalars each framework writes to TensorBoard (its own names where it has them).
TAGS = {
    "ddp": {"train/loss", "train/lr", "train/samples_per_s", "val/loss", "val/accuracy"},
    "dp": {"train/loss", "train/lr", "train/samples_per_s", "val/loss", "val/accuracy"},
    # one LR series per parameter group (decayed, not decayed): the same rate
    "lightning": {"train/loss", "lr-AdamW/pg1", "train/samples_per_s", "val/loss", "val/accuracy"},
    "hf": {"train/loss", "train/learning_rate", "eval/loss", "eval/accuracy"},
}
CHECKPOINTS = {
    "ddp": ("last.pt", "best.pt", "epoch-0000.pt"),
    "dp": ("last.pt", "best.pt", "epoch-0000.pt"),
    "lightning": ("last.ckpt", "best-epoch=*.ckpt"),
    "hf": ("checkpoint-*",),
}


def scalar_tags(log_dir: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for events in log_dir.rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    return tags


@pytest.mark.parametrize("combo", COMBO_PARAMS)
def test_every_combination_logs_validates_checkpoints_and_passes_its_own_tests(combo_runs, combo):
    """The project's own pytest (one epoch of 2-process training, then a resume) passes;
    its runs wrote the TensorBoard scalars and the best and last checkpoints."""
    framework = combo.split("-")[0]
    run = combo_runs(combo)
    assert run.new.returncode == 0, run.new.stdout[-4000:] + run.new.stderr
    own = run.own_tests
    assert own.returncode == 0, own.stdout[-4000:] + own.stderr[-2000:]
    assert "2 passed" in own.stdout
    [trained] = run.basetemp.glob("run[0-9]*")  # the first epoch's, then the resume's
    assert TAGS[framework] <= scalar_tags(trained / "runs")
    # one writer per run, on global rank 0: no empty event file from the other rank
    events = list((trained / "runs").rglob("events.out.tfevents.*"))
    assert len(events) == 2, events
    checkpoints = trained / "checkpoints"
    for name in CHECKPOINTS[framework]:
        assert list(checkpoints.glob(name)), sorted(p.name for p in checkpoints.iterdir())


# Offline, each task that downloads says so in one line: every framework, the two tasks
# crossed (the download code is the task's, the stop-together is the framework's).
UNAVAILABLE = {
    "ddp-cv": "CIFAR-10 could not be downloaded into ",
    "lightning-nlp": "the dataset imdb or the tokenizer of distilbert-base-uncased could not",
    "hf-cv": "CIFAR-10 could not be downloaded into ",
    "dp-nlp": "the dataset imdb or the tokenizer of distilbert-base-uncased could not",
    "ddp-llm": "the dataset roneneldan/TinyStories or the tokenizer of HuggingFaceTB/SmolLM2-135M",
}
NO_NETWORK = {**OFFLINE, "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}


@pytest.mark.parametrize("combo", [p for p in COMBO_PARAMS if p.values[0] in UNAVAILABLE])
def test_offline_the_data_that_cannot_be_had_is_named_in_one_line(combo_runs, combo, tmp_path):
    """Not the urllib or Hub traceback on every rank, then gloo's lost peer."""
    run = combo_runs(combo)
    assert run.new.returncode == 0, run.new.stderr
    args = ["--epochs", "1", "--checkpoint-dir", str(tmp_path / "ck"),
            "--log-dir", str(tmp_path / "runs")]  # fmt: skip
    if combo.endswith("-cv"):
        args += ["--download-dir", str(tmp_path / "data")]
    env = {**os.environ, **NO_NETWORK, "HF_HOME": str(tmp_path / "hf"), **THIS_PYTHON}
    done = subprocess.run(["bash", "launch/single_node.sh", *args], cwd=run.project, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0
    said = [line for line in output.splitlines() if UNAVAILABLE[combo] in line]
    assert len(said) == 1, output[-3000:]
    assert "--data-dir" in said[0] or "--data-files" in said[0]
    # the ranks stopped together, quietly: torchrun's own summary is the only traceback
    assert str(run.project / "data.py") not in output and "Connection closed" not in output
    assert output.count("Traceback") <= (1 if combo != "dp-nlp" else 0), output[-3000:]


@pytest.mark.parametrize(
    "combo", [pytest.param(c, marks=combo_group(c)) for c in ("ddp-llm", "lightning-llm")]
)
def test_a_language_model_logs_tokens_mfu_and_perplexity(combo_runs, combo):
    """The llm task's log, in the plain loop and under Lightning: tokens/s per device
    and MFU (n/a on a CPU) at every logged step, perplexity at validation; its smoke
    model learned the next tokens."""
    run = combo_runs(combo)
    assert run.new.returncode == 0, run.new.stdout[-4000:] + run.new.stderr
    steps = re.findall(
        r"step \d+/\d+ loss \S+ lr \S+ (\d+) tokens/s/device MFU (\S+) ETA", run.new.stdout
    )
    assert steps and all(int(tokens) > 0 and mfu == "n/a" for tokens, mfu in steps)
    validations = re.findall(
        r"validation: loss (\S+), perplexity (\S+), accuracy ([\d.]+)", run.new.stdout
    )
    assert len(validations) == 2  # one per epoch
    loss, perplexity, accuracy = map(float, validations[-1])
    assert perplexity == pytest.approx(math.exp(loss), rel=1e-2)
    assert accuracy > 0.5  # next tokens of the smoke text: chance is 1/18
    # tokenizing drew no progress bar into the log (genie reads a pipe, as a job's log is)
    assert "Map:" not in run.new.stdout and "examples/s" not in run.new.stdout


SAME_LOGITS = """
import argparse, sys, torch
from transformers import AutoModelForCausalLM
import generate
model, tokenizer, _ = generate.load(__import__("pathlib").Path(sys.argv[1]))
exported = AutoModelForCausalLM.from_pretrained(sys.argv[2]).eval()
ids = tokenizer("w3 w4 w5 w9 w1", return_tensors="pt").input_ids
with torch.no_grad():
    print("SAME", torch.equal(model.eval()(ids), exported(input_ids=ids).logits))
"""


def completes_and_exports(project: Path, checkpoint: Path, folder: Path) -> None:
    """generate.py on ``checkpoint``: the smoke model continues the 16-word cycle it was
    trained on (at least 3 of its 4 words: it predicts about 85% of next tokens right
    after the project's own tests; chance is 1 in 18), the Hugging Face folder it writes
    gives the checkpoint's own logits, and a second export to the same folder is refused,
    the folder left as it was."""
    generate = [sys.executable, "generate.py", str(checkpoint)]
    done = subprocess.run(
        [*generate, "--prompt", "w3 w4 w5", "--max-new-tokens", "4", "--save-pretrained",
         str(folder)], cwd=project, env={**os.environ, **OFFLINE}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    words = done.stdout.strip().splitlines()[-1].split()
    assert words[:3] == ["w3", "w4", "w5"] and len(words) == 7, words
    assert sum(a == b for a, b in zip(words[3:], ["w6", "w7", "w8", "w9"], strict=True)) >= 3, words
    (project / "same.py").write_text(SAME_LOGITS)
    same = subprocess.run([sys.executable, "same.py", str(checkpoint), str(folder)], cwd=project,
                          env={**os.environ, **OFFLINE}, capture_output=True, text=True)  # fmt: skip
    assert "SAME True" in same.stdout, same.stdout + same.stderr[-3000:]
    written = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = subprocess.run([*generate, "--save-pretrained", str(folder)], cwd=project,
                           env={**os.environ, **OFFLINE}, capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 1 and "exists" in again.stderr
    assert "Traceback" not in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == written


@pytest.mark.parametrize(
    ("combo", "last"),
    [pytest.param(c, last, marks=combo_group(c))
     for c, last in (("ddp-llm", "last.pt"), ("lightning-llm", "last.ckpt"))],
)  # fmt: skip
def test_a_language_models_checkpoint_completes_a_prompt_and_exports(
    combo_runs, combo, last, tmp_path
):
    """From the project's own test run (a DDP checkpoint, Lightning's last.ckpt)."""
    run = combo_runs(combo)
    assert run.own_tests.returncode == 0, run.own_tests.stdout[-3000:]
    [trained] = run.basetemp.glob("run[0-9]*")
    completes_and_exports(run.project, trained / "checkpoints" / last, tmp_path / "hf")


@combo_group("hf-llm")
def test_the_trainers_language_model_logs_tokens_and_perplexity(combo_runs):
    """Under the Hugging Face Trainer: tokens/s per device at every logged step (no MFU
    on a CPU), perplexity and next-token accuracy at validation, to the log and to
    TensorBoard; the smoke model learned the next tokens."""
    run = combo_runs("hf-llm")
    assert run.new.returncode == 0, run.new.stdout[-4000:] + run.new.stderr
    # the dict alone: torchrun's tail may glue the next "[default0]:" on when it read the
    # line before its newline was written (print writes the two apart, unbuffered)
    lines = [x for x in run.new.stdout.splitlines() if "{'loss'" in x or "{'eval_loss'" in x]
    logged = [ast.literal_eval(x[x.index("{") : x.rindex("}") + 1]) for x in lines]
    steps = [x for x in logged if "loss" in x]
    assert steps and all(float(x["tokens_per_s"]) > 0 and "mfu" not in x for x in steps)
    [*_, last] = [x for x in logged if "eval_loss" in x]
    # per token over the whole set; the Trainer's eval_loss averages the batches' means
    perplexity = float(last["eval_perplexity"])
    assert perplexity == pytest.approx(math.exp(float(last["eval_loss"])), rel=0.05)
    assert float(last["eval_accuracy"]) > 0.5  # next tokens of the smoke text
    assert run.own_tests.returncode == 0, run.own_tests.stdout[-3000:]
    [trained] = run.basetemp.glob("run[0-9]*")
    tags = scalar_tags(trained / "runs")
    assert {"train/tokens_per_s", "eval/perplexity", "eval/accuracy"} <= tags, tags


@combo_group("hf-llm")
def test_the_trainers_language_model_checkpoint_completes_a_prompt_and_exports(
    combo_runs, tmp_path
):
    """Every checkpoint-N folder of the Trainer is a Hugging Face folder; generate.py
    completes a prompt from it and exports the model and tokenizer alone."""
    run = combo_runs("hf-llm")
    assert run.own_tests.returncode == 0, run.own_tests.stdout[-3000:]
    [trained] = run.basetemp.glob("run[0-9]*")
    newest = max((trained / "checkpoints").glob("checkpoint-*"),
                 key=lambda p: int(p.name.split("-")[1]))  # fmt: skip
    completes_and_exports(run.project, newest, tmp_path / "hf")
    # the model and tokenizer alone, not the Trainer's state beside them in checkpoint-N
    assert (newest / "optimizer.pt").is_file() and (newest / "trainer_state.json").is_file()
    exported = {p.name for p in (tmp_path / "hf").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= exported
    assert not exported & {"optimizer.pt", "scheduler.pt", "trainer_state.json"}, exported


def test_a_sharded_language_models_checkpoint_completes_a_prompt_and_exports(tmp_path):
    """From an FSDP run's step folder (every rank wrote its shards)."""
    project = generate(tmp_path, "--task", "llm", "--strategy", "fsdp")
    trained = torchrun(project, "--smoke", "--checkpoint-dir", "ck")
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    completes_and_exports(project, project / "ck" / "last", tmp_path / "hf")


def test_a_chat_model_learns_the_assistants_turns_and_answers_a_user(tmp_path):
    """--format chat: conversations where the user says words of the cycle and the
    assistant goes on with the next ones; trained on the assistant's tokens only, the
    model answers a user's message through the chat template with the next words."""
    project = generate(tmp_path, "--task", "llm")
    trained = torchrun(project, "--smoke", "--format", "chat", "--epochs", "6",
                       "--checkpoint-dir", "ck")  # fmt: skip
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    report = report_of(trained.stdout)
    assert report["last_loss"] < 0.5 * report["first_loss"]
    assert report["params_in_sync"] and report["checkpoint_loads"]
    answer = subprocess.run(
        [sys.executable, "generate.py", "ck/last.pt", "--prompt", "w3 w4 w5",
         "--max-new-tokens", "3"], cwd=project, env={**os.environ, **OFFLINE},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr[-3000:]
    # the answer alone (not the prompt, not the template's role words)
    assert answer.stdout.strip().splitlines()[-1] == "w6 w7 w8"


def test_two_ranks_with_batch_b_equal_one_rank_with_batch_2b(tmp_path):
    """Gradient averaging and sampler sharding are right: same data, same updates."""
    import torch

    project = generate(tmp_path, "--lr", "0.01")
    two = torchrun(project, "--smoke", "--batch-size", "4", "--checkpoint-dir", "two")
    one = torchrun(project, "--smoke", "--batch-size", "8", "--checkpoint-dir", "one", nproc=1)
    assert two.returncode == 0 and one.returncode == 0, two.stdout + two.stderr + one.stderr
    a = torch.load(project / "two" / "last.pt", weights_only=True)
    b = torch.load(project / "one" / "last.pt", weights_only=True)
    assert a["step"] == b["step"] == 16  # 2 epochs x 8 global batches of 8
    initial = None
    for name, tensor in a["model"].items():
        # fp32 sums in a different order: equal to float tolerance, not bit for bit
        torch.testing.assert_close(tensor, b["model"][name], rtol=1e-5, atol=1e-6)
        initial = name
    assert initial is not None
    # and the test can fail: a different per-rank batch gives different weights
    other = torchrun(project, "--smoke", "--batch-size", "8", "--checkpoint-dir", "other")
    assert other.returncode == 0
    c = torch.load(project / "other" / "last.pt", weights_only=True)
    assert not all(torch.allclose(c["model"][k], b["model"][k]) for k in c["model"])


def test_accumulating_k_batches_of_b_equals_one_batch_of_kb_even_in_a_short_last_step(tmp_path):
    """--grad-accum 4 x batch 8 steps like --grad-accum 2 x batch 16: 32 samples, then
    each epoch's short last step of 16 (48 training samples: 6 batches of 8, 3 of 16),
    which must average 2 micro-batches of 8, not divide their sum by 4."""
    import torch

    project = generate(tmp_path, "--lr", "0.01")
    # 64 samples (--smoke would size its data to whole steps)
    common = ("--smoke", "--num-samples", "64", "--val-fraction", "0.25", "--tracker", "none")
    accum = torchrun(project, *common, "--batch-size", "8", "--grad-accum", "4",
                     "--checkpoint-dir", "accum", nproc=1)  # fmt: skip
    whole = torchrun(project, *common, "--batch-size", "16", "--grad-accum", "2",
                     "--checkpoint-dir", "whole", nproc=1)  # fmt: skip
    assert accum.returncode == 0 and whole.returncode == 0, accum.stderr + whole.stderr
    a = torch.load(project / "accum" / "last.pt", weights_only=True)
    b = torch.load(project / "whole" / "last.pt", weights_only=True)
    assert a["step"] == b["step"] == 4  # 2 epochs x (4 + 2 micro-batches of 8)
    for name, tensor in a["model"].items():
        torch.testing.assert_close(tensor, b["model"][name], rtol=1e-5, atol=1e-6)


def test_cv_trains_on_a_real_image_folder(tmp_path):
    from PIL import Image

    project = generate(tmp_path, "--task", "cv")
    generator = __import__("random").Random(0)
    for label in ("cats", "dogs"):
        folder = project / "images" / label
        folder.mkdir(parents=True)
        for i in range(8):
            pixels = bytes(generator.randrange(256) for _ in range(40 * 40 * 3))
            Image.frombytes("RGB", (40, 40), pixels).save(folder / f"{i}.png")
    result = torchrun(project, "--data-dir", "images", "--image-size", "32", "--epochs", "1",
                      "--batch-size", "4", "--num-workers", "0", "--checkpoint-dir", "ck")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    import torch

    state = torch.load(project / "ck" / "last.pt", weights_only=True)
    assert state["model"]["backbone.fc.weight"].shape[0] == 2  # classes from the folder
    assert state["step"] == 1  # 14 training images / 2 ranks = 7: one whole batch of 4


def test_nlp_trains_from_a_local_csv_and_a_local_model_folder(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    project = generate(tmp_path, "--task", "nlp", "--framework", "hf")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "good", "bad", "fine", "movie", "very"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]",
    )  # fmt: skip
    tokenizer.save_pretrained(project / "tiny-model")
    config = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, num_labels=3)  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(project / "tiny-model")
    rows = ["text,label"] + [f"{w} movie very {w},{i % 3}" for i, w in enumerate(words[4:] * 4)]
    (project / "train.csv").write_text("\n".join(rows) + "\n")
    result = torchrun(project, "--model-name", "tiny-model", "--dataset", "csv",
                      "--data-files", "train.csv", "--max-length", "8", "--epochs", "1",
                      "--batch-size", "2", "--num-workers", "0", "--checkpoint-dir", "ck")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    checkpoints = sorted((project / "ck").glob("checkpoint-*"))
    assert checkpoints, "the Trainer wrote no checkpoint"
    assert (checkpoints[-1] / "trainer_state.json").is_file()


@pytest.mark.parametrize(
    ("combo", "checkpoint", "resumed"),
    [
        pytest.param("lightning-custom", "last.ckpt", "Restoring states from the checkpoint",
                     marks=combo_group("lightning-custom")),
        # logs start in the third epoch
        pytest.param("hf-custom", "checkpoint-16", "'epoch': '2.12", marks=combo_group("hf-custom")),
        pytest.param("dp-custom", "last.pt", "last.pt at epoch 2, step 16",
                     marks=combo_group("dp-custom")),
    ],
)  # fmt: skip
def test_framework_checkpoints_load_back_with_resume(combo_runs, tmp_path, combo, checkpoint,
                                                     resumed):  # fmt: skip
    """A third epoch resumed from the checkpoints of the project's own tests (one epoch,
    then a resume to two), through each framework's own resume."""
    framework = combo.split("-")[0]
    run = combo_runs(combo)
    [trained] = run.basetemp.glob("run[0-9]*")
    ck = tmp_path / "ck"  # a copy: the own tests' folder stays as they left it
    shutil.copytree(trained / "checkpoints", ck)
    assert (ck / checkpoint).exists(), sorted(p.name for p in ck.iterdir())
    launcher = [sys.executable] if framework == "dp" else [
        *TORCHRUN, "--standalone", "--nproc_per_node=2"]  # fmt: skip
    longer = ("--schedule-change", "continue") if framework == "dp" else ()  # genie's own loop
    second = subprocess.run(
        [*launcher, "train.py", "--smoke", "--precision", "fp32", "--checkpoint-dir", str(ck),
         "--log-dir", str(tmp_path / "runs"), "--resume", "--epochs", "3", *longer],
        cwd=run.project, env={**os.environ, **OFFLINE}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-3000:]
    assert resumed in out
    assert "'epoch': '0.12" not in out  # (hf) nothing of the first epoch was trained again
    report = report_of(second.stdout)
    # one more epoch, not three (--smoke sizes its data to 8 steps per epoch on every rank)
    assert report["steps"] == 24


def test_distributed_accuracy_equals_single_process_accuracy_on_uneven_data(tmp_path):
    """13 validation samples on 2 and 3 ranks: DistributedSampler pads them to 14 and 15;
    the metric must count each real sample once, exactly as one process does."""
    project = generate(tmp_path)
    common = ("--num-samples", "100", "--val-fraction", "0.13", "--checkpoint-dir", "ck")
    trained = torchrun(project, "--epochs", "1", *common)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    results = {}
    for nproc in (1, 2, 3):
        run = torchrun(project, "--eval-only", *common, nproc=nproc)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        [line] = [x for x in run.stdout.splitlines() if "validation: {" in x]
        results[nproc] = {
            f"val_{k}": v for k, v in json.loads(line.split("validation: ")[1]).items()
        }
    assert [r["val_count"] for r in results.values()] == [13, 13, 13]
    for nproc in (2, 3):
        assert results[nproc]["val_accuracy"] == results[1]["val_accuracy"]
        assert abs(results[nproc]["val_loss"] - results[1]["val_loss"]) < 1e-6


@pytest.mark.parametrize("framework", ["ddp", "lightning", "hf", "dp"])
def test_compile_trains_and_writes_checkpoints_that_load_in_every_framework(tmp_path, framework):
    """torch.compile on CPU (inductor): training passes the smoke test and the
    checkpoints load strictly into a plain model (no _orig_mod. keys)."""
    result = run_genie(
        "new", "c", "--yes", "--compile", "--framework", framework, "--tracker", "none",
        cwd=tmp_path, **OFFLINE,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    report = report_of(result.stdout)
    assert report["checkpoint_loads"] is True and "PASS" in result.stdout

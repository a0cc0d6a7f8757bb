"""Big models on 2 CPU processes, measured: an FSDP build from scratch never holds the whole
model on any rank (pretrained weights: on rank 0 only), a DDP resume holds no second copy
(peak memory above a run of the same script with the tiny model), activation checkpointing
keeps the losses and fewer activations, pretrained weights load as fp32."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from bench.big_models import BIG, DRIVE, MEDIUM, measure

from .conftest import CPU_ENV, OFFLINE, generate, report_of, torchrun

pytestmark = pytest.mark.e2e
# the tests sharing a module fixture: one worker makes it once
MEMORY = pytest.mark.xdist_group("memory")


@pytest.fixture(scope="module")
def fsdp_project(tmp_path_factory):
    project = generate(tmp_path_factory.mktemp("big"), "--strategy", "fsdp", "--tracker", "none")
    (project / "drive.py").write_text(DRIVE)
    return project


@MEMORY
def test_no_rank_holds_the_whole_model_while_fsdp_builds_it_from_scratch(fsdp_project):
    """Each rank's peak while building a 252M-parameter model: about its shard (1/2)."""
    big, tiny = measure(fsdp_project, "fsdp", BIG), measure(fsdp_project, "fsdp", [])
    for rank, (peak, base) in enumerate(zip(big["peaks"], tiny["peaks"], strict=True)):
        ratio = (peak - base) / big["full"]
        assert ratio < 0.6, f"rank {rank} held {ratio:.2f} x the full model while building it"


@MEMORY
def test_fsdp_loads_pretrained_weights_whole_on_rank_0_only(fsdp_project):
    big, tiny = measure(fsdp_project, "fsdp-load", BIG), measure(fsdp_project, "fsdp-load", [])
    ratio = (big["peak"] - tiny["peak"]) / big["full"]
    assert ratio < 0.6, f"rank 1 held {ratio:.2f} x the full model while loading it"


@pytest.fixture(scope="module")
def ddp_project(tmp_path_factory):
    project = generate(tmp_path_factory.mktemp("ddp"), "--tracker", "none")
    (project / "drive.py").write_text(DRIVE)
    measure(project, "save", MEDIUM)  # rank 0 writes node0/last.pt
    return project


@MEMORY
@pytest.mark.parametrize(
    ("mode", "says"), [("shared", "read by every rank"), ("per-node", "sent by rank 0")],
)  # fmt: skip
def test_a_ddp_resume_holds_no_second_copy_of_the_state(ddp_project, mode, says):
    """shared: every rank reads the file itself (memory-mapped); per-node disks: rank 1
    has no file and rank 0 sends the tensors one by one."""
    big = measure(ddp_project, mode, MEDIUM)
    assert says in big["log"]
    tiny = measure(ddp_project, "build", [])  # the tiny model, nothing resumed
    state = 3 * big["full"]  # weights and AdamW's two moments
    ratio = (big["peak"] - tiny["peak"]) / state
    assert ratio < 1.3, f"rank 1 held {ratio:.2f} x its model+optimizer state resuming"


# What activation checkpointing changes: the bytes autograd keeps for backward. Counted by
# an outer saved-tensors hook; inside a checkpointed block the checkpoint's own hook takes
# over (it keeps the block's input and recomputes the rest), so those bytes drop out.
# (A process's peak RSS is no measure on 2 CPU processes: imports dominate it.)
SAVED = r"""
import json, os, sys
import torch
import train
saved = {"bytes": 0}
def pack(tensor):
    saved["bytes"] += tensor.numel() * tensor.element_size()
    return tensor
sys.argv = ["train.py", *sys.argv[1:]]
with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
    train.main()
print("SAVED " + json.dumps({"rank": int(os.environ["RANK"]), "bytes": saved["bytes"]}), flush=True)
"""
DEEP = ["--hidden", "64", "--depth", "8", "--epochs", "1", "--tracker", "none",
        "--num-workers", "0"]  # fmt: skip


@pytest.mark.parametrize("framework", ["ddp", "lightning", "hf"])
def test_activation_checkpointing_keeps_the_losses_and_fewer_activations(tmp_path, framework):
    project = generate(tmp_path, "--framework", framework, "--tracker", "none")
    (project / "saved.py").write_text(SAVED)

    def run(*extra: str) -> tuple[dict, int]:
        done = torchrun(project, "--smoke", *DEEP, *extra, script="saved.py", env=CPU_ENV)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        counts = [json.loads(x) for x in re.findall(r"SAVED (\{[^}]*\})", done.stdout)]
        return report_of(done.stdout), max(c["bytes"] for c in counts)

    plain, plain_bytes = run("--checkpoint-dir", "plain")
    checkpointed, checkpointed_bytes = run("--checkpoint-dir", "ac", "--activation-checkpointing")
    for key in ("first_loss", "last_loss"):
        assert checkpointed[key] == pytest.approx(plain[key], rel=1e-6)
    assert checkpointed["steps"] == plain["steps"] > 1
    # the 8 blocks' activations are recomputed, not kept: far fewer bytes wait for backward
    assert checkpointed_bytes < 0.5 * plain_bytes, (checkpointed_bytes, plain_bytes)


MASTER_DTYPES = r"""
import argparse, json, sys
import torch
from transformers import AutoConfig, BertConfig, BertForSequenceClassification
import model

config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, num_labels=2)
seen = {}
for dtype in (torch.bfloat16, torch.float16):
    name = str(dtype).split(".")[-1]
    BertForSequenceClassification(config).to(dtype).save_pretrained(name)  # weights
    AutoConfig.from_pretrained(name).save_pretrained(name + "-config")  # config only
    for folder in (name, name + "-config"):
        args = argparse.Namespace(smoke=False, model_name=folder)
        built = model.build_model(args, 2)
        seen[folder] = sorted({str(p.dtype) for p in built.parameters()})
print("DTYPES " + json.dumps(seen))
"""


def test_a_checkpoint_saved_in_bf16_or_fp16_loads_as_fp32_master_weights(tmp_path):
    """Most Hub models are stored in bf16: loaded as they are, the optimizer would keep
    bf16 weights and moments (and fp16 ones crash GradScaler). The nlp model loads fp32,
    from weights and from a config alone; --precision casts only the compute."""
    project = generate(tmp_path, "--task", "nlp", "--tracker", "none")
    (project / "dtypes.py").write_text(MASTER_DTYPES)
    done = subprocess.run([sys.executable, "dtypes.py"], cwd=project, capture_output=True,
                          text=True, env={**os.environ, **OFFLINE}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(re.search(r"DTYPES (\{.*\})", done.stdout).group(1))
    assert len(seen) == 4 and all(dtypes == ["torch.float32"] for dtypes in seen.values()), seen

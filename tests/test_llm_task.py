"""The llm task's own code, run from a rendered project: the loss against transformers'
own, validation's sums, the packed blocks, FLOPs per token, FSDP's units, weight decay;
and the frameworks it is written for."""

from __future__ import annotations

import json

import pytest

from genie import errors
from genie.spec import build_spec

from .conftest import CPU_MACHINE, new_project, ruff_generated, run_in


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return new_project(tmp_path_factory.mktemp("llm"), CPU_MACHINE, task="llm", strategy="fsdp")


def run_json(project, code: str) -> dict:
    out = run_in(project, code)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_generated_code_is_clean(llm):
    out = ruff_generated(llm)
    assert out.returncode == 0, out.stdout


def test_the_shifted_loss_is_transformers_own_and_validation_sums_to_it(llm):
    found = run_json(llm, """
        import argparse, json, torch
        import model
        args = argparse.Namespace(smoke=True, from_scratch=False, model_name="x", seq_len=32)
        torch.manual_seed(0)
        lm = model.build_model(args, 18)
        ids = torch.randint(0, 18, (3, 32))
        labels = ids.clone()
        labels[0, :5] = model.IGNORE  # a prompt: not trained on
        logits = lm(ids)
        ours = model.training_loss(logits, labels)
        theirs = lm.model(input_ids=ids, labels=labels).loss
        loss, right, counted = model.validation_scores(logits, labels)
        print(json.dumps({"ours": ours.item(), "theirs": theirs.item(),
                          "mean": (loss.sum() / counted.sum()).item(),
                          "counted": counted.tolist(), "right": right.sum().item()}))
    """)  # fmt: skip
    assert found["ours"] == pytest.approx(found["theirs"], rel=1e-6)
    assert found["mean"] == pytest.approx(found["ours"], rel=1e-5)
    assert found["counted"] == [31 - 4, 31, 31]  # 31 next tokens per row, 4 of row 0 ignored
    assert 0 <= found["right"] <= sum(found["counted"])


def test_documents_are_packed_into_blocks_with_end_of_text_between_them(llm, tmp_path):
    found = run_json(llm, f"""
        import argparse, json, pathlib
        import numpy as np
        import data
        args = argparse.Namespace(smoke=True, smoke_samples=10, seq_len=8,
                                  checkpoint_dir=pathlib.Path({str(tmp_path)!r}))
        data.prepare(args)
        train, _ = data.build_datasets(args)
        tokens = np.fromfile(data.tokenized_dir(args) / "tokens.bin", dtype=np.uint32)
        texts = data.smoke_texts(80)
        tok = data.smoke_tokenizer()
        expected = [t for text in texts for t in tok(text)["input_ids"] + [tok.eos_token_id]]
        blocks = [train[i]["input_ids"].tolist() for i in range(len(train))]
        print(json.dumps({{"same": tokens.tolist() == expected, "blocks": blocks,
                          "n": len(expected), "labels": train[3]["labels"].tolist()}}))
    """)  # fmt: skip
    assert found["same"]  # every document's tokens, then end-of-text, in order
    assert len(found["blocks"]) == found["n"] // 8  # full blocks only: no padding
    flat = [t for block in found["blocks"] for t in block]
    assert all(len(block) == 8 for block in found["blocks"])
    assert found["labels"] == found["blocks"][3]  # shifted in the loss, not here
    assert 0 in flat  # the end-of-text token id joins documents
    assert len(flat) > 0


def test_flops_per_token_count_the_parameters_outside_the_embeddings(llm):
    found = run_json(llm, """
        import argparse, json, torch
        import model
        args = argparse.Namespace(smoke=True, from_scratch=False, model_name="x", seq_len=32)
        lm = model.build_model(args, 18)
        params = sum(p.numel() for p in lm.parameters())
        print(json.dumps({"flops": model.flops_per_token(args, 18), "params": params,
                          "embedding": lm.model.model.embed_tokens.weight.numel()}))
    """)  # fmt: skip
    # the smoke Llama: 2 layers of hidden size 64, 32 tokens per block
    assert found["flops"] == 6 * (found["params"] - found["embedding"]) + 12 * 2 * 64 * 32


def test_fsdp_units_are_the_embedding_table_the_decoder_layers_and_the_head(llm):
    found = run_json(llm, """
        import argparse, json, torch
        import fsdp, model
        from torch import nn
        args = argparse.Namespace(smoke=True, from_scratch=False, model_name="x", seq_len=32)
        lm = model.build_model(args, 18)
        print(json.dumps([type(unit).__name__ for unit in fsdp.units(lm)]))
    """)  # fmt: skip
    assert found == ["Embedding", "LlamaDecoderLayer", "LlamaDecoderLayer", "Linear"]


def test_norms_biases_and_embeddings_are_not_decayed(llm):
    found = run_json(llm, """
        import argparse, json
        import model, optim
        args = argparse.Namespace(smoke=True, from_scratch=False, model_name="x", seq_len=32,
                                  lr=1e-3, weight_decay=0.1)
        lm = model.build_model(args, 18)
        names = {id(p): n for n, p in lm.named_parameters()}
        groups = optim.build_optimizer(lm, args).param_groups
        print(json.dumps({str(g["weight_decay"]): sorted(names[id(p)] for p in g["params"])
                          for g in groups}))
    """)  # fmt: skip
    kept = found["0.0"]
    assert "model.model.embed_tokens.weight" in kept and "model.model.norm.weight" in kept
    assert not [n for n in found["0.1"] if "norm" in n or "embed" in n]
    assert "model.lm_head.weight" in found["0.1"]  # a weight matrix: decayed


@pytest.mark.parametrize("framework", ["lightning", "hf", "dp"])
def test_the_llm_task_is_refused_for_the_frameworks_it_is_not_written_for(cpu_machine, framework):
    with pytest.raises(errors.SpecError) as refused:
        build_spec({"name": "p", "task": "llm", "framework": framework}, cpu_machine)
    message = str(refused.value)
    assert "--framework ddp" in message and "\n" not in message


def test_a_language_models_micro_batch_defaults_to_blocks_that_fit(cpu_machine):
    # 8 blocks of 1024 tokens per process (32 for the other tasks' samples)
    assert build_spec({"name": "p", "task": "llm"}, cpu_machine).batch_size == 8
    assert build_spec({"name": "p", "task": "nlp"}, cpu_machine).batch_size == 32
    assert build_spec({"name": "p", "task": "llm", "batch_size": 2}, cpu_machine).batch_size == 2

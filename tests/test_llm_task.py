"""The llm task's own code, run from a rendered project: the loss against transformers'
own, validation's sums, the packed blocks, FLOPs per token, FSDP's units, weight decay;
and the frameworks it is written for."""

from __future__ import annotations

import functools
import json
import textwrap

import pytest

from genie import errors
from genie.spec import build_spec

from .conftest import CPU_MACHINE, new_project, ruff_generated, run_in
from .forks import Forks


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return new_project(tmp_path_factory.mktemp("llm"), CPU_MACHINE, task="llm", strategy="fsdp")


@pytest.fixture(scope="module")
def in_llm(llm):
    """run_in for the llm project: one interpreter imports torch and transformers' Llama
    once, and runs each snippet in a process forked from it."""
    forks = Forks(llm, PRELOAD)
    yield forks.run
    forks.close()


PRELOAD = """
import torch, numpy, tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast
import transformers.models.llama.modeling_llama
"""


def run_json(run, code: str) -> dict:
    out = run(code)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_generated_code_is_clean(llm):
    out = ruff_generated(llm)
    assert out.returncode == 0, out.stdout


def test_the_shifted_loss_is_transformers_own_and_validation_sums_to_it(in_llm):
    found = run_json(in_llm, """
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


def test_documents_are_packed_into_blocks_with_end_of_text_between_them(in_llm, tmp_path):
    found = run_json(in_llm, f"""
        import argparse, json, pathlib
        import numpy as np
        import data
        args = argparse.Namespace(smoke=True, smoke_samples=10, seq_len=8, format="text",
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


def test_flops_per_token_count_the_parameters_outside_the_embeddings(in_llm):
    found = run_json(in_llm, """
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


def test_fsdp_units_are_the_embedding_table_the_decoder_layers_and_the_head(in_llm):
    found = run_json(in_llm, """
        import argparse, json, torch
        import fsdp, model
        from torch import nn
        args = argparse.Namespace(smoke=True, from_scratch=False, model_name="x", seq_len=32)
        lm = model.build_model(args, 18)
        print(json.dumps([type(unit).__name__ for unit in fsdp.units(lm)]))
    """)  # fmt: skip
    assert found == ["Embedding", "LlamaDecoderLayer", "LlamaDecoderLayer", "Linear"]


def test_norms_biases_and_embeddings_are_not_decayed(in_llm):
    found = run_json(in_llm, """
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


SMOKE_LM = """
import argparse, json
import model
args = argparse.Namespace(smoke=True, from_scratch=False, model_name="x", seq_len=32,
                          lr=1e-3, weight_decay=0.1)
lm = model.build_model(args, 18)
"""


def test_the_trainer_decays_the_parameters_the_loop_decays(in_llm, tmp_path):
    """The Hugging Face Trainer's project (its model: the transformers model itself)
    decays the same weight matrices as the plain loop's optimizer."""
    hf = new_project(tmp_path, CPU_MACHINE, task="llm", framework="hf")
    loop = run_json(in_llm, SMOKE_LM + """
import optim
names = {id(p): n for n, p in lm.model.named_parameters()}
[decay, _] = optim.build_optimizer(lm, args).param_groups
print(json.dumps(sorted(names[id(p)] for p in decay["params"])))
""")  # fmt: skip
    trainer = run_json(functools.partial(run_in, hf), SMOKE_LM + """
import train
print(json.dumps(sorted(train.DropLastTrainer.get_decay_parameter_names(None, lm.model))))
""")  # fmt: skip
    assert trainer == loop and "lm_head.weight" in loop
    assert not [n for n in loop if "norm" in n or "embed" in n]


CHECK_FITS = """
import json, pathlib
import torch.distributed as dist
from transformers import AutoModelForCausalLM, LlamaConfig
import dist_utils
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
def model(hidden):
    config = LlamaConfig(vocab_size=32, hidden_size=hidden, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=True)
    return AutoModelForCausalLM.from_config(config)
tied, found = model(32), {}
for name, shard in (("one", "10GB"), ("shards", "20KB")):
    tied.save_pretrained(name, max_shard_size=shard)
    found[name] = sorted(p.name for p in pathlib.Path(name).glob("model*"))
    dist_utils.check_fits(tied, pathlib.Path(name))  # SystemExit: it does not fit
try:
    dist_utils.check_fits(model(64), pathlib.Path("one"))
except SystemExit:
    found["other"] = "stopped"
print(json.dumps(found))
"""


def test_the_trainers_resume_check_reads_a_tied_head_and_shards_as_the_models_own(tmp_path):
    """save_pretrained writes a head tied to the embedding once, and a large model in
    shards an index names: a resume of the same model is not refused for either, and a
    checkpoint of another size still is, in one line."""
    hf = new_project(tmp_path, CPU_MACHINE, task="llm", framework="hf")
    out = run_in(hf, CHECK_FITS)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["one"] == ["model.safetensors"]
    assert "model.safetensors.index.json" in found["shards"] and len(found["shards"]) > 2
    assert found["other"] == "stopped"
    [said] = [line for line in out.stderr.splitlines() if "does not fit this model" in line]
    assert "one does not fit this model: model.embed_tokens.weight is" in said


@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_the_llm_task_shards_only_where_its_units_are_written(gpu_machine, framework):
    """The Lightning and HF Trainer FSDP setups wrap by block or by size: the llm task's
    tied embedding and head are not written for them (the ddp loop's units are)."""
    answers = {"name": "p", "task": "llm", "framework": framework, "strategy": "fsdp"}
    with pytest.raises(errors.SpecError) as refused:
        build_spec(answers, gpu_machine)
    assert "--framework ddp" in str(refused.value) and "\n" not in str(refused.value)
    assert build_spec({**answers, "strategy": "ddp"}, gpu_machine).strategy == "ddp"
    assert build_spec({**answers, "framework": "ddp"}, gpu_machine).strategy == "fsdp"


@pytest.mark.parametrize("framework", ["dp"])
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


CHAT_TOKENIZERS = """
import json
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
import data
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\\n{{ m['content'] }}"
          "<|im_end|>\\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\\n"
          "{% endif %}")
words = ["<unk>", "<|im_start|>", "<|im_end|>", "user", "assistant", "system", "hi",
         "there", "how", "are", "you", "fine", "be", "brief"]
core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
core.pre_tokenizer = pre_tokenizers.Whitespace()
chatml = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>",
                                 eos_token="<|im_end|>", chat_template=CHATML)
chatml.add_tokens(["<|im_start|>"], special_tokens=True)
smoke = data.smoke_tokenizer()
def trained(tokenizer, messages):
    ids, mask = data.encode_chat(messages, tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    return {"tokens": tokens, "trained": [t for t, m in zip(tokens, mask) if m]}
"""


def test_chat_trains_on_the_assistants_turns_only_whatever_the_template(in_llm):
    """Two templates: the smoke one (role words) and a ChatML one (special tokens, the
    end-of-turn token being end-of-text)."""
    found = run_json(in_llm, CHAT_TOKENIZERS + textwrap.dedent("""
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi there"},
                {"role": "assistant", "content": "fine"},
                {"role": "user", "content": "how are you"},
                {"role": "assistant", "content": "hi there"}]
    smoke_messages = [{"role": "user", "content": "w1 w2"},
                      {"role": "assistant", "content": "w3 w4"},
                      {"role": "user", "content": "w5"},
                      {"role": "assistant", "content": "w6 w7 w8"}]
    print(json.dumps({"chatml": trained(chatml, messages),
                      "smoke": trained(smoke, smoke_messages)}))
    """))  # fmt: skip
    chatml, smoke = found["chatml"], found["smoke"]
    assert chatml["trained"] == ["fine", "<|im_end|>", "hi", "there", "<|im_end|>"]
    assert chatml["tokens"][-1] == "<|im_end|>"  # ends with end-of-text: none added
    assert chatml["tokens"].count("<|im_end|>") == 5
    assert smoke["trained"] == ["w3", "w4", "END", "w6", "w7", "w8", "END"]
    assert smoke["tokens"][-1] == "<|endoftext|>"  # added, and not trained on


def test_chat_blocks_label_every_prompt_token_ignored(in_llm, tmp_path):
    found = run_json(in_llm, f"""
        import argparse, json, pathlib
        import data
        args = argparse.Namespace(smoke=True, smoke_samples=10, seq_len=8, format="chat",
                                  checkpoint_dir=pathlib.Path({str(tmp_path)!r}))
        data.prepare(args)
        train, _ = data.build_datasets(args)
        tok = data.smoke_tokenizer()
        items = [train[i] for i in range(len(train))]
        pairs = [(tok.convert_ids_to_tokens([t])[0], int(label))
                 for item in items for t, label in zip(item["input_ids"], item["labels"])]
        print(json.dumps({{"pairs": pairs, "n": len(items)}}))
    """)  # fmt: skip
    pairs = found["pairs"]
    assert found["n"] > 5
    trained = [token for token, label in pairs if label != -100]
    prompt = [token for token, label in pairs if label == -100]
    assert trained and prompt
    assert not {"USER", "ASSISTANT", "<|endoftext|>"} & set(trained)
    assert "END" in trained and "END" in prompt  # the assistant's turns end; so do the user's
    # the token after ASSISTANT is always trained, the one after USER never
    after = {(a, pairs[i + 1][1] != -100) for i, (a, _) in enumerate(pairs[:-1])}
    assert ("ASSISTANT", True) in after and ("ASSISTANT", False) not in after
    assert ("USER", False) in after and ("USER", True) not in after


def test_a_batch_with_no_trained_token_has_loss_zero_not_nan(in_llm):
    found = run_json(in_llm, """
        import argparse, json, torch
        import model
        args = argparse.Namespace(smoke=True, from_scratch=False, model_name="x", seq_len=32)
        lm = model.build_model(args, 18)
        ids = torch.randint(0, 18, (2, 32))
        loss = model.training_loss(lm(ids), torch.full_like(ids, model.IGNORE))
        loss.backward()
        print(json.dumps({"loss": loss.item(),
                          "grads": all(p.grad.eq(0).all().item() for p in lm.parameters())}))
    """)  # fmt: skip
    assert found == {"loss": 0.0, "grads": True}


@pytest.mark.parametrize(
    "change, said",
    [
        ("data.SMOKE_CHAT_TEMPLATE = None", "has no chat template"),
        # a template that renders the last turn apart from the others (as some do for
        # reasoning traces): the assistant's span cannot be found
        ("data.SMOKE_CHAT_TEMPLATE = '{% for m in messages %}{{ m.content }}"
         "{% if loop.last %} LAST{% endif %} {% endfor %}'", "renders earlier turns"),
    ],
)  # fmt: skip
def test_chat_data_a_template_cannot_serve_stops_in_one_line(in_llm, tmp_path, change, said):
    out = in_llm(f"""
        import argparse, pathlib
        import data
        {change}
        args = argparse.Namespace(smoke=True, smoke_samples=10, seq_len=8, format="chat",
                                  model_name="x", checkpoint_dir=pathlib.Path({str(tmp_path)!r}))
        data.prepare(args)
    """)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    [line] = out.stderr.strip().splitlines()
    assert said in line and "--format text" in line
    assert not list(tmp_path.glob("tokens/*"))  # nothing counted as prepared

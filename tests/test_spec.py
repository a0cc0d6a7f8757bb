"""Spec validation as tables: raw answers -> Spec, or the exact error."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from genie import compat
from genie.errors import GenieError, SpecError
from genie.spec import FIELD_BY_NAME, FIELDS, Spec, build_spec
from genie.spec.answers import dump_answers, load_answers

from .conftest import spec_of


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, {"nodes": 1, "gpus_per_node": 0, "nproc_per_node": 2, "precision": "fp32",
              "master_addr": None, "rdzv": None, "torch": "2.14", "task": "custom"}),
        ({"gpus_per_node": "4"}, {"nproc_per_node": 4, "precision": "bf16"}),
        ({"gpus_per_node": 8, "nproc_per_node": 4}, {"nproc_per_node": 4}),
        ({"nodes": "2", "master_addr": "10.0.0.1"},
         {"master_addr": "10.0.0.1", "master_port": 29500, "rdzv": "c10d"}),
        ({"nodes": 2}, {"master_addr": "node0.cluster"}),  # detected hostname
        ({"nodes": 3, "master_addr": "gpu-01", "rdzv": "static", "master_port": "1234"},
         {"rdzv": "static", "master_port": 1234}),
        ({"torch": "2.3.1"}, {"torch": "2.3"}),
        ({"torch": "2.0", "python": "3.10", "compile": "yes"}, {"compile": True}),
        ({"lr": "3e-4"}, {"lr": 3e-4}),
        ({"compile": False, "seed": 0}, {"compile": False, "seed": 0}),
        ({"torch": "1.13", "python": "3.10"}, {"torch": "1.13"}),
        ({"framework": "dp", "gpus_per_node": 4}, {"nproc_per_node": None, "world_size": 1}),
        ({"framework": "lightning", "task": "cv"}, {"framework": "lightning", "task": "cv"}),
        ({"framework": "hf", "task": "nlp", "torch": "2.4", "python": "3.10"}, {"framework": "hf"}),
        ({}, {"strategy": "ddp"}),
        ({"strategy": "fsdp", "framework": "lightning", "gpus_per_node": 2}, {"strategy": "fsdp"}),
        ({"strategy": "fsdp", "torch": "2.2", "python": "3.10", "gpus_per_node": 2},
         {"strategy": "fsdp"}),
        ({"framework": "dp"}, {"strategy": None}),
    ],
)  # fmt: skip
def test_valid_answers_become_a_spec(cpu_machine, raw, expected):
    spec = spec_of(cpu_machine, **raw)
    for key, value in expected.items():
        assert getattr(spec, key) == value, key


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"gpus_per_node": "-1"}, "gpus_per_node (--gpus-per-node): '-1' is not valid: a whole number between 0 and 64"),
        ({"gpus_per_node": "abc"}, "gpus_per_node (--gpus-per-node): 'abc' is not valid: a whole number between 0 and 64"),
        ({"gpus_per_node": "2.5"}, "gpus_per_node (--gpus-per-node): '2.5' is not valid: a whole number between 0 and 64"),
        ({"nodes": 2, "master_addr": "h", "master_port": "70000"},
         "master_port (--master-port): '70000' is not valid: a whole number between 1024 and 65535"),
        ({"torch": "3.1"}, "torch (--torch): '3.1' is not valid: one of: " + ", ".join(FIELD_BY_NAME["torch"].titles())),
        ({"torch": "latest"}, "torch (--torch): 'latest' is not valid: one of: " + ", ".join(FIELD_BY_NAME["torch"].titles())),
        ({"name": "a/b"}, "name (--name): 'a/b' is not valid: letters, digits"),
        ({"name": ".."}, "name (--name): '..' is not valid: letters, digits"),
        ({"name": "x..y"}, "name (--name): 'x..y' is not valid: letters, digits"),
        ({"name": "{{ 7*7 }}"}, "name (--name): '{{ 7*7 }}' is not valid"),
        ({"nodes": 2, "master_addr": "localhost"}, "master_addr (--master-addr): 'localhost' is not valid: other nodes cannot reach localhost"),
        ({"nodes": 2, "master_addr": "127.0.0.1"}, "other nodes cannot reach a loopback address"),
        ({"nodes": 2, "master_addr": "bad host"}, "a hostname or IP address"),
        ({"master_addr": "10.0.0.1"}, "master_addr (--master-addr): '10.0.0.1' is not valid: only applies to multi-node"),
        ({"rdzv": "etcd", "nodes": 2}, "rdzv (--rdzv): 'etcd' is not valid: one of: c10d, static"),
        ({"precision": "fp8"}, "precision (--precision): 'fp8' is not valid: one of: bf16, fp16, fp32"),
        ({"precision": "fp16"}, "fp16 mixed precision needs CUDA GPUs; use bf16 or fp32 on CPU"),
        ({"gpus_per_node": 4, "nproc_per_node": 8}, "at most one process per GPU: 4 or fewer"),
        ({"batch_size": 0}, "batch_size (--batch-size): 0 is not valid: a whole number between 1 and 1000000"),
        ({"lr": "fast"}, "lr (--lr): 'fast' is not valid: a number"),
        ({"lr": "nan"}, "lr (--lr): 'nan' is not valid: a number"),
        ({"lr": 0}, "lr (--lr): 0 is not valid"),
        ({"compile": "maybe"}, "compile (--compile): 'maybe' is not valid: true or false"),
        ({"framework": "jax"}, "framework (--framework): 'jax' is not valid: one of: ddp, lightning, hf, dp"),
        ({"task": "rl"}, "task (--task): 'rl' is not valid: one of: custom, nlp, llm, cv"),
        ({"framework": "dp", "nodes": 2, "master_addr": "h"},
         "framework (--framework): 'dp' is not valid: DataParallel runs in one process on one node; use --framework ddp for --nodes > 1"),
        ({"framework": "dp", "nproc_per_node": 2},
         "nproc_per_node (--nproc-per-node): 2 is not valid: does not apply to --framework dp, which runs one process"),
        ({"framework": "lightning", "torch": "1.13", "python": "3.7"},
         "framework (--framework): 'lightning' is not valid: no lightning release supports torch 1.13 on Python 3.7"),
        ({"torch": "1.13", "python": "3.11"}, "torch (--torch): '1.13' is not valid: torch 1.13 supports Python 3.7-3.10, not 3.11"),
        ({"torch": "1.13", "python": "3.10", "compile": True}, "torch.compile needs torch 2.0 or newer"),
        ({"torch": "2.0", "python": "3.11", "compile": True},
         "torch 2.0 supports torch.compile up to Python 3.10, not 3.11; use --no-compile"),
        ({"python": "2.7"}, "python (--python): '2.7' is not valid: a Python version from 3.7"),
        ({"nodes": [1]}, "nodes (--nodes): [1] is not valid: a whole number between 1 and 4096"),
        ({"nodes": True}, "nodes (--nodes): True is not valid"),
        ({"strategy": "zero3"}, "strategy (--strategy): 'zero3' is not valid: one of: ddp, fsdp, hsdp"),
        ({"strategy": "hsdp"},
         "strategy (--strategy): 'hsdp' is not valid: hsdp shards within a node and replicates across nodes: it needs --nodes 2 or more; on one node use --strategy fsdp"),
        ({"strategy": "hsdp", "framework": "lightning", "gpus_per_node": 4, "nodes": 2,
          "master_addr": "h"},
         "strategy (--strategy): 'hsdp' is not valid: --strategy hsdp is written for --framework ddp; use --strategy fsdp here"),
        ({"strategy": "hsdp", "nodes": 2, "master_addr": "h", "torch": "2.6", "python": "3.11"},
         "strategy (--strategy): 'hsdp' is not valid: FSDP on CPU works from torch 2.14"),
        ({"framework": "dp", "strategy": "fsdp"},
         "strategy (--strategy): 'fsdp' is not valid: does not apply to --framework dp, which runs one process"),
        ({"strategy": "fsdp", "torch": "2.1", "python": "3.10"},
         "strategy (--strategy): 'fsdp' is not valid: FSDP checkpoints that load back need torch.distributed.checkpoint.state_dict (torch 2.2 or newer), not torch 2.1; use --torch 2.2 or newer, or --strategy ddp"),
        ({"strategy": "fsdp", "framework": "hf"},
         "strategy (--strategy): 'fsdp' is not valid: the Trainer (accelerate) uses FSDP only on GPUs; set --gpus-per-node, or use --framework ddp with torch 2.14 for FSDP on CPU"),
        ({"strategy": "fsdp", "torch": "2.6", "python": "3.11"},
         "strategy (--strategy): 'fsdp' is not valid: FSDP on CPU works from torch 2.14 (torch 2.6 needs GPUs for it); set --gpus-per-node"),
        ({"strategy": "fsdp", "gpus_per_node": 8, "precision": "fp16"},
         "strategy (--strategy): 'fsdp' is not valid: FSDP is generated for bf16 or fp32"),
    ],
)  # fmt: skip
def test_invalid_answers_give_one_exact_error(cpu_machine, raw, message):
    with pytest.raises(SpecError) as err:
        spec_of(cpu_machine, **raw)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_answer_key_is_refused_naming_it(cpu_machine):
    with pytest.raises(GenieError, match="unknown answer 'gpus'; known answers: name, nodes"):
        spec_of(cpu_machine, gpus=4)


def test_default_torch_is_the_installed_one_else_the_newest(cpu_machine):
    from dataclasses import replace

    assert spec_of(replace(cpu_machine, torch="2.6.0+cu124")).torch == "2.6"
    assert spec_of(replace(cpu_machine, torch=None)).torch == compat.NEWEST
    assert spec_of(replace(cpu_machine, torch="9.9.0")).torch == compat.NEWEST


def test_default_gpus_and_precision_come_from_the_machine(gpu_machine):
    spec = spec_of(gpu_machine)
    assert (spec.gpus_per_node, spec.nproc_per_node, spec.precision) == (8, 8, "bf16")
    assert spec.world_size == 8 and spec.global_batch == 8 * 32


def test_spec_has_exactly_the_declared_fields():
    assert tuple(f.name for f in fields(Spec)) == tuple(f.name for f in FIELDS)


def test_answers_file_round_trips_to_the_same_spec(cpu_machine, tmp_path):
    spec = spec_of(cpu_machine, nodes=2, master_addr="10.1.2.3", lr="2e-5", compile=True)
    path = tmp_path / "a.yml"
    path.write_text(dump_answers(spec))
    assert build_spec(load_answers(path), cpu_machine) == spec
    assert isinstance(spec, Spec)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("nodes: [1, 2\n", "is not valid YAML (line 2)"),
        ("- nodes\n", "must be a mapping of answer: value"),
        ("\tnodes: 2\n", "is not valid YAML"),
    ],
)
def test_malformed_answers_file_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "bad.yml"
    path.write_text(content)
    with pytest.raises(GenieError, match=re.escape(message)):
        load_answers(path)


def test_unreadable_answers_file_is_refused(tmp_path):
    with pytest.raises(GenieError, match="cannot read answers file .*No such file"):
        load_answers(tmp_path / "missing.yml")


def test_dataparallel_warns_that_it_is_slower_than_ddp(cpu_machine):
    assert any("slower than DDP" in w for w in spec_of(cpu_machine, framework="dp").warnings())
    assert spec_of(cpu_machine).warnings() == []


def test_the_wizard_offers_hsdp_only_across_nodes_with_the_plain_loop(cpu_machine):
    """Hybrid sharding replicates across nodes: on one node, or with a framework whose
    templates do not write it, the strategy question does not offer it."""
    from genie.spec import rules
    from genie.spec.questions import FIELD_BY_NAME

    field = FIELD_BY_NAME["strategy"]
    answers = spec_of(cpu_machine).answers()
    assert rules.allowed(field, answers) == ("ddp", "fsdp")
    across = spec_of(cpu_machine, nodes=2, master_addr="h").answers()
    assert rules.allowed(field, across) == ("ddp", "fsdp", "hsdp")
    lightning = spec_of(cpu_machine, nodes=2, master_addr="h", framework="lightning",
                        gpus_per_node=4).answers()  # fmt: skip
    assert rules.allowed(field, lightning) == ("ddp", "fsdp")


@pytest.mark.parametrize(
    ("task", "lr"), [("custom", 1e-3), ("cv", 1e-3), ("nlp", 5e-5), ("llm", 2e-5)]
)
def test_the_default_learning_rate_is_sized_per_task(cpu_machine, task, lr):
    """Fine-tuning the nlp task's pretrained transformer at 1e-3 wrecks it: 5e-5 there (the
    HF Trainer's default); an answer still wins. The README says the project's default."""
    from genie.generate import engine

    assert spec_of(cpu_machine, task=task).lr == lr
    assert spec_of(cpu_machine, task=task, lr="3e-4").lr == 3e-4
    files = engine.render(spec_of(cpu_machine, task=task))
    assert (
        f"The learning rate (`--lr`, by default {lr} for this task)" in files["README.md"].decode()
    )
    assert f"args.lr = SMOKE_LR if args.smoke else {lr}" in files["config.py"].decode()

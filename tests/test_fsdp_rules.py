"""FSDP at the size it exists for, as the generated code reads: every rank saves its own
shards (never the whole state on rank 0), accumulation reduce-scatters every micro-batch,
and the project can export a sharded checkpoint offline. The e2e tests run it
(tests/e2e/test_fsdp_e2e.py); the figures are bench/fsdp_checkpoints.py's."""

from __future__ import annotations

import pytest

from genie.generate import engine

from .conftest import CPU_MACHINE, call_keywords, call_names, project_code, spec_of

FSDP = {
    "fsdp2": {"strategy": "fsdp"},
    "fsdp1-torch2.4": {"strategy": "fsdp", "torch": "2.4", "python": "3.11", "gpus_per_node": 4},
    "fsdp1-torch2.2": {"strategy": "fsdp", "torch": "2.2", "python": "3.11", "gpus_per_node": 4},
}


@pytest.fixture(scope="module")
def projects() -> dict[str, dict[str, bytes]]:
    return {name: engine.render(spec_of(CPU_MACHINE, **answers)) for name, answers in FSDP.items()}


@pytest.fixture(scope="module")
def sources(projects) -> dict[str, str]:
    return {name: project_code(files) for name, files in projects.items()}


@pytest.mark.parametrize("variant", FSDP)
def test_every_rank_saves_and_loads_its_own_shards(projects, sources, variant):
    source = sources[variant]
    found = call_names(source)
    # checkpoints never gather the whole state (the model's build may send rank 0's weights)
    saving = projects[variant]["checkpoint.py"].decode()
    assert "full_state_dict" not in saving and "broadcast_from_rank0" not in saving
    assert {"get_state_dict", "set_state_dict", "dcp.load"} <= found
    # in the background where the torch version has it
    saver = "dcp.async_save" if variant != "fsdp1-torch2.2" else "dcp.save"
    assert saver in found and "process_group" in call_keywords(source, saver)


@pytest.mark.parametrize("variant", FSDP)
def test_accumulation_never_holds_unsharded_gradients(sources, variant):
    source = sources[variant]
    assert "set_requires_gradient_sync" not in source and "model.no_sync" not in source
    assert "no_sync" not in call_keywords(source, "Run")  # the loop's default: none


def test_fsdp2_compiles_each_block_before_sharding_it(projects):
    """torchtitan's order: with --compile, each block is compiled in place, then sharded;
    the sharded model as a whole is not compiled again (FSDP1 compiles the whole model)."""
    import ast

    for variant, fsdp2 in (("fsdp2", True), ("fsdp1-torch2.4", False)):
        train = projects[variant]["train.py"].decode()
        assert ("torch.compile" in call_names(train)) is not fsdp2
        if fsdp2:
            tree = ast.parse(projects[variant]["fsdp.py"].decode())
            [shard] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "shard"]
            line = {}  # each call's first line in shard()
            for n in ast.walk(shard):
                if isinstance(n, ast.Call):
                    name = ast.unparse(n.func)
                    line[name] = min(line.get(name, n.lineno), n.lineno)
            assert line["unit.compile"] < line["fully_shard"], line


@pytest.mark.parametrize("task", ["custom", "cv", "nlp"])
def test_fsdp2_builds_from_scratch_on_the_meta_device_and_initialises_in_place(task):
    """No rank builds the whole model for a model trained from scratch: every rank
    initialises its own shards with the task's init_weights (tests/e2e run it)."""
    files = engine.render(spec_of(CPU_MACHINE, strategy="fsdp", task=task))
    fsdp = files["fsdp.py"].decode()
    assert {"parameters_on_meta", "init_weights", "model.to_empty"} <= call_names(fsdp)
    model = files["model.py"].decode()
    assert "def init_weights(" in model and "def pretrained(" in model
    ddp = engine.render(spec_of(CPU_MACHINE, task=task))["model.py"].decode()
    assert "def init_weights(" not in ddp  # a DDP model initialises itself, once


def test_the_project_exports_a_sharded_checkpoint_offline(cpu_machine):
    files = engine.render(spec_of(cpu_machine, strategy="fsdp"))
    export = files["export.py"].decode()
    assert "dcp.load" in call_names(export) and "process_group" not in export
    readme = files["README.md"].decode()
    assert "python export.py checkpoints/last model.pt" in readme
    assert "checkpoints/step-N/" in readme and "last.pt" not in readme
    # DDP keeps its one file, written by rank 0
    ddp = engine.render(spec_of(cpu_machine))
    assert "export.py" not in ddp and "checkpoints/last.pt" in ddp["README.md"].decode()


@pytest.mark.parametrize("written_at, resumed_at", [(2, 4), (2, 1), (4, 2), (2, 2), (2, 3)])
def test_a_resume_at_another_world_size_trains_what_the_epoch_had_left(
    tmp_path, monkeypatch, written_at, resumed_at
):
    """The README's claim, with the project's own sampler and conversion: the samples the
    resumed ranks read are exactly those the writing ranks had not reached."""
    import importlib
    import sys

    from genie.generate import write

    write.write_project(tmp_path / "p", engine.render(spec_of(CPU_MACHINE, strategy="fsdp")))
    monkeypatch.syspath_prepend(str(tmp_path / "p"))
    names = ("checkpoint", "dist_utils", "optim")
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    checkpoint = importlib.import_module("checkpoint")
    size, batch, trained = 96, 4, 3  # samples; per rank; batches per rank before the save

    def read(world_size: int, skip_batches: int) -> list[int]:
        indices = []
        for rank in range(world_size):
            sampler = checkpoint.ResumableSampler(
                range(size), num_replicas=world_size, rank=rank, seed=7
            )
            sampler.set_epoch(2, skip=skip_batches * batch)
            indices += list(sampler)
        return indices

    left = set(read(written_at, trained))  # what the writers had not reached
    after = read(resumed_at, checkpoint.batches_at(resumed_at, trained, written_at))
    assert len(after) == len(set(after)) and set(after) >= left  # nothing read twice or lost
    # where batches x processes do not divide, at most a batch per rank is read again
    assert len(after) - len(left) < batch * resumed_at
    if trained * written_at % resumed_at == 0:
        assert set(after) == left
    for name in names:
        sys.modules.pop(name, None)

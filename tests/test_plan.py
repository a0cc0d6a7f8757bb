"""genie plan's arithmetic and choices, with the traced step replaced by a formula (the real
traces: tests/e2e/test_plan_e2e.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from genie.errors import GenieError
from genie.plan import command, estimate
from genie.plan.estimate import GIB, Figures, Setup

from .conftest import spec_of

BASE = Setup("ddp", 16, 1, "bf16", False, 8, 1)


def test_memory_sizes_and_gpu_names():
    assert estimate.parse_memory("80GiB") == 80 * GIB
    assert estimate.parse_memory("40GB") == 40 * 10**9
    assert estimate.parse_memory("h100") == 81559 * 1024**2
    assert estimate.parse_memory("NVIDIA H200") == 143771 * 1024**2
    with pytest.raises(GenieError, match="a size such as 80GiB"):
        estimate.parse_memory("lots")


def test_smaller_micro_batches_keep_the_global_batch():
    assert estimate.micro_batches(replace(BASE, batch=8, accumulation=3)) == [6, 4, 3, 2, 1]
    assert estimate.with_batch(replace(BASE, batch=8, accumulation=3), 6).accumulation == 4


def test_changes_come_cheapest_first_and_only_where_allowed():
    multi = estimate.changes(replace(BASE, precision="fp32"), 2, 8, lambda s: True)
    assert [what for what, _s in multi] == ["activation checkpointing", "fsdp", "hsdp",
                                            "bf16 from fp32"]  # fmt: skip
    assert multi[1][1].shard == 16 and multi[2][1].shard == 8  # fsdp: all ranks; hsdp: a node
    single = estimate.changes(BASE, 1, 8, lambda s: s.strategy != "fsdp")
    assert [what for what, _s in single] == ["activation checkpointing"]
    both = estimate.combine(BASE, [s for _w, s in multi])
    assert (both.strategy, both.shard, both.checkpointing) == ("fsdp", 16, True)


def test_the_flag_line_makes_the_setup():
    setup = Setup("fsdp", 16, 16, "bf16", True, 2, 4)
    assert setup.flags() == ("--strategy fsdp --precision bf16 --activation-checkpointing "
                             "--batch-size 2 --grad-accum 4")  # fmt: skip


def fake_trace(calls: list, failing: str = ""):
    """A model of 4 GiB of fp32 weights whose activations take 3 GiB per sample, a third
    of it with checkpointing, as a trace would report it (a ``failing`` strategy: an
    error, as trace.py reports one)."""

    def trace(setups):
        calls.append(setups)
        out: list = []
        for s in setups:
            if s.strategy == failing:
                out.append("RuntimeError: no such kernel")
                continue
            share = 4 * GIB // s.shard
            acts = s.batch * 3 * GIB // (3 if s.checkpointing else 1)
            sizes = {"parameters": share, "gradients": share, "optimizer": 2 * share,
                     "activations": acts, "temporaries": 0}  # fmt: skip
            out.append(Figures(s, sizes, estimate.overhead(sum(sizes.values()), True), True))
        return out, "2.14.1"

    return trace


@pytest.fixture
def traced(monkeypatch):
    calls: list = []
    monkeypatch.setattr(
        estimate, "trace", lambda _d, _p, _a, setups, on_gpu: fake_trace(calls)(setups)
    )
    monkeypatch.setattr(command, "allowed", lambda spec, setup: True)
    return calls


def test_a_setup_that_fits_is_traced_once(traced, cpu_machine, tmp_path):
    spec = spec_of(cpu_machine, gpus_per_node=8, nodes=2, master_addr="10.0.0.1", batch_size=2)
    made = command.make_plan(spec, tmp_path, 80 * GIB, "python", [])
    assert made.fits is True and len(traced) == 1 and made.suggestions == []
    report = made.as_json()
    assert report["ranks"][0]["total"] == made.figures.total > 22 * GIB
    assert set(report["ranks"][0]) >= {"parameters", "gradients", "optimizer", "activations",
                                       "temporaries", "overhead", "total"}  # fmt: skip
    assert report["verdict"] == {"fits": True, "spare": 80 * GIB - made.figures.total}
    json.dumps(report)


def test_what_to_change_when_it_does_not_fit(traced, cpu_machine, tmp_path):
    spec = spec_of(cpu_machine, gpus_per_node=8, nodes=2, master_addr="10.0.0.1", batch_size=16)
    made = command.make_plan(spec, tmp_path, 40 * GIB, "python", [])
    assert made.fits is False  # 16 GiB of states and 48 of activations
    offered = {what: f for what, f in made.suggestions}
    assert list(offered)[:3] == ["activation checkpointing", "fsdp", "hsdp"]
    assert offered["activation checkpointing"].total <= 40 * GIB  # activations: 16 GiB
    assert offered["fsdp"].total > 40 * GIB  # 1 GiB of states, the activations stay
    assert offered["all of the above"].setup.strategy == "fsdp"
    smaller = offered["micro-batch 4, accumulating 4"]  # 8 is over: 16 + 24 + overhead
    assert smaller.total <= 40 * GIB and smaller.setup.batch * smaller.setup.accumulation == 16
    assert not any(what.startswith("all of the above, micro-batch") for what in offered)
    report = made.as_json()
    assert [s["fits"] for s in report["suggestions"]][:2] == [True, False]


def test_no_verdict_without_a_memory_size(traced, cpu_machine, tmp_path):
    spec = spec_of(cpu_machine, gpus_per_node=8, batch_size=64)
    made = command.make_plan(spec, tmp_path, None, "python", [])
    assert made.fits is None and made.suggestions == [] and len(traced) == 1


def test_data_parallel_is_refused_in_one_line(cpu_machine):
    spec = spec_of(cpu_machine, gpus_per_node=2, framework="dp")
    with pytest.raises(GenieError, match="not DataParallel"):
        command.base_setup(spec)


def test_a_change_genie_new_would_refuse_is_not_offered(cpu_machine):
    """The same validation as genie new: hsdp is for genie's own loop only."""
    spec = spec_of(cpu_machine, gpus_per_node=8, nodes=2, master_addr="10.0.0.1",
                   framework="lightning")  # fmt: skip
    hsdp = Setup("hsdp", 16, 8, "bf16", False, 32, 1)
    assert not command.allowed(spec, hsdp)
    assert command.allowed(spec, replace(hsdp, strategy="fsdp", shard=16))
    ddp = spec_of(cpu_machine, gpus_per_node=8, nodes=2, master_addr="10.0.0.1")
    assert command.allowed(ddp, hsdp)


def test_a_suggestion_that_cannot_be_traced_is_named_and_the_rest_stand(monkeypatch, cpu_machine,
                                                                        tmp_path):  # fmt: skip
    calls: list = []
    monkeypatch.setattr(
        estimate, "trace", lambda _d, _p, _a, setups, on_gpu: fake_trace(calls, "hsdp")(setups)
    )
    monkeypatch.setattr(command, "allowed", lambda spec, setup: True)  # fmt: skip
    spec = spec_of(cpu_machine, gpus_per_node=8, nodes=2, master_addr="10.0.0.1", batch_size=16)
    made = command.make_plan(spec, tmp_path, 40 * GIB, "python", [])
    assert made.untraced == [("hsdp", "RuntimeError: no such kernel")]
    assert "fsdp" in dict(made.suggestions) and "hsdp" not in dict(made.suggestions)
    assert made.as_json()["not_traced"] == [
        {"change": "hsdp", "error": "RuntimeError: no such kernel"}
    ]


def test_train_arguments_after_the_dashes_set_the_micro_batch_and_precision():
    base = Setup("ddp", 16, 1, "bf16", False, 8, 2)
    assert command.overridden(base, ["--batch-size", "4", "--precision=fp32"]) == Setup(
        "ddp", 16, 1, "fp32", False, 4, 2)  # fmt: skip
    with pytest.raises(GenieError, match="'many' is not valid: a whole number between 1"):
        command.overridden(base, ["--batch-size", "many"])


def test_hsdp_shards_over_a_nodes_processes():
    base = Setup("ddp", 8, 1, "bf16", False, 8, 1)  # 2 nodes x 4 processes (of 8 GPUs each)
    offered = dict(estimate.changes(base, 2, 8, lambda s: True))
    assert offered["hsdp"].shard == 4


def test_counted_states_give_no_verdict(tmp_path):
    counted = Figures(BASE, dict.fromkeys(estimate.CATEGORIES, GIB), 0, traced=False)
    assert command.Plan(counted, 80 * GIB, "2.4.1").fits is None


def test_genie_new_traces_each_project_shown_once_and_only_with_a_memory_size(
    gpu_machine, monkeypatch, capsys
):
    """The summary's verdict: traced once per project however often the wizard shows it, and
    printed every time it is shown; nothing traced without a memory size, for DataParallel, or where genie's Python has no
    torch (then one line says how to plan later)."""
    from genie.generate import fit

    traced = []

    def make_plan(spec, folder, memory, python, argv):
        traced.append((spec.strategy, memory, sorted(p.name for p in folder.iterdir())))
        figures = Figures(replace(BASE, world=2), {c: GIB for c in estimate.CATEGORIES}, 0, True)
        return command.Plan(
            figures, memory, "2.14", [("fsdp", replace(figures, overhead=-4 * GIB))]
        )

    monkeypatch.setattr(command, "make_plan", make_plan)
    verdicts = fit.Verdicts()
    spec = spec_of(gpu_machine, gpus_per_node=2, gpu_memory="3GiB")
    offer = verdicts.show(spec)
    first = capsys.readouterr().out
    assert verdicts.show(spec) == offer and len(traced) == 1
    assert capsys.readouterr().out == first  # shown again, the same lines
    assert traced[0][:2] == ("ddp", 3 * GIB) and "model.py" in traced[0][2]
    assert offer == ("Make it fit: fsdp (1.00 GiB per rank)", command.setup_answers(BASE))
    assert "Peak memory per rank (genie plan): 5.00 GiB" in first
    assert "does not fit in 3.00 GiB: 2.00 GiB over" in first
    assert verdicts.show(spec_of(gpu_machine, gpus_per_node=2)) is None  # no size
    assert verdicts.show(spec_of(gpu_machine, framework="dp", gpu_memory="H100")) is None
    monkeypatch.setattr(fit.importlib.util, "find_spec", lambda name: None)
    assert verdicts.show(spec_of(gpu_machine, gpus_per_node=4, gpu_memory="H100")) is None
    assert len(traced) == 1
    assert "not planned here (torch is not installed beside genie)" in capsys.readouterr().out
    verdicts.show(spec_of(gpu_machine, gpus_per_node=4, gpu_memory="H100"))
    assert "not planned here" in capsys.readouterr().out  # said again when shown again

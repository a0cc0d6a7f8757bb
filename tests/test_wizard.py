"""The wizard, driven by keys fed through prompt_toolkit's pipe input."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from genie import wizard
from genie.spec import build, build_spec, rules
from genie.wizard import FIT

ENTER, DOWN, CTRL_C, CLEAR = "\r", "\x1b[B", "\x03", "\x15"  # \x15: Ctrl-U clears the line


def run_wizard(machine, keys: str, raw=None, then_eof: bool = False):
    asked: list[str] = []
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        if then_eof:
            pipe.close()
        ask = wizard.make_ask(machine, input=pipe, output=DummyOutput())

        def recording_ask(field, default, answers):
            asked.append(field.name)
            return ask(field, default, answers)

        spec = build_spec({"name": "proj", **(raw or {})}, machine, ask=recording_ask)
    return spec, asked


def test_enter_through_everything_gives_the_default_cpu_project(cpu_machine):
    spec, asked = run_wizard(cpu_machine, ENTER * 20)
    assert spec == build_spec({"name": "proj"}, cpu_machine)
    assert "master_addr" not in asked and "rdzv" not in asked  # single node: not asked
    assert spec.nproc_per_node == 2 and spec.precision == "fp32"


def test_defaults_shown_are_detected_from_the_machine(gpu_machine):
    spec, _asked = run_wizard(gpu_machine, ENTER * 20)
    assert (spec.gpus_per_node, spec.nproc_per_node, spec.precision) == (8, 8, "bf16")


def test_multi_node_answers_ask_for_the_master_and_rendezvous(cpu_machine):
    keys = (
        CLEAR + "2" + ENTER  # nodes
        + ENTER  # scheduler: none (not Kubernetes, where the operator sets the master)
        + CLEAR + "10.0.0.7" + ENTER  # master addr
        + ENTER  # port 29500
        + DOWN + ENTER  # rdzv: static
        + CLEAR + "4" + ENTER  # gpus per node
        + ENTER * 4  # torch, python, task, framework
        + ENTER  # nproc: default 4
        + ENTER * 20
    )  # fmt: skip
    spec, asked = run_wizard(cpu_machine, keys)
    assert asked[:6] == [
        "nodes",
        "scheduler",
        "master_addr",
        "master_port",
        "rdzv",
        "gpus_per_node",
    ]
    assert (spec.nodes, spec.gpus_per_node, spec.nproc_per_node) == (2, 4, 4)
    assert (spec.master_addr, spec.master_port, spec.rdzv) == ("10.0.0.7", 29500, "static")
    assert spec.precision == "bf16"  # the default follows the GPU answer


def test_picking_a_task_and_framework_from_the_lists(cpu_machine):
    keys = ENTER * 5 + DOWN * 3 + ENTER + DOWN + ENTER + ENTER * 20  # cv, lightning
    spec, asked = run_wizard(cpu_machine, keys)
    assert (spec.task, spec.framework) == ("cv", "lightning")


def test_the_llm_task_is_offered_the_frameworks_written_for_it(cpu_machine):
    keys = ENTER * 5 + DOWN * 2 + ENTER + DOWN * 2 + ENTER + ENTER * 20  # llm, then the last
    spec, asked = run_wizard(cpu_machine, keys)
    assert (spec.task, spec.framework) == ("llm", "hf")
    answers = {"task": "llm", "nodes": 1}
    assert rules.allowed(build.FIELD_BY_NAME["framework"], answers) == ("ddp", "lightning", "hf")


def test_dataparallel_skips_the_process_count_and_is_offered_only_on_one_node(cpu_machine):
    keys = ENTER * 6 + DOWN * 3 + ENTER + ENTER * 20  # framework: dp (4th)
    spec, asked = run_wizard(cpu_machine, keys)
    assert spec.framework == "dp" and spec.nproc_per_node is None and spec.world_size == 1
    assert "nproc_per_node" not in asked
    # on two nodes the list has no dp: the same keys land on another framework
    keys = CLEAR + "2" + ENTER + ENTER * 8 + DOWN * 3 + ENTER + ENTER * 20
    spec, _ = run_wizard(cpu_machine, keys)
    assert spec.nodes == 2 and spec.framework in ("ddp", "lightning", "hf")


def test_answers_already_given_are_not_asked(cpu_machine):
    _spec, asked = run_wizard(
        cpu_machine, ENTER * 20, raw={"nodes": 1, "torch": "2.6", "epochs": 5}
    )
    assert not {"nodes", "torch", "epochs"} & set(asked)


def test_an_invalid_reply_is_refused_and_asked_again(cpu_machine):
    keys = (
        ENTER * 2 + CLEAR + "abc" + ENTER + CLEAR + "-1" + ENTER + CLEAR + "0" + ENTER + ENTER * 20
    )
    spec, _asked = run_wizard(cpu_machine, keys)
    assert spec.gpus_per_node == 0


def test_torch_default_is_the_newest_verified_release(cpu_machine):
    machine = replace(cpu_machine, torch=None)
    spec, _ = run_wizard(machine, ENTER * 3 + ENTER + ENTER * 20)
    assert spec.torch == "2.14"  # 2.15 is offered above it, marked unverified
    spec, _ = run_wizard(machine, ENTER * 3 + DOWN + ENTER + ENTER * 20)
    assert spec.torch == "2.13"  # newest first: one down is older


def test_ctrl_c_interrupts(cpu_machine):
    with pytest.raises(KeyboardInterrupt):
        run_wizard(cpu_machine, ENTER + CTRL_C)


def test_end_of_input_raises_eof(cpu_machine):
    with pytest.raises(EOFError):
        run_wizard(cpu_machine, ENTER * 2, then_eof=True)


def test_fsdp_is_offered_only_where_it_can_be_generated(cpu_machine):
    # CPU + Lightning: FSDP needs GPUs there, so the list holds only ddp
    keys = ENTER * 6 + DOWN + ENTER + DOWN + ENTER + ENTER * 20  # lightning, then "down"
    spec, asked = run_wizard(cpu_machine, keys)
    assert spec.framework == "lightning" and spec.strategy == "ddp" and "strategy" in asked
    # plain PyTorch on CPU: fsdp is the second entry
    spec, _ = run_wizard(cpu_machine, ENTER * 7 + DOWN + ENTER + ENTER * 20)
    assert spec.framework == "ddp" and spec.strategy == "fsdp"


# ---------------------------------------------------------------- the whole wizard (run)

MENU_GENERATE, MENU_CHANGE, MENU_CUSTOMIZE, MENU_CANCEL = ENTER, "c", "t", "n"  # a letter chooses


def run_flow(machine, keys: str, raw=None, monkeypatch=None):
    asked: list[str] = []
    shown: list = []
    real = wizard.make_ask

    def recording_make_ask(machine, **kwargs):
        ask = real(machine, **kwargs)

        def recording(field, default, answers):
            asked.append(field.name)
            return ask(field, default, answers)

        return recording

    monkeypatch.setattr(wizard, "make_ask", recording_make_ask)
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        spec = wizard.run(
            {"name": "proj", **(raw or {})}, machine, shown.append, input=pipe, output=DummyOutput()
        )
    return spec, asked, shown


def test_the_default_path_asks_six_questions_then_the_summary(cpu_machine, monkeypatch):
    spec, asked, shown = run_flow(cpu_machine, ENTER * 6 + MENU_GENERATE, monkeypatch=monkeypatch)
    assert asked == ["nodes", "scheduler", "gpus_per_node", "torch", "task", "framework"]
    assert len(shown) == 1 and spec == shown[0] == build_spec({"name": "proj"}, cpu_machine)


def test_multi_node_essentials_add_master_port_and_rendezvous(cpu_machine, monkeypatch):
    keys = CLEAR + "2" + ENTER + ENTER + CLEAR + "10.0.0.7" + ENTER + ENTER * 6 + MENU_GENERATE
    spec, asked, _shown = run_flow(cpu_machine, keys, monkeypatch=monkeypatch)
    assert asked == ["nodes", "scheduler", "master_addr", "master_port", "rdzv", "gpus_per_node",
                     "torch", "task", "framework"]  # fmt: skip
    assert spec.master_addr == "10.0.0.7"


def test_customize_asks_the_training_settings(cpu_machine, monkeypatch):
    keys = ENTER * 6 + MENU_CUSTOMIZE + ENTER * 4 + CLEAR + "7" + ENTER + ENTER * 10 + MENU_GENERATE
    spec, asked, shown = run_flow(cpu_machine, keys, monkeypatch=monkeypatch)
    assert asked[6:11] == ["python", "strategy", "nproc_per_node", "precision", "batch_size"]
    assert "seed" in asked and spec.batch_size == 7 and len(shown) == 2


def test_change_a_setting_re_asks_only_that_one(cpu_machine, monkeypatch):
    # change: the list starts at nodes; three down is torch
    keys = ENTER * 6 + MENU_CHANGE + DOWN * 3 + ENTER + DOWN + ENTER + MENU_GENERATE
    spec, asked, _shown = run_flow(cpu_machine, keys, monkeypatch=monkeypatch)
    assert asked[6:] == ["torch"] and spec.torch == "2.13"


def test_cancel_returns_nothing(cpu_machine, monkeypatch):
    spec, _asked, _shown = run_flow(cpu_machine, ENTER * 6 + MENU_CANCEL, monkeypatch=monkeypatch)
    assert spec is None


def test_an_answer_a_later_rule_rejects_is_asked_again_not_fatal(cpu_machine, monkeypatch):
    # --python 3.11 on the command line; torch 1.13 (the last entry) does not run on it:
    # the wizard says so and asks the torch question again, now without 1.13.
    keys = ENTER * 3 + DOWN * 15 + ENTER + ENTER * 2 + ENTER + MENU_GENERATE
    spec, asked, _shown = run_flow(cpu_machine, keys, raw={"python": "3.11"},
                                   monkeypatch=monkeypatch)  # fmt: skip
    assert asked.count("torch") == 2 and spec.torch == "2.14"


def test_choices_come_from_the_same_rules_as_the_final_check(cpu_machine):
    from genie.spec import FIELD_BY_NAME
    from genie.spec.rules import allowed, problem_with

    cpu = {"nodes": 1, "gpus_per_node": 0, "torch": "2.14", "python": "3.11", "strategy": "ddp"}
    assert "fp16" not in allowed(FIELD_BY_NAME["precision"], cpu)
    assert allowed(FIELD_BY_NAME["compile"], {**cpu, "torch": "1.13", "python": "3.10"}) == (False,)
    assert "dp" not in allowed(FIELD_BY_NAME["framework"], {**cpu, "nodes": 2})
    too_many = problem_with(FIELD_BY_NAME["nproc_per_node"], 8, {**cpu, "gpus_per_node": 4})
    assert too_many and "at most one process per GPU" in too_many


def test_more_processes_than_gpus_is_refused_at_the_prompt(gpu_machine, monkeypatch):
    keys = ENTER * 2 + CLEAR + "2" + ENTER + ENTER * 4 + MENU_CUSTOMIZE + ENTER * 2  # 2 GPUs
    keys += CLEAR + "4" + ENTER + CLEAR + "1" + ENTER + ENTER * 10 + MENU_GENERATE  # 4: refused
    spec, _asked, _shown = run_flow(gpu_machine, keys, monkeypatch=monkeypatch)
    assert (spec.gpus_per_node, spec.nproc_per_node) == (2, 1)


def test_the_change_that_makes_it_fit_is_one_menu_choice(gpu_machine, monkeypatch):
    """The summary's verdict (show) offers a change; choosing it (f) sets its answers, a
    flag among them too, and the summary comes again, with its own verdict."""
    fits = {"strategy": "fsdp", "activation_checkpointing": True, "batch_size": 4}

    def show(spec):
        shown.append(spec)
        return None if spec.strategy == "fsdp" else ("Make it fit: fsdp", fits)

    shown: list = []
    keys = CLEAR + "2" + ENTER + CLEAR + "10.0.0.5" + ENTER * 4 + CLEAR + "H100" + ENTER + ENTER * 3
    with create_pipe_input() as pipe:
        pipe.send_text(keys + "f" + ENTER)
        spec = wizard.run({"name": "p", "batch_size": 32, "scheduler": "none"}, gpu_machine,
                          show, input=pipe, output=DummyOutput())  # fmt: skip
    assert [s.strategy for s in shown] == ["ddp", "fsdp"] and spec == shown[-1]
    assert (spec.batch_size, spec.activation_checkpointing, spec.gpu_memory) == (4, True, "H100")
    assert wizard._menu("Make it fit")[1][1:] == ("Make it fit", None, "f")
    assert FIT not in [entry[0] for entry in wizard._menu(None)]


def test_defaults_pass_the_same_rules(cpu_machine):
    # torch 1.13 runs up to Python 3.10: the Python default follows it instead of failing.
    spec = build_spec({"name": "proj", "torch": "1.13"}, cpu_machine)
    assert spec.python == "3.10"


def _screen(machine, field_name: str, default, keys: str) -> str:
    """What a terminal shows for one question, escape sequences removed."""
    import io
    import re

    from prompt_toolkit.data_structures import Size
    from prompt_toolkit.output.vt100 import Vt100_Output

    from genie.spec import FIELD_BY_NAME

    screen = io.StringIO()
    output = Vt100_Output(screen, lambda: Size(rows=24, columns=200), term="dumb")
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        ask = wizard.make_ask(machine, input=pipe, output=output)
        ask(FIELD_BY_NAME[field_name], default, {"torch": "2.14", "python": "3.11"})
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", screen.getvalue())


def test_a_hint_never_runs_into_the_answer(cpu_machine):
    shown = _screen(cpu_machine, "compile", False, "n" + ENTER)
    assert "slower.) (y/N) No" in shown and ".)No" not in shown
    shown = _screen(cpu_machine, "batch_size", 32, ENTER)
    assert "accumulation steps.)  32" in shown or "accumulation steps.) 32" in shown


# ---------------------------------------------------------------- the back key, hints

BACK = "\x1a"  # Ctrl-Z, which goes back as Esc does (a lone Esc waits to be told from Alt+key)


def test_back_asks_the_previous_question_again_with_its_answer_as_the_default(
    cpu_machine, monkeypatch
):
    keys = ENTER * 3 + DOWN + ENTER + BACK + ENTER + ENTER * 2 + MENU_GENERATE  # torch 2.13
    spec, asked, _shown = run_flow(cpu_machine, keys, monkeypatch=monkeypatch)
    assert asked == ["nodes", "scheduler", "gpus_per_node", "torch", "task", "torch", "task",
                     "framework"]  # fmt: skip
    assert spec.torch == "2.13"


def test_back_at_the_first_question_stays_there(cpu_machine, monkeypatch):
    spec, asked, _shown = run_flow(cpu_machine, BACK + ENTER * 6 + MENU_GENERATE,
                                   monkeypatch=monkeypatch)  # fmt: skip
    assert asked[:2] == ["nodes", "nodes"] and spec == build_spec({"name": "proj"}, cpu_machine)


def test_back_from_the_menu_asks_the_last_question_again(cpu_machine, monkeypatch):
    keys = ENTER * 6 + BACK + DOWN + ENTER + MENU_GENERATE  # framework: lightning
    spec, asked, shown = run_flow(cpu_machine, keys, monkeypatch=monkeypatch)
    assert asked[5:] == ["framework", "framework"] and spec.framework == "lightning"
    assert len(shown) == 2  # the summary again, after the answer


def test_back_goes_across_questions_the_rules_skipped(cpu_machine, monkeypatch):
    # two nodes ask for the master; back from the GPUs to 1 node, and it is not asked again
    keys = CLEAR + "2" + ENTER + ENTER + CLEAR + "10.0.0.7" + ENTER + ENTER * 2  # port, rdzv
    keys += BACK * 5 + CLEAR + "1" + ENTER + ENTER * 5 + MENU_GENERATE
    spec, asked, _shown = run_flow(cpu_machine, keys, monkeypatch=monkeypatch)
    assert asked[-6:] == ["nodes", "scheduler", "gpus_per_node", "torch", "task", "framework"]
    assert spec.nodes == 1 and spec.master_addr is None


def test_hints_wrap_at_words_and_between_wide_characters():
    from genie.cjk import cells, wrap

    text = "(c10d: after a failure torchrun restarts every worker, --master-addr kept.)"
    lines = wrap(text, 30, start=20, indent="  ")
    assert lines[0] == "(c10d:" and " ".join(x.strip() for x in lines) == text
    assert all(cells(x) <= 30 for x in lines) and "  --master-addr kept.)" in lines
    assert wrap("checkpointing", 30, start=25, indent="  ") == ["", "  checkpointing"]
    chinese = wrap(
        "（每个节点运行一个 torchrun；设为 1 则全部在本机运行。）", 20, start=4, indent="  "
    )
    assert all(cells(x) <= 20 for x in chinese) and "".join(chinese).count("torchrun") == 1
    assert not [x for x in chinese if x.strip()[:1] in "，。；）"], chinese  # kinsoku
    # room for the answer: the last word goes down with it rather than leave it no space
    assert wrap("one two three", 16, room=4) == ["one two", "three"]

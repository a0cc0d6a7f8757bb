"""genie convert never silently wrong (issue 22): the model that trains is the one wrapped,
where it is final; hand-made batches are split or flagged; decisions with a collective are
shared; the report says how the initial weights agree; TODOs make the command fail."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from genie.convert import convert, report
from genie.errors import GenieError

from .conftest import run_genie
from .test_convert import CORPUS, TRAIN

HEAD = """\
import torch
from torch.utils.data import DataLoader
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
"""
PLAIN = HEAD.replace("loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)\n", "")
MODEL = "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters())\n"
LOOP = """\
for x in loader:
    model(x).sum().backward()
    opt.step()
"""


def code(body: str, loop: str = LOOP) -> str:
    return convert(HEAD + textwrap.dedent(body) + loop).code


def test_a_model_rebuilt_after_training_is_not_the_one_wrapped():
    out = code(
        """\
        model = torch.nn.Linear(2, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        """,
        LOOP + "model = torch.nn.Linear(2, 1).to(device)\nmodel.load_state_dict(sd)\n",
    )
    assert out.index("model = DDP(model,") < out.index("opt = torch.optim")
    assert out.count("= DDP(") == 1 and "model.module.load_state_dict" not in out
    assert out.endswith("model.load_state_dict(sd)\n") or "    model.load_state_dict(sd)\n" in out


def test_a_model_is_wrapped_after_its_initialisation_and_load_not_after_its_move():
    out = code("""\
        model = torch.nn.Linear(2, 1).to(device)
        model.apply(init)
        if resume:
            model.load_state_dict(torch.load(resume))
        print(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        """)
    assert out.index("model.apply(init)") < out.index("model.load_state_dict(")
    assert out.index("model.load_state_dict(") < out.index("model = DDP(")
    assert out.index("model = DDP(") < out.index("opt = torch.optim")


def test_a_model_chosen_in_a_branch_is_wrapped_after_the_branch():
    out = code("""\
        if kind == "a":
            model = torch.nn.Linear(2, 1).to(device)
        elif kind == "b":
            model = torch.nn.Sequential(torch.nn.Linear(2, 1)).to(device)
        else:
            raise ValueError(kind)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        """)
    assert "    raise ValueError(kind)\nmodel = DDP(model.to(DEVICE)," in out


def test_a_model_updated_by_hand_without_an_optimizer_is_wrapped():
    loop = """\
for x in loader:
    model(x).sum().backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
"""
    out = code("model = torch.nn.Linear(2, 1).to(device)\n", loop)
    assert "model = DDP(model," in out


def test_gan_models_each_get_their_own_ddp_after_their_own_init():
    out = code(
        """\
        netG = torch.nn.Linear(2, 2).to(device)
        netG.apply(init)
        netD = torch.nn.Linear(2, 1).to(device)
        netD.apply(init)
        optD = torch.optim.Adam(netD.parameters())
        opt = torch.optim.Adam(netG.parameters())
        """,
        "for x in loader:\n    netD(netG(x)).sum().backward()\n",
    )
    assert out.index("netG.apply(init)") < out.index("netG = DDP(") < out.index("netD = torch")
    assert out.index("netD.apply(init)") < out.index("netD = DDP(") < out.index("optD = ")


def test_batch_indices_over_a_tensor_are_sharded_every_world_size_th_batch():
    loop = """\
for epoch in range(2):
    for i in range(0, data.size(0) - 1, 8):
        model(data[i : i + 8]).sum().backward()
        opt.step()
"""
    conversion = convert(PLAIN + MODEL + loop)
    assert "for i in shard(range(0, data.size(0) - 1, 8)):" in conversion.code
    assert "for epoch in range(2):" in conversion.code
    assert not conversion.todos and conversion.split


def test_training_loops_genie_cannot_split_are_todos_and_the_batch_is_not_claimed():
    source = (
        PLAIN
        + MODEL
        + (
            "for epoch in range(10):\n    model(X).sum().backward()\n    opt.step()\n"
            "while True:\n    model(next(gen)).sum().backward()\n"
        )
    )
    conversion = convert(source)
    assert [t.line for t in conversion.todos] == [6, 9]
    assert all("not split across processes" in t.what for t in conversion.todos)
    assert "# genie: TODO: this training loop's batches are not split" in conversion.code
    text = "\n".join(report(conversion, "x.py", 2))
    assert "all 2 processes train on the same batches" in text
    assert "global batch" not in text and "2 times the batch" not in text


def test_a_barrier_under_an_if_becomes_rank_0s_decision_for_every_process():
    out = convert((CORPUS / "best_checkpoint.py").read_text()).code
    assert "if same_on_every_rank(loss.item() < best_loss):" in out
    assert "def same_on_every_rank(decision: object) -> bool:" in out
    assert "dist.broadcast(flag, src=0)" in out


def test_early_stopping_is_shared_and_rank_tests_are_left_alone():
    loop = """\
for epoch in range(9):
    for x in loader:
        model(x).sum().backward()
    if bad > 3:
        break
    if val_loss > best:
        bad += 1
"""
    out = convert(HEAD + MODEL + loop).code
    assert "if same_on_every_rank(bad > 3):\n            break\n" in out
    assert "if val_loss > best:" in out  # no collective, no break there: left alone
    mine = loop.replace("if bad > 3:", "if RANK == 0 and bad > 3:")
    assert "same_on_every_rank" not in convert(HEAD + MODEL + mine).code


def test_the_report_says_how_initial_weights_agree_when_seeds_differ():
    def seeds(name: str) -> list[str]:
        conversion = convert((CORPUS / f"{name}.py").read_text())
        return [line for line in report(conversion, name, 2) if line.startswith("Seeds:")]

    assert seeds("gan_random_seed")[0].startswith("Seeds: the script seeds from random numbers")
    assert seeds("manual_sgd")[0].startswith("Seeds: the script sets no seed")
    assert "takes rank 0's random seed when it joins the process group" in seeds("manual_sgd")[0]
    assert seeds("fn_argparse") == []


def test_a_conversion_with_todos_is_refused_in_one_line_unless_allowed(tmp_path):
    """Never a script that runs and trains wrong: the shape and its place, nothing written."""
    (tmp_path / "train.py").write_bytes((CORPUS / "custom_sampler.py").read_bytes())
    refused = run_genie("convert", "train.py", "--no-check", "--yes", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert refused.stderr.strip().splitlines() == [
        "error: cannot convert train.py:27: train_loader has its own sampler: make it shard by "
        "rank (see DistributedSampler); nothing written (--allow-todo writes the script with a "
        "'# genie: TODO:' at each such line, to finish by hand)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]
    allowed = run_genie("convert", "train.py", "--no-check", "--allow-todo", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert "# genie: TODO: train_loader" in (tmp_path / "train_ddp.py").read_text()


def test_training_in_another_module_over_data_genie_cannot_see_is_a_todo():
    source = PLAIN + MODEL + "from helpers import fit\nfit(model, data, opt)\n"
    conversion = convert(source)
    [todo] = conversion.todos
    assert todo.what.startswith("found no training data to split") and not conversion.split


def test_a_placeholder_none_is_not_the_model_built():
    out = convert(
        "import torch\nmodel = None\n\n\ndef main():\n    global model\n"
        "    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters())\n"
        "    for x in loader:\n        model(x).sum().backward()\n"
    ).code
    assert "model = None\n" in out and "    model = DDP(model.to(DEVICE)," in out


NO_DATA = """\
import torch
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
{loop}
    model(x).sum().backward()
    opt.step()
"""
ONCE = "loader = DataLoader(torch.randn(64, 2), batch_size=8, shuffle=True)\nbatches = iter(loader)"


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (TRAIN.replace("shuffle=True)", "sampler=BucketSampler(labels))"),
         "t.py:8: loader has its own sampler: make it shard by rank (see DistributedSampler)"),
        (TRAIN.replace("        for x in loader:", "        loader = DataLoader(list(range(8)), "
                       "batch_size=2, shuffle=True)\n        for x in loader:"),
         "t.py:10: loader is built inside a loop: build it once, with a DistributedSampler, "
         "before the loop"),
        (NO_DATA.format(loop="for x in make_batches():"),
         "t.py:4: this training loop's batches are not split across processes"),
        (NO_DATA.format(loop="from torch.utils.data import DataLoader\n" + ONCE
                        + "\nwhile True:\n    x = next(batches)"),
         "t.py:5: no epoch loop found: call loader.sampler.set_epoch(epoch) at the start of "
         "each epoch"),
        (TRAIN.replace("{extra}", "    print(model.module)"),
         "t.py:14: model.module predates DDP: under DDP, .module is the unwrapped model"),
        ("import torch\ndef fit(model, batches):\n    opt = torch.optim.SGD(model.parameters())"
         "\n    for batch in batches:\n        model(batch).sum().backward()\n",
         "t.py:1: found no model to wrap in DDP"),
    ],
)  # fmt: skip
def test_each_shape_genie_cannot_convert_is_refused_with_its_place(source, said):
    """docs/convert.md's table of refusals, each example: the shape and file:line in one
    line, before anything is written."""
    from genie.convert import command

    with pytest.raises(GenieError) as err:
        command._refuse_todos(Path("t.py"), convert(source.replace("{extra}", ""), "t.py"))
    assert str(err.value).startswith("cannot convert " + said), str(err.value)
    assert str(err.value).endswith("nothing written (--allow-todo writes the script with a "
                                   "'# genie: TODO:' at each such line, to finish by hand)")  # fmt: skip
    assert "\n" not in str(err.value)


def test_a_refusal_names_the_first_place_and_counts_the_others():
    from genie.convert import command

    source = TRAIN.replace("shuffle=True)", "sampler=BucketSampler(labels))")
    source = source.replace("{extra}", "    print(model.module)")
    with pytest.raises(GenieError) as err:
        command._refuse_todos(Path("t.py"), convert(source, "t.py"))
    said = str(err.value)
    assert said.startswith("cannot convert t.py:8: loader has its own sampler")
    assert "(and 1 more: t.py:14); nothing written" in said

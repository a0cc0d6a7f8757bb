"""genie convert: each rewrite on small sources, refusals and TODOs, the corpus against its
golden output, and the command's file safety. The 2-process runs are in e2e/."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import black
import pytest

from genie.convert import convert, report, setup
from genie.errors import GenieError

from .conftest import ROOT, run_genie

CORPUS = ROOT / "tests" / "convert_corpus"
GOLDEN = CORPUS / "golden"
SCRIPTS = sorted(p.stem for p in CORPUS.glob("*.py"))

TRAIN = """\
import torch
from torch.utils.data import DataLoader

def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(2, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
    for epoch in range(2):
        for x in loader:
            model(x).sum().backward()
            opt.step()
        print(epoch)
{extra}

if __name__ == "__main__":
    main()
"""


def converted(source: str, **extra: str) -> str:
    return convert(textwrap.dedent(source).format(**extra) if extra else source).code


def body(extra: str) -> str:
    """TRAIN with ``extra`` lines at the end of main()."""
    return converted(TRAIN, extra=textwrap.indent(textwrap.dedent(extra), "    "))


# ---------------------------------------------------------------- devices


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('torch.device("cuda")', "DEVICE"),
        ('torch.device("cuda:0")', "DEVICE"),
        ("torch.device(0)", "DEVICE"),
        ('"cuda" if torch.cuda.is_available() else "cpu"', "DEVICE"),
        ('"cuda" if use_cuda else "cpu"', "DEVICE"),
        ("torch.accelerator.current_accelerator()", "DEVICE"),
        (
            'torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"',
            "DEVICE",
        ),
        ('torch.device("cuda", 0)', "DEVICE"),
        ('torch.device("cpu")', 'torch.device("cpu")'),
        ("args.device", "DEVICE"),
        ("torch.device(args.device)", "DEVICE"),
        ("torch.device(device_name)", "torch.device(device_name)"),
        ("self.device", "self.device"),
    ],
)
def test_every_spelling_of_the_gpu_becomes_this_process_device(before, after):
    out = body(f"d = {before}\n")
    assert f"    d = {after}\n" in out


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("x = x.cuda()", "x = x.to(DEVICE)"),
        ("x = x.cuda(non_blocking=True)", "x = x.to(DEVICE, non_blocking=True)"),
        ("x = x.to(0)", "x = x.to(DEVICE)"),
        ('x = x.to("cuda:0")', "x = x.to(DEVICE)"),
        ("x = x.to(torch.float16)", "x = x.to(torch.float16)"),
        ("x = x.to(cfg.device)", "x = x.to(DEVICE)"),
        ("x = x.to(y.device)", "x = x.to(y.device)"),
        ("x = torch.zeros(2, device=0)", "x = torch.zeros(2, device=DEVICE)"),
        ('x = torch.zeros(2, device="cuda")', "x = torch.zeros(2, device=DEVICE)"),
        ('x = torch.load("a.pt")', 'x = torch.load("a.pt", map_location=DEVICE)'),
        (
            'x = torch.load("a.pt", map_location="cuda:0")',
            'x = torch.load("a.pt", map_location=DEVICE)',
        ),
        (
            'x = torch.load("a.pt", map_location="cpu")',
            'x = torch.load("a.pt", map_location="cpu")',
        ),
    ],
)
def test_moves_and_loads_go_to_this_process_device(before, after):
    assert f"    {after}\n" in body(before + "\n")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('device = "cuda"', "device = DEVICE"),
        ("gpu_id = 0", "gpu_id = DEVICE"),
        ("self.device = 0", "self.device = DEVICE"),
        ("n_gpus = 2", "n_gpus = 2"),
        ("gpu_count = 1", "gpu_count = 1"),
        ('name = "cuda"', 'name = "cuda"'),
    ],
)
def test_names_that_hold_a_gpu_hold_this_process_device(before, after):
    assert f"    {after}\n" in body(before + "\n")


def test_set_device_is_left_to_genies_setup():
    out = body("torch.cuda.set_device(0)\n")
    assert "set_device(0)" not in out and "torch.cuda.set_device(DEVICE)" in out


# ---------------------------------------------------------------- the model


def test_the_model_is_wrapped_right_after_it_is_moved():
    out = converted(TRAIN, extra="")
    lines = out.splitlines()
    moved = lines.index("    model = torch.nn.Linear(2, 1).to(device)")
    assert lines[moved + 1] == (
        '    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)'
    )


def test_a_model_never_moved_is_moved_inside_the_wrap():
    out = convert(
        "import torch\nm = torch.nn.Linear(2, 2)\nopt = torch.optim.Adam(m.parameters())\n"
    )
    assert "m = DDP(m.to(DEVICE)," in out.code


def test_a_model_moved_only_in_a_branch_is_wrapped_after_the_branch_before_its_optimizer():
    source = """\
import torch
net = torch.nn.Linear(2, 2)
net.apply(init)
if use_gpu:
    net.cuda()
# the optimizer
opt = torch.optim.Adam(net.parameters())
"""
    out = convert(source).code
    assert "    net.to(DEVICE)\nnet = DDP(net.to(DEVICE)," in out
    assert out.index("net = DDP(") < out.index("# the optimizer")
    assert out.index("net.apply(init)") < out.index("net = DDP(")


def test_state_dict_saves_and_loads_after_the_wrap_use_the_unwrapped_module():
    out = body("""\
        torch.save(model.state_dict(), "m.pt")
        model.load_state_dict(torch.load("m.pt"))
        torch.save(model, "whole.pt")
        """)
    assert "torch.save(unwrap(model).state_dict(), " in out
    assert "unwrap(model).load_state_dict(" in out
    assert 'torch.save(unwrap(model), "whole.pt")' in out
    assert "    return model.module if isinstance(model, DDP) else model\n" in out


def test_attributes_ddp_does_not_forward_go_to_the_unwrapped_model():
    out = body("""\
        z = model.decode(x)
        w = model.weight
        model.eval()
        n = sum(p.numel() for p in model.parameters())
        """)
    assert "    z = unwrap(model).decode(x)\n    w = unwrap(model).weight\n" in out
    assert "    model.eval()\n" in out and "model.parameters()" in out


def test_unwrap_gives_a_plain_model_back_as_it_is():
    """A name that holds a plain model again after training (reloaded whole, as
    word_language_model does) and a function called with either keep working."""
    import torch

    namespace: dict = {"torch": torch, "DDP": torch.nn.parallel.DistributedDataParallel}
    exec(setup.UNWRAP, namespace)
    plain = torch.nn.Linear(2, 1)
    wrapped = object.__new__(namespace["DDP"])  # no process group: only its class matters
    torch.nn.Module.__init__(wrapped)
    wrapped.module = plain
    assert namespace["unwrap"](plain) is plain and namespace["unwrap"](wrapped) is plain


def test_an_optimizer_chosen_by_name_is_found_and_the_model_wrapped_before_it():
    out = converted(TRAIN.replace(
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)",
        "opt = getattr(torch.optim, name)(model.parameters(), lr=0.1)",
    ).replace("def main():", "def main(name='SGD'):"))  # fmt: skip
    assert out.index("model = DDP(") < out.index("opt = getattr(torch.optim, name)(")


def test_a_model_that_builds_its_own_optimizer_is_the_one_wrapped():
    """nanoGPT's model.configure_optimizers(): the model is found through the method, wrapped
    before it is called, and the call goes to the plain model."""
    source = TRAIN.replace(
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)",
        "opt = model.configure_optimizers(0.1)",
    ) + textwrap.dedent("""
        class Net(torch.nn.Linear):
            def configure_optimizers(self, lr):
                return torch.optim.AdamW([p for p in self.parameters()], lr=lr)
        """)  # fmt: skip
    out = converted(source)
    assert out.index("model = DDP(") < out.index("opt = unwrap(model).configure_optimizers(0.1)")


def test_a_script_refused_for_no_optimizer_still_is():
    with pytest.raises(GenieError, match="no optimizer over a model's parameters found"):
        convert("import torch\nmodel = torch.nn.Linear(2, 1)\nprint(model(torch.ones(2)))\n")


@pytest.mark.parametrize(
    ("draw", "helper"),
    [
        ("x = torch.randint(0, 8, (2,))", "    torch.manual_seed(seed)\n"),
        ("x = np.random.randint(0, 8, 2)", "    np.random.seed(seed % 2**32)\n"),
        ("x = random.sample(range(8), 2)", "    random.seed(seed)\n"),
    ],
)
def test_random_draws_while_training_are_each_ranks_own(draw, helper):
    """Batches picked at random or noise drawn in the training loop: after the wrap every
    rank seeds seed + RANK (else all draw the same); data made before it stays the same."""
    source = "import random\nimport numpy as np\n" + TRAIN.replace(
        "            model(x).sum().backward()", f"            {draw}\n            model(x).sum().backward()"
    )  # fmt: skip
    out = converted(source)
    assert out.index("model = DDP(") < out.index("seed_each_rank()\n") < out.index(draw)
    assert "    seed = torch.initial_seed() + RANK\n" + "    torch.manual_seed(seed)\n" in out
    assert helper in out
    seeded = TRAIN.replace("    device =", "    torch.manual_seed(0)\n    device =")
    assert "seed_each_rank" not in converted(seeded.replace("list(range(8))", "torch.rand(8)"))


def test_an_unseeded_script_starts_every_rank_from_rank_0s_seed():
    """Data drawn once the script runs (regression's random target function in
    pytorch/examples) must be the same on every rank."""
    out = converted(TRAIN.replace("list(range(8))", "torch.rand(8)"))
    assert (
        '    dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo")\n'
        "    torch.manual_seed(shared_seed())"
    ) in out
    assert "def shared_seed() -> int:" in out
    seeded = TRAIN.replace("    device =", "    torch.manual_seed(0)\n    device =")
    assert "shared_seed" not in converted(seeded)


def test_a_resume_before_the_wrap_keeps_the_plain_model():
    source = TRAIN.replace(
        "    model = torch.nn.Linear(2, 1).to(device)\n",
        '    model = torch.nn.Linear(2, 1)\n    model.load_state_dict(torch.load("x.pt"))\n'
        "    model.to(device)\n",
    )
    out = converted(source.format(extra=""))
    assert '    model.load_state_dict(torch.load("x.pt", map_location=DEVICE))\n' in out
    assert "    model.to(device)\n    model = DDP(model," in out


def test_data_parallel_becomes_ddp_and_its_branch_disappears():
    source = TRAIN.replace(
        "    opt = torch",
        "    if torch.cuda.device_count() > 1:\n        model = torch.nn.DataParallel(model)\n"
        "    opt = torch",
    )
    out = converted(source.format(extra=""))
    assert "DataParallel(" not in out.replace("DistributedDataParallel", "")
    assert "device_count" not in out and out.count("= DDP(") == 1


def test_a_model_genie_cannot_place_is_a_todo_in_the_report():
    source = """\
import torch
def fit(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in batches:
        model(batch).sum().backward()
"""
    conversion = convert(source)
    assert "DDP(" not in conversion.code
    assert any(todo.what.startswith("found no model to wrap in DDP") for todo in conversion.todos)


def test_manual_model_module_is_a_todo_without_data_parallel():
    conversion = convert(TRAIN.format(extra="    print(model.module)"))
    [todo] = conversion.todos
    assert "model.module" in todo.what and todo.line == 14
    assert "# genie: TODO: model.module predates DDP" in conversion.code


# ---------------------------------------------------------------- data loaders


def test_training_loader_gets_a_sampler_with_its_shuffle_and_set_epoch():
    out = converted(TRAIN, extra="")
    assert "sampler=DistributedSampler(" in out and "shuffle=True)" in out
    assert "shuffle=True," not in out
    assert "    for epoch in range(2):\n        loader.sampler.set_epoch(epoch)\n" in out


def test_a_loader_without_shuffle_keeps_its_order():
    source = TRAIN.replace("shuffle=True", "drop_last=True")
    out = converted(source.format(extra=""))
    assert "DistributedSampler(dataset, shuffle=False)" in out


def test_shuffle_hidden_in_spread_kwargs_moves_into_the_sampler_before_the_spread():
    source = TRAIN.replace(
        "loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)",
        "loader = DataLoader(data, **kwargs)",
    )
    out = converted(source.format(extra=""))
    assert 'sampler=DistributedSampler(data, shuffle=kwargs.pop("shuffle", False)),' in out
    assert out.index("sampler=DistributedSampler(data") < out.index("**kwargs")


def test_a_script_black_would_change_keeps_its_own_layout():
    source = TRAIN.replace("print(epoch)", "print('epoch',  epoch)")
    out = converted(source.format(extra=""))
    assert "            print('epoch',  epoch)\n" in out


def test_evaluation_loaders_stay_whole_and_the_report_says_so():
    source = TRAIN.replace(
        "    for epoch", "    val_loader = DataLoader(list(range(4)), batch_size=2)\n    for epoch"
    )
    conversion = convert(source.format(extra=""))
    assert "val_loader = DataLoader(list(range(4)), batch_size=2)" in conversion.code
    notes = report(conversion, "t.py", 2)
    assert any(n.startswith("Evaluation: val_loader is left whole") for n in notes)
    assert any("global batch of 2 x 2" in n and "learning rate is unchanged" in n for n in notes)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)",
          "loader = DataLoader(list(range(8)), batch_size=2, sampler=my_sampler)"),
         "has its own sampler"),
        (("        for x in loader:",
          "        loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)\n"
          "        for x in loader:"),
         "is built inside a loop"),
    ],
)  # fmt: skip
def test_loaders_genie_cannot_shard_safely_are_todos_at_the_spot(change, why):
    conversion = convert(TRAIN.replace(*change).format(extra=""))
    assert any(why in t.what for t in conversion.todos)
    assert f"# genie: TODO: loader {why}" in conversion.code


LOADER = "loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)"


@pytest.mark.parametrize(
    ("sampler", "drawn"),
    [
        ("RandomSampler(data, replacement=True)",
         "RandomSampler(data, replacement=True, num_samples=per_rank(len(data)), "
         "generator=rank_generator())"),
        ("torch.utils.data.RandomSampler(data, True, int(1e10))",
         "torch.utils.data.RandomSampler(data, True, per_rank(int(1e10)), "
         "generator=rank_generator())"),
        ("WeightedRandomSampler(w, num_samples=len(w))",
         "WeightedRandomSampler(w, num_samples=per_rank(len(w)), generator=rank_generator())"),
        ("WeightedRandomSampler(w, 80, True)",
         "WeightedRandomSampler(w, per_rank(80), True, generator=rank_generator())"),
        ("RandomSampler(replacement=True, data_source=data)",
         "RandomSampler(replacement=True, data_source=data, num_samples=per_rank(len(data)), "
         "generator=rank_generator())"),
        ("RandomSampler(Sub(data), True)", None),  # its count would build the data again
        ("RandomSampler(data)", None),  # without replacement: a DistributedSampler's job
        ("RandomSampler(data, replacement=flag)", None),  # not known to draw with replacement
        ("WeightedRandomSampler(w, 80, replacement=False)", None),
        ("WeightedRandomSampler(w, 80, generator=g)", None),  # a generator of the script's
    ],
)  # fmt: skip
def test_a_sampler_drawing_with_replacement_draws_each_ranks_share(sampler, drawn):
    source = TRAIN.replace(LOADER, f"sampler = {sampler}\n    "
                           "loader = DataLoader(data, batch_size=2, sampler=sampler)")  # fmt: skip
    conversion = convert(source.format(extra=""))
    if drawn is None:
        assert [t.what for t in conversion.todos] == ["loader has its own sampler: make it shard "
                                                      "by rank (see DistributedSampler)"]  # fmt: skip
        return
    assert f"sampler = {drawn}\n" in conversion.code and not conversion.todos
    assert "DistributedSampler" not in conversion.code and conversion.split
    assert "def per_rank(" in conversion.code and "def rank_generator(" in conversion.code
    assert 'WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))' in conversion.code


@pytest.mark.parametrize(
    ("loop", "todo"),
    [
        # batch indices with noise drawn beside them: still sharded by index
        ("    for i in range(0, 64, 8):\n        x = data[i : i + 8] + torch.randn(8, 2)\n", False),
        # a loop that only counts steps and draws its batches: split by the draws
        ("    for step in range(10):\n        x = torch.randn(8, 2)\n", False),
        # data from elsewhere, noise drawn: the data is not split
        ("    for x in stream():\n        x = x + torch.randn(8, 2)\n", True),
        ("    while True:\n        x = next(batches) + torch.randn(8, 2)\n", True),
    ],
)  # fmt: skip
def test_only_a_loop_that_reads_no_data_counts_as_split_by_its_draws(loop, todo):
    source = (
        "import torch\n\ndef main():\n    torch.manual_seed(0)\n    data = torch.randn(64, 2)\n"
        "    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters())\n"
        + loop
        + "        model(x).sum().backward()\n        opt.step()\n"
    )
    conversion = convert(source)
    assert bool(conversion.todos) is todo, conversion.code
    assert ("shard(range(0, 64, 8))" in conversion.code) is loop.startswith("    for i in")


def test_an_unseeded_script_drawing_its_data_after_the_model_keeps_it_the_same_on_every_rank():
    source = (
        "import torch\n\nmodel = torch.nn.Linear(10, 1)\nX = torch.randn(64, 10)\n"
        "y = X @ torch.randn(10, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(0, 64, 8):\n    model(X[i : i + 8]).sub(y[i : i + 8]).pow(2).mean().backward()\n"
        "    opt.step()\n"
    )  # fmt: skip
    out = convert(source).code
    assert "torch.manual_seed(shared_seed())" in out and "seed_each_rank" not in out


def test_an_endless_loop_over_next_of_a_split_loader_is_split():
    """minGPT's loop: ``while True`` over ``next(data_iter)``; over anything else it is not."""
    loop = ("    data_iter = iter(loader)\n    while True:\n        x = next(data_iter)\n"
            "        model(x).sum().backward()\n        opt.step()\n")  # fmt: skip
    source = TRAIN.replace("    for epoch in range(2):\n", loop + "    for epoch in range(2):\n")
    assert not convert(source.format(extra="")).todos
    other = source.replace("next(data_iter)", "next(stream)")
    assert [t.what.split(":")[0] for t in convert(other.format(extra="")).todos] == [
        "this training loop's batches are not split across processes"
    ]


def test_an_iterator_made_anew_in_a_training_loop_starts_the_loaders_next_epoch():
    """``while True`` over ``next()``, a new iterator when one ends: no epoch loop, so each
    new iterator sets the next epoch (the same on every rank: they end at the same step)."""
    loop = ("    batches = iter(loader)\n    while True:\n        try:\n"
            "            x = next(batches)\n        except StopIteration:\n"
            "            batches = iter(loader)\n            x = next(batches)\n"
            "        model(x).sum().backward()\n        opt.step()\n")  # fmt: skip
    start = TRAIN.index("    for epoch in range(2):\n")
    source = TRAIN[:start] + loop + TRAIN[TRAIN.index("{extra}") :]
    conversion = convert(source.format(extra=""))
    assert not conversion.todos
    assert (
        "        except StopIteration:\n"
        "            loader.sampler.set_epoch(loader.sampler.epoch + 1)\n"
        "            batches = iter(loader)\n"
    ) in conversion.code
    assert conversion.code.count("set_epoch") == 1  # not for the first iterator


STREAM = """\
class Stream(IterableDataset):
    def __iter__(self):
        yield from range(8)

"""


@pytest.mark.parametrize(
    "dataset",
    ["Stream()", "load_dataset('c4', split='train', streaming=True)", "Chunks()", "Deep()",
     "load_dataset('c4', streaming=True)['train'].shuffle(seed=0)"],
)  # fmt: skip
def test_a_loader_over_an_iterable_dataset_reads_each_ranks_share_of_it(dataset):
    subclass = "".join(f"class {a}({b}):\n    pass\n\n" for a, b in
                       [("Chunks", "Stream"), ("A", "Chunks"), ("B", "A"), ("Deep", "B")])  # fmt: skip
    source = (
        STREAM + subclass + TRAIN.replace(LOADER, f"loader = DataLoader({dataset}, batch_size=2)")
    )
    conversion = convert(source.format(extra=""))
    assert f"loader = DataLoader(RankShard({dataset}), batch_size=2)" in conversion.code
    assert "DistributedSampler" not in conversion.code and not conversion.todos
    assert "class RankShard(torch.utils.data.IterableDataset):" in conversion.code


@pytest.mark.parametrize(("count", "world"), [(203, 2), (203, 3), (8, 4), (3, 4)])
def test_rank_shards_are_disjoint_and_the_same_count_on_every_rank(count, world):
    """An uneven stream: one rank with a batch more would wait forever at the end."""
    from genie.convert import iterables

    shares = []
    for rank in range(world):
        scope = {"torch": __import__("torch"), "RANK": rank, "WORLD_SIZE": world}
        exec(iterables.HELPER, scope)
        shares.append(list(scope["RankShard"](range(count))))
        assert len(scope["RankShard"](range(count))) == count // world
    assert len({len(share) for share in shares}) == 1 and len(shares[0]) == count // world
    assert len(set().union(*map(set, shares))) == world * (count // world)


def test_batches_from_a_plain_list_are_shared_out_the_same_count_per_rank():
    source = """\
import torch
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [torch.randn(4, 2) for _ in range(3)]
for i, batch in enumerate(batches):
    model(batch).sum().backward()
    opt.step()
"""
    conversion = convert(source)
    assert "    for i, batch in enumerate(shard(batches)):\n" in conversion.code
    assert "return items[RANK::WORLD_SIZE][: len(items) // WORLD_SIZE]" in conversion.code
    assert any(c.line == 5 and "its share" in c.what for c in conversion.changes)
    namespace: dict = {}
    exec(conversion.code.split("\nsetup_distributed()\n")[0], namespace)
    namespace.update(RANK=1, WORLD_SIZE=2)
    assert namespace["shard"](list(range(5))) == [1, 3]


# ---------------------------------------------------------------- rank 0


def test_progress_and_files_come_from_rank_0_with_a_barrier_before_reading():
    out = body("""\
        logging.info("done")
        with open("log.txt", "w") as f:
            f.write("x")
        torch.save(model.state_dict(), "m.pt")
        state = torch.load("m.pt")
        """)
    assert "        if RANK == 0:\n            print(epoch)\n" in out
    assert (
        '    if RANK == 0:\n        logging.info("done")\n        with open("log.txt", "w")' in out
    )
    assert 'torch.save(unwrap(model).state_dict(), "m.pt")\n    dist.barrier()\n' in out


def test_experiment_loggers_exist_and_log_on_rank_0_only():
    source = TRAIN.replace(
        "    for epoch", "    writer = SummaryWriter(log_dir='runs')\n    for epoch"
    ).replace("print(epoch)", "writer.add_scalar('epoch', epoch)")
    out = converted(source.format(extra="    writer.close()"))
    assert "    writer = SummaryWriter(log_dir='runs') if RANK == 0 else None\n" in out
    assert "        if RANK == 0:\n            writer.add_scalar('epoch', epoch)\n" in out
    assert "    if RANK == 0:\n        writer.close()\n" in out


def test_a_print_that_runs_the_scripts_own_code_stays_on_every_rank():
    source = TRAIN.replace("print(epoch)", "print(evaluate(model))")
    source += "\ndef evaluate(m):\n    return 0\n"
    out = converted(source.format(extra=""))
    assert "        print(evaluate(model))\n" in out


def test_progress_bars_show_on_rank_0_only():
    out = body("for _ in tqdm(range(3)):\n    pass\n")
    assert "tqdm(range(3), disable=RANK != 0)" in out


# ---------------------------------------------------------------- setup and refusals


def test_the_main_block_joins_and_leaves_the_group_in_a_finally():
    out = converted(TRAIN, extra="")
    assert out.endswith(
        'if __name__ == "__main__":\n    setup_distributed()\n    try:\n        main()\n'
        "    finally:\n        cleanup_distributed()\n"
    )
    assert "def setup_distributed() -> None:" in out and 'init_process_group("nccl" if' in out


def test_a_main_block_after_top_level_training_objects_joins_before_them():
    source = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

if __name__ == "__main__":
    for epoch in range(2):
        for x in loader:
            model(x).sum().backward()
"""
    out = convert(source).code
    assert out.index("\nsetup_distributed()\n") < out.index("loader = DataLoader(")
    assert out.count("setup_distributed()\n") == 1
    assert out.endswith("    finally:\n        cleanup_distributed()\n")


def test_a_bare_main_call_runs_in_the_try():
    source = TRAIN.format(extra="").replace('if __name__ == "__main__":\n    main()', "main()")
    out = convert(source).code
    assert out.endswith(
        "\nsetup_distributed()\n\ntry:\n    main()\nfinally:\n    cleanup_distributed()\n"
    )


def test_comments_and_layout_survive():
    source = TRAIN.replace("    for epoch", "    # two epochs are plenty\n    for epoch")
    out = converted(source.format(extra=""))
    assert "    # two epochs are plenty\n    for epoch in range(2):" in out


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("torch.distributed.init_process_group('nccl')", "init_process_group"),
        ("from torch.nn.parallel import DistributedDataParallel", "DistributedDataParallel"),
        ("from accelerate import Accelerator", "Hugging Face Accelerate"),
        ("import lightning as L", "PyTorch Lightning"),
        ("import pytorch_lightning as pl", "PyTorch Lightning"),
        ("from transformers import Trainer", "the Hugging Face Trainer"),
        ("import deepspeed", "DeepSpeed"),
        ("from torch.distributed.fsdp import FullyShardedDataParallel", "FSDP"),
    ],
)
def test_already_distributed_scripts_are_refused_in_one_line(line, found):
    with pytest.raises(GenieError) as err:
        convert("import os\n\n" + line + "\n" + TRAIN.format(extra=""), "t.py")
    assert str(err.value).startswith(f"t.py:3 is already distributed ({found} found)")
    assert "\n" not in str(err.value)


def test_converting_twice_is_refused():
    once = converted(TRAIN, extra="")
    with pytest.raises(GenieError, match="already distributed"):
        convert(once, "t_ddp.py")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import torch\nprint(torch.zeros(1))\n", "no optimizer over a model's parameters"),
        ("def broken(:\n", "is not valid Python"),
    ],
)
def test_scripts_with_nothing_to_convert_are_refused(source, message):
    with pytest.raises(GenieError, match=message):
        convert(source, "t.py")


# ---------------------------------------------------------------- the corpus


# the tests of the converted corpus share one xdist group: one worker converts it once
CORPUS_GROUP = pytest.mark.xdist_group("convert-corpus")


@pytest.fixture(scope="module")
def corpus() -> dict:
    return {name: convert((CORPUS / f"{name}.py").read_text(), f"{name}.py") for name in SCRIPTS}


def test_the_corpus_has_the_styles_the_issue_asks_for():
    assert len(SCRIPTS) >= 12


@pytest.mark.parametrize("name", SCRIPTS)
@CORPUS_GROUP
def test_corpus_conversion_matches_its_golden_output_and_report(corpus, name):
    """Regenerate after an intended change: GENIE_UPDATE_GOLDEN=1 pytest tests/test_convert.py"""
    conversion = corpus[name]
    text = "\n".join(report(conversion, f"{name}.py", 2)) + "\n"
    expected = {GOLDEN / f"{name}_ddp.py": conversion.code, GOLDEN / f"{name}.report": text}
    if os.environ.get("GENIE_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        for path, content in expected.items():
            path.write_text(content)
    for path, content in expected.items():
        assert (
            path.read_text() == content
        ), f"{path.name} differs; see git diff after GENIE_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", SCRIPTS)
@CORPUS_GROUP
def test_every_reported_line_is_a_line_of_code_of_the_script(corpus, name):
    """The report's "line N" is where the changed statement is, not the blank or comment
    line above it that a new statement took over from the one it replaced."""
    lines = (CORPUS / f"{name}.py").read_text().splitlines()
    for change in corpus[name].changes:
        if change.line:
            code = lines[change.line - 1].strip()
            assert code and not code.startswith("#"), (change.line, change.what)


@pytest.mark.parametrize("name", SCRIPTS)
@CORPUS_GROUP
def test_corpus_conversion_is_black_clean_and_compiles(corpus, name):
    code = corpus[name].code
    assert black.format_str(code, mode=black.Mode()) == code
    compile(code, name, "exec")


@CORPUS_GROUP
def test_converted_corpus_passes_ruff(corpus, tmp_path):
    for name, conversion in corpus.items():
        (tmp_path / f"{name}_ddp.py").write_text(conversion.code)
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "E4,E7,E9,F,B", "."],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- the command


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes((CORPUS / "fn_argparse.py").read_bytes())
    return path


def test_convert_writes_the_script_and_its_launcher_and_prints_diff_and_changes(script):
    result = run_genie("convert", "train.py", "--no-check", cwd=script.parent)
    assert result.returncode == 0, result.stderr
    assert (script.parent / "train_ddp.py").read_text() == convert(script.read_text()).code
    launcher = script.parent / "launch" / "train_ddp.sh"
    assert os.access(launcher, os.X_OK)
    assert 'exec torchrun --standalone --nproc_per_node=2 train_ddp.py "$@"' in launcher.read_text()
    assert subprocess.run(["bash", "-n", str(launcher)]).returncode == 0
    out = result.stdout
    assert "--- train.py" in out and "+++ train_ddp.py" in out
    assert "  1. line 45: the GPU-or-CPU choice -> DEVICE" in out
    assert "bash launch/train_ddp.sh" in out


def omp_threads_seen_by_torchrun(launcher: Path, *args: str) -> str:
    """Run a launch script with a torchrun that only prints OMP_NUM_THREADS."""
    fake = launcher.parent.parent / "fake-bin"
    fake.mkdir(exist_ok=True)
    (fake / "torchrun").write_text('#!/bin/sh\necho "OMP_NUM_THREADS=$OMP_NUM_THREADS"\n')
    (fake / "torchrun").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PATH"] = f"{fake}:{env['PATH']}"
    done = subprocess.run(["bash", str(launcher), *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_launchers_give_each_process_one_openmp_thread(script):
    """As torchrun does for several processes (and the generated projects' scripts), set
    before torchrun starts so that it does not warn; a value the user exported wins."""
    run_genie("convert", "train.py", "--no-check", "--nodes", "2", "--master-addr", "10.0.0.1",
              cwd=script.parent)  # fmt: skip
    launch = script.parent / "launch"
    assert omp_threads_seen_by_torchrun(launch / "train_ddp.sh") == "OMP_NUM_THREADS=1"
    assert omp_threads_seen_by_torchrun(launch / "train_ddp_multi_node.sh", "1") == (
        "OMP_NUM_THREADS=1"
    )


def test_the_original_is_never_changed_nor_an_existing_file_replaced_without_force(script):
    original = script.read_bytes()
    assert run_genie("convert", "train.py", "--no-check", cwd=script.parent).returncode == 0
    again = run_genie("convert", "train.py", "--no-check", cwd=script.parent)
    assert again.returncode == 2 and "exists; pass --force" in again.stderr
    forced = run_genie("convert", "train.py", "--no-check", "--force", cwd=script.parent)
    assert forced.returncode == 0, forced.stderr
    onto = run_genie(
        "convert", "train.py", "-o", "train.py", "--force", "--no-check", cwd=script.parent
    )
    assert onto.returncode == 2 and "never overwrites it" in onto.stderr
    twice = run_genie("convert", "train_ddp.py", "--no-check", cwd=script.parent)
    assert twice.returncode == 2 and "already distributed" in twice.stderr
    assert script.read_bytes() == original


def test_several_nodes_get_a_multi_node_launcher(script):
    result = run_genie(
        "convert", "train.py", "--no-check", "--nodes", "2", "--nproc-per-node", "4",
        "--master-addr", "10.0.0.1", cwd=script.parent,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text = (script.parent / "launch" / "train_ddp_multi_node.sh").read_text()
    assert '--nnodes=2 --nproc_per_node=4 --node_rank="$NODE_RANK" --master_addr=10.0.0.1' in text
    missing = run_genie(
        "convert", "train.py", "-o", "b.py", "--no-check", "--nodes", "2", cwd=script.parent
    )
    assert missing.returncode == 2 and "needs --master-addr" in missing.stderr


# ---------------------------------------------------------------- the check, planned and judged

GOOD = {"world_size": 2, "backend": "gloo", "models": 1, "steps": 8, "ranks_trained": 2,
        "params_in_sync": True, "first_loss": 0.7, "last_loss": 0.6, "ranks_forwarded": 2,
        "ranks_allreduced": 2, "inputs_differ": True, "inputs_shared": 0.0,
        "indexed_steps": 8, "indices_shared": 0.0}  # fmt: skip


@pytest.mark.parametrize(
    ("returncode", "reports", "problem"),
    [
        (0, [GOOD], None),
        (1, [GOOD], "torchrun exited with 1"),
        (0, [], "the probe reported 0 times"),
        (0, [GOOD, GOOD], "the probe reported 2 times"),
        (0, [{**GOOD, "params_in_sync": False}], "parameters differ across processes"),
        (0, [{**GOOD, "ranks_trained": 1}], "only 1 of 2 processes ran backward()"),
        (0, [{**GOOD, "models": 0}], "no DistributedDataParallel model was built"),
        (0, [{**GOOD, "world_size": 1}], "world size 1, launched 2"),
        (0, [{"unparsable": "x"}], "probe report lacks world_size"),
        (0, [{**GOOD, "ranks_forwarded": 0}], "only 0 of 2 processes trained through a DDP"),
        (0, [{**GOOD, "ranks_allreduced": 1}], "only 1 of 2 processes all-reduced gradients"),
        (0, [{**GOOD, "inputs_differ": False}], "trained on the same first batch"),
        (0, [{**GOOD, "inputs_shared": 0.8}], "at 80% of the steps processes trained on"),
        (0, [{**GOOD, "inputs_shared": 0.1}], None),  # a padded last batch or two
        (0, [{**GOOD, "indices_shared": 1.0}], "at 100% of the steps processes read the same"),
        (0, [{**GOOD, "indices_shared": 0.1}], None),
        (0, [{**GOOD, "indexed_steps": 0, "indices_shared": 0.0}], None),  # no DataLoader
    ],
)
def test_the_check_passes_only_on_exit_0_and_one_report_of_in_sync_trained_ranks(
    cpu_machine, returncode, reports, problem
):
    from genie.convert import check

    problems = check.judge(check.plan(CORPUS / "x.py", [], cpu_machine), returncode, reports)
    assert (problems == []) if problem is None else any(problem in p for p in problems)


def test_the_probe_counts_the_batches_more_than_one_rank_trained_on():
    from genie.convert import probe

    assert probe._shared([[["a", "b"]], [["c", "d"]]]) == 0.0
    assert probe._shared([[["a", "b"]], [["a", "b"]]]) == 1.0
    assert probe._shared([[["a", "b", "c"]], [["a", "d", "e"]]]) == 1 / 3
    # the same batch at different steps: a shuffled sampler over epochs of batch 1
    assert probe._shared([[["a", "b"]], [["b", "a"]]]) == 0.0
    assert probe._shared([[["a"], ["x"]], [["b"], ["x"]]]) == 0.5  # two models
    assert probe._shared([[[]], [[]]]) == 0.0


@pytest.mark.parametrize("workers", [0, 1])
def test_the_probe_keeps_the_indices_of_the_batches_a_process_trained_on(monkeypatch, workers):
    """From the DataLoader's own indices, prefetched by workers or not: the batches followed
    by backward(), not the evaluation loader's, nor an IterableDataset's."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset, TensorDataset, dataloader

    from genie.convert import indices

    base = dataloader._BaseDataLoaderIter
    for name in ("_next_index", "_reset", "__next__"):
        monkeypatch.setattr(base, name, getattr(base, name))  # restored after the test
    steps = [0]
    loaders = indices.Loaders(lambda: steps[0], 4096)
    loaders.install()

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(torch.arange(6.0))

    data = TensorDataset(torch.arange(10.0))
    train = DataLoader(data, batch_size=2, num_workers=workers)
    for _epoch in range(2):
        for _batch in train:
            steps[0] += 1  # a backward() on this batch
        for _batch in DataLoader(data, batch_size=5):  # evaluation: no backward()
            pass
        for _batch in DataLoader(Stream(), batch_size=3):
            steps[0] += 1
    digest = [hashlib.sha256(repr(list(range(i, i + 2))).encode()).hexdigest()
              for i in range(0, 10, 2)]  # fmt: skip
    assert loaders.training() == [digest + digest]


def test_the_check_uses_two_cpu_processes_unless_there_are_two_gpus(cpu_machine, gpu_machine):
    import dataclasses

    from genie.convert import check

    cpu = check.plan(CORPUS / "x.py", ["--epochs", "1"], cpu_machine)
    assert (cpu.nproc, cpu.backend, cpu.env["CUDA_VISIBLE_DEVICES"]) == (2, "gloo", "")
    assert cpu.argv[-4:] == ("genie.convert.probe", str(CORPUS / "x.py"), "--epochs", "1")
    gpus = check.plan(CORPUS / "x.py", [], gpu_machine)
    assert (gpus.nproc, gpus.backend) == (8, "nccl") and "CUDA_VISIBLE_DEVICES" not in gpus.env
    one = check.plan(CORPUS / "x.py", [], dataclasses.replace(gpu_machine, gpus=1))
    assert (one.nproc, one.backend) == (2, "gloo")


def test_a_failed_write_is_a_one_line_error_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    from genie.convert import files

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full_disk)
    with pytest.raises(GenieError, match="cannot write .*t.py: No space left on device"):
        files.write({tmp_path / "t.py": "x = 1\n"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("call", "made"),
    [
        ('os.makedirs("out")', 'os.makedirs("out", exist_ok=True)'),
        ('os.mkdir("out")', 'os.makedirs("out", exist_ok=True)'),
        ("Path(out).mkdir(parents=True)", "Path(out).mkdir(parents=True, exist_ok=True)"),
        ('os.makedirs("out", exist_ok=False)', 'os.makedirs("out", exist_ok=False)'),
    ],
)
def test_every_process_makes_its_folders_without_failing_on_another_s(call, made):
    """Both ranks run ``if not os.path.exists(d): os.makedirs(d)``: one of them used to fail."""
    out = converted(TRAIN.replace("def main():\n", f"def main():\n    {call}\n"), extra="")
    assert f"    {made}\n" in out


def test_set_epoch_is_only_for_loaders_not_for_what_is_counted_from_them():
    """PyTorch-GAN's shape: ``batches_done`` (from ``len(dataloader)``) handed to a function
    by keyword is no loader: no ``batches_done.sampler.set_epoch`` (a NameError once)."""
    loop = ("        batches_done = epoch * len(loader)\n"
            "        sample_image(n_row=10, batches_done=batches_done)\n")  # fmt: skip
    source = TRAIN.replace("        print(epoch)\n", loop).replace(
        "def main():", "def sample_image(n_row, batches_done):\n    pass\n\n\ndef main():"
    )
    out = converted(source, extra="")
    assert "batches_done.sampler" not in out and out.count(".set_epoch(") == 1


UNUSED = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4)])
        self.head = nn.Linear(4, 1)
        self.loss = nn.MSELoss()
        {extra}

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.project(self.body(x))

    def project(self, x):
        return self.head(x)

    def classify(self, x):
        return self.aux(x)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(8, 2, 4):
    model(x).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize(
    ("extra", "flagged"),
    [
        ("self.aux = nn.Linear(4, 3)  # only classify() uses it", "Net's self.aux"),
        ("self.aux = nn.Dropout(0.1)  # no parameters", None),
        ("self.aux = None", None),
    ],
)
def test_find_unused_parameters_only_for_a_model_whose_submodule_forward_never_uses(extra, flagged):
    """Reached through forward() and the methods it calls (project), looped over (blocks):
    used; a head only classify() uses: DDP would wait for its gradients at the next step."""
    conversion = convert(UNUSED.format(extra=extra))
    said = [c.what for c in conversion.changes if "find_unused_parameters" in c.what]
    if flagged is None:
        assert said == [] and "find_unused_parameters" not in conversion.code
    else:
        assert said == [f"find_unused_parameters=True: {flagged} take(s) no part in forward()"]
        assert "find_unused_parameters=True" in conversion.code


@pytest.mark.parametrize(
    "reach", ["for block in self.children():", 'for block in [getattr(self, "blocks")]:']
)
def test_a_forward_that_reaches_its_submodules_by_name_is_not_judged(reach):
    source = UNUSED.format(extra="self.aux = nn.Linear(4, 3)").replace(
        "for block in self.blocks:", reach
    )
    assert "find_unused_parameters" not in convert(source).code

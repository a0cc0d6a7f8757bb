"""Modules of a generated project, imported and exercised in-process (no torchrun)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

import pytest

from genie.generate import engine, write
from genie.spec import build_spec

PROJECT_MODULES = ("data", "model", "evaluation", "config", "dist_utils", "optim", "hang")


@pytest.fixture
def project(tmp_path, cpu_machine, monkeypatch, request):
    """Write a project for ``request.param`` (answers) and make its modules importable."""
    spec = build_spec({"name": "p", **request.param}, cpu_machine)
    write.write_project(tmp_path / "p", engine.render(spec))
    monkeypatch.syspath_prepend(str(tmp_path / "p"))
    for name in PROJECT_MODULES:
        sys.modules.pop(name, None)
    yield tmp_path / "p"
    for name in PROJECT_MODULES:
        sys.modules.pop(name, None)


def image_folder(root: Path) -> Path:
    from PIL import Image

    generator = __import__("random").Random(0)
    for label in ("cats", "dogs"):
        (root / label).mkdir(parents=True)
        for i in range(5):
            pixels = bytes(generator.randrange(256) for _ in range(48 * 48 * 3))
            Image.frombytes("RGB", (48, 48), pixels).save(root / label / f"{i}.png")
    return root


@pytest.mark.parametrize("project", [{"task": "cv"}], indirect=True)
def test_cv_validation_reads_images_without_the_training_augmentation(project, tmp_path):
    import torch

    evaluation = importlib.import_module("evaluation")
    args = argparse.Namespace(
        smoke=False, data_dir=image_folder(tmp_path / "images"), download_dir=tmp_path,
        image_size=32, val_fraction=0.2, seed=0,
    )  # fmt: skip
    train_set, val_set = evaluation.split_dataset(args)
    assert (len(train_set), len(val_set)) == (8, 2) and val_set.num_classes == 2
    # the same validation image twice: identical (resize + centre crop, nothing random)
    torch.manual_seed(1)
    first = val_set[0]["pixel_values"]
    torch.manual_seed(2)
    assert torch.equal(first, val_set[0]["pixel_values"])
    # the same training image twice under other seeds: the random crop and flip differ
    torch.manual_seed(1)
    crop = train_set[0]["pixel_values"]
    torch.manual_seed(2)
    assert not torch.equal(crop, train_set[0]["pixel_values"])
    # and the two parts of the split never share a sample
    assert not set(train_set.indices) & set(val_set.indices)


@pytest.mark.parametrize("project", [{}], indirect=True)
def test_smoke_runs_never_write_where_real_training_keeps_its_checkpoints(project):
    config = importlib.import_module("config")
    real = config.parse_args([])
    smoke = config.parse_args(["--smoke"])
    chosen = config.parse_args(["--smoke", "--checkpoint-dir", "mine", "--log-dir", "logs"])
    assert (real.checkpoint_dir, real.log_dir) == (Path("checkpoints"), Path("runs"))
    assert (smoke.checkpoint_dir, smoke.log_dir) == (Path("checkpoints/smoke"), Path("runs/smoke"))
    assert (chosen.checkpoint_dir, chosen.log_dir) == (Path("mine"), Path("logs"))
    assert real.dist_timeout == 10.0  # minutes, documented in --help


@pytest.mark.parametrize(
    "project", [{"task": "custom"}, {"task": "cv", "grad_accum": 4}], indirect=True
)
@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_smoke_data_gives_every_rank_8_optimizer_steps_an_epoch_at_any_world_size(
    project, monkeypatch, world_size
):
    """The learning check needs the steps: a fixed smoke set gave 8 ranks 2 steps an epoch."""
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    config = importlib.import_module("config")
    evaluation = importlib.import_module("evaluation")
    args = config.parse_args(["--smoke"])
    train_set, val_set = evaluation.split_dataset(args)
    per_rank = -(-len(train_set) // world_size)  # DistributedSampler pads to equal shares
    assert per_rank // (args.batch_size * args.grad_accum) == config.SMOKE_STEPS == 8
    assert len(val_set) >= 1


@pytest.mark.parametrize("project", [{"task": "cv"}, {"task": "nlp"}], indirect=True)
def test_the_optimizer_decays_weights_but_not_biases_or_normalization(project):
    config = importlib.import_module("config")
    model = importlib.import_module("model")
    optim = importlib.import_module("optim")
    args = config.parse_args(["--smoke", "--weight-decay", "0.1"])
    net = model.build_model(args, 10)
    decayed, exempt = optim.build_optimizer(net, args).param_groups
    assert (decayed["weight_decay"], exempt["weight_decay"]) == (0.1, 0.0)
    # in these models the 1-D parameters are exactly the biases and the norms' scales
    assert all(p.ndim > 1 for p in decayed["params"])  # conv, linear, embedding weights
    assert all(p.ndim == 1 for p in exempt["params"]) and exempt["params"]
    assert len(decayed["params"]) + len(exempt["params"]) == len(list(net.parameters()))


@pytest.mark.parametrize("project", [{}], indirect=True)
def test_a_resumed_epoch_skips_the_samples_it_trained_without_reading_them(project):
    import torch
    from torch.utils.data import DataLoader, Dataset

    sys.modules.pop("checkpoint", None)
    checkpoint = importlib.import_module("checkpoint")

    class Counted(Dataset):
        def __init__(self) -> None:
            self.read: list[int] = []

        def __len__(self) -> int:
            return 40

        def __getitem__(self, index: int) -> torch.Tensor:
            self.read.append(index)
            return torch.tensor(index)

    def epoch(skip: int, rank: int = 1) -> tuple[list[int], list[int], int]:
        data = Counted()
        sampler = checkpoint.ResumableSampler(data, num_replicas=2, rank=rank, seed=3)
        sampler.set_epoch(5, skip=skip)
        loader = DataLoader(data, batch_size=4, sampler=sampler, drop_last=True)
        return [int(i) for batch in loader for i in batch], data.read, len(loader)

    whole, _, batches = epoch(0)
    assert batches == 5 and len(set(whole)) == 20  # this rank's half of the epoch
    rest, read, left = epoch(skip=12)  # 3 batches were trained before the checkpoint
    assert rest == whole[12:] and read == whole[12:] and left == 2
    assert epoch(0, rank=0)[0] != whole  # the other rank's half
    sampler = checkpoint.ResumableSampler(Counted(), num_replicas=2, rank=1, seed=3)
    sampler.set_epoch(5, skip=12)
    sampler.set_epoch(6)  # the next epoch starts at its beginning
    assert len(sampler) == 20


@pytest.mark.parametrize("project", [{}], indirect=True)
@pytest.mark.parametrize("change", [None, "continue", "restart"])
def test_a_changed_schedule_length_is_refused_or_followed_as_asked(project, change):
    import torch

    optim = importlib.import_module("optim")

    def schedule(total: int):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return optim.lr_schedule(optimizer, total, warmup_ratio=0.1)

    written = schedule(100)
    for _ in range(60):
        written.optimizer.step()
        written.step()
    state = written.state_dict()
    same = schedule(100)
    optim.resume_schedule(same, state, 60, None)  # the same length: followed exactly
    assert same.get_last_lr() == written.get_last_lr()
    longer = schedule(200)
    if change is None:
        with pytest.raises(SystemExit, match="ends at step 200, the checkpoint's at 100"):
            optim.resume_schedule(longer, state, 60, change)
        return
    optim.resume_schedule(longer, state, 60, change)
    lr = longer.optimizer.param_groups[0]["lr"]
    fresh = optim.WarmupCosine(200, 0.1)
    if change == "continue":  # where a 200-step schedule stands at step 60
        assert lr == pytest.approx(fresh(60))
    else:  # a new warmup from step 60 over the 140 steps left: its first step
        assert lr == pytest.approx(1 / round(140 * 0.1))
    longer.optimizer.step()
    longer.step()
    assert longer.get_last_lr()[0] == pytest.approx(
        fresh(61) if change == "continue" else 2 / round(140 * 0.1)
    )
    # the changed schedule is what the next checkpoint carries
    again = schedule(200)
    optim.resume_schedule(again, longer.state_dict(), 61, None)
    assert again.get_last_lr() == longer.get_last_lr()


@pytest.mark.parametrize("project", [{"task": "cv"}], indirect=True)
@pytest.mark.parametrize(
    ("cpus", "env", "workers"),
    [
        (32, {"LOCAL_WORLD_SIZE": "8"}, 3),  # torchrun: 8 processes share the node's 32
        (64, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "32"}, 3),  # SLURM allots 32
        (8, {"SLURM_CPUS_PER_TASK": "4"}, 3),  # a process srun started alone: its task's 4
        (2, {"LOCAL_WORLD_SIZE": "2"}, 0),  # a laptop: the processes load their own data
        (256, {"LOCAL_WORLD_SIZE": "2"}, 8),  # at most MAX_WORKERS
    ],
)
def test_data_workers_follow_the_cpus_each_process_has(project, monkeypatch, cpus, env, workers):
    for name in ("LOCAL_WORLD_SIZE", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    config = importlib.import_module("config")
    assert config.parse_args([]).num_workers == workers
    assert config.parse_args(["--num-workers", "5"]).num_workers == 5
    assert config.parse_args(["--smoke"]).num_workers == 0  # synthetic data in memory


@pytest.mark.parametrize("project", [{"task": "cv"}], indirect=True)
def test_cifar_sized_images_keep_their_resolution_through_the_stem(project, tmp_path):
    import torch

    config = importlib.import_module("config")
    model = importlib.import_module("model")
    data = importlib.import_module("data")
    cifar = config.parse_args([])  # CIFAR-10, trained at its own 32 px
    folder = config.parse_args(["--data-dir", str(tmp_path)])  # an ImageFolder: 224 px
    assert (data.image_size(cifar), data.image_size(folder)) == (32, 224)
    assert "RandomCrop(size=(32, 32), padding=4)" in repr(data.train_transform(32))
    assert "RandomResizedCrop" in repr(data.train_transform(224))
    small, large = model.build_model(cifar, 10).backbone, model.build_model(folder, 10).backbone
    assert (small.conv1.kernel_size, small.conv1.stride) == ((3, 3), (1, 1))
    assert isinstance(small.maxpool, torch.nn.Identity)
    assert (large.conv1.kernel_size, large.conv1.stride) == ((7, 7), (2, 2))
    # the first residual stage sees 32x32 of a 32x32 image (the ImageNet stem: 8x8)
    seen = []
    small.layer1.register_forward_hook(lambda module, inputs, output: seen.append(output.shape))
    small(torch.zeros(1, 3, 32, 32))
    assert seen[0][-2:] == (32, 32)


@pytest.mark.parametrize("project", [{"task": "nlp"}], indirect=True)
def test_texts_are_tokenized_once_and_batches_padded_to_their_longest(project, monkeypatch):
    monkeypatch.chdir(project)  # --smoke keeps them under checkpoints/smoke
    config = importlib.import_module("config")
    data = importlib.import_module("data")
    evaluation = importlib.import_module("evaluation")
    args = config.parse_args(["--smoke"])
    calls = []
    tokenizer = data.load_tokenizer
    monkeypatch.setattr(data, "load_tokenizer", lambda a: calls.append(1) or tokenizer(a))
    data.prepare(args)
    data.prepare(args)  # a second start, a second rank: the saved result is kept
    assert len(calls) == 1
    assert list(data.tokenized_dir(args).parent.iterdir()) == [data.tokenized_dir(args)]
    train_set, val_set = evaluation.split_dataset(args)
    items = [train_set[i] for i in range(len(train_set))]
    lengths = {len(item["input_ids"]) for item in items}
    assert len(lengths) > 1 and max(lengths) < data.SMOKE_MAX_LENGTH  # not padded
    batch = train_set.collate_fn(items[:4])
    longest = max(len(item["input_ids"]) for item in items[:4])
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (4, longest)
    assert batch["attention_mask"].sum() == sum(len(item["input_ids"]) for item in items[:4])
    assert val_set.collate_fn == train_set.collate_fn


@pytest.mark.parametrize(
    ("project", "channels_last"),
    [({"task": "cv"}, True), ({"task": "cv", "strategy": "fsdp"}, False)],
    indirect=["project"],
)
def test_on_a_gpu_the_cv_model_is_channels_last_and_cudnn_benchmarks(
    project, monkeypatch, channels_last
):
    """What build_model does where CUDA is there (the layout change itself runs on CPU)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    config = importlib.import_module("config")
    model = importlib.import_module("model")
    net = model.build_model(config.parse_args(["--smoke"]), 10)
    assert torch.backends.cudnn.benchmark is True
    weight = net.backbone.conv1.weight
    assert weight.is_contiguous(memory_format=torch.channels_last) is channels_last


@pytest.mark.parametrize("project", [{}], indirect=True)
def test_the_stop_vote_is_read_a_step_later_and_spaced_by_the_pace(project, tmp_path):
    """dist_utils.StopVote in a one-rank gloo group: with GENIE_STOP_VOTE_SECONDS=0 it
    votes after every step and a flag raised at step 5 stops at step 6; by default, over
    calls far faster than half a second apart, it votes at most every 100 steps (each
    vote one all-reduce, counted), and a flag raised at step 150 stops at the step after
    the next vote."""
    import torch.distributed as dist

    dist_utils = importlib.import_module("dist_utils")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    votes = []
    reduce = dist.all_reduce

    def counted(*args, **kwargs):
        votes.append(1)
        return reduce(*args, **kwargs)

    try:
        dist.all_reduce = counted  # StopVote calls it as dist.all_reduce
        dist_utils.STOP_VOTE_SECONDS = 0.0
        vote = dist_utils.StopVote()
        assert [vote(step >= 5) for step in range(1, 7)] == [False] * 5 + [True]
        assert len(votes) == 5  # steps 1 to 5; step 6 reads the last one
        dist_utils.STOP_VOTE_SECONDS = 0.5
        votes.clear()
        vote = dist_utils.StopVote()
        stopped = next(step for step in range(1, 1000) if vote(step >= 150))
        assert 150 < stopped <= 202 and len(votes) <= 4, (stopped, len(votes))
    finally:
        dist.all_reduce = reduce
        dist.destroy_process_group()


GLOO_LOST = (  # what gloo raised on node 0 when node 1 was killed (the hosts e2e)
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.77.0.2]:40412: "
    "Connection reset by peer"
)


@pytest.mark.parametrize(
    ("project", "env", "error", "said", "flagged"),
    [
        ({"nodes": 2, "master_addr": "10.77.0.1"}, {}, GLOO_LOST, True, True),
        # no restart left: the run ends, nothing to wait for
        ({"nodes": 2, "master_addr": "10.77.0.1"}, {"TORCHELASTIC_RESTART_COUNT": "3"},
         GLOO_LOST, False, False),
        # only the node's first process says it
        ({"nodes": 2, "master_addr": "10.77.0.1"}, {"LOCAL_RANK": "1"}, GLOO_LOST, False,
         False),
        # an error of its own (or NCCL's, which names no peer): no one to name, but torchrun
        # waits for the nodes all the same
        ({"nodes": 2, "master_addr": "10.77.0.1"}, {}, "CUDA out of memory", False, True),
        # one node (launch/single_node.sh sets no rejoin wait): no node to wait for
        ({}, {"GENIE_REJOIN_WAIT": None}, GLOO_LOST, False, False),
    ],
    indirect=["project"],
)  # fmt: skip
def test_a_rank_that_lost_its_peer_says_torchrun_waits_for_the_node_to_rejoin(
    project, monkeypatch, capsys, env, error, said, flagged, tmp_path
):
    flag = tmp_path / "rejoin-flag"  # launch/multi_node.sh's watcher reads the restart there
    values = {"GENIE_REJOIN_WAIT": "600", "TORCHELASTIC_RESTART_COUNT": "0",
              "TORCHELASTIC_MAX_RESTARTS": "3", "LOCAL_RANK": "0",
              "GENIE_REJOIN_FLAG": str(flag), **env}  # fmt: skip
    for key, value in values.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    hang = importlib.import_module("hang")
    hang.failed(RuntimeError(error))  # recording is off: the line alone
    lines = capsys.readouterr().err.splitlines()
    expected = (
        "launch: lost the process at 10.77.0.2 (its node died, or it was killed); torchrun "
        "restarts this node's processes (restart 1 of 3) and waits up to 600 s for every node "
        "to rejoin: start that node again with the same command"
    )
    assert lines == ([expected] if said else [])
    assert (flag.read_text() if flag.exists() else None) == ("restart 1 of 3" if flagged else None)
    # the launch script sets the wait it gives torchrun
    script = project / "launch" / "multi_node.sh"
    if said:
        assert 'export GENIE_REJOIN_WAIT="${RDZV_TIMEOUT:-600}"' in script.read_text()


@pytest.mark.parametrize("project", [{"nodes": 2, "master_addr": "10.77.0.1"}], indirect=True)
def test_the_project_and_genie_explain_read_a_lost_peer_alike(project):
    """hang.py cannot import genie, so it keeps its own copy of the lost-peer pattern of
    genie's known failures (peer_lost): both find the same address in each gloo wording, and
    neither in a line without one."""
    import re

    from genie.smoke.known_failures import SIGNATURES

    [explain] = [re.compile(s.pattern) for s in SIGNATURES if s.id == "peer_lost"]
    hang = importlib.import_module("hang")
    lines = {
        GLOO_LOST: "10.77.0.2",
        "[pair.cc:598] Connection closed by peer [10.0.0.7]:51234": "10.0.0.7",
        "[pair.cc:534] Connection reset by peer [node-3.cluster]:29500": "node-3.cluster",
        "[pair.cc:534] Read error [fe80::1]:1234: Connection reset by peer": "fe80::1",
        "DistNetworkError: Connection reset by peer": None,
        "CUDA out of memory": None,
    }
    for line, peer in lines.items():
        found = [pattern.search(line) for pattern in (hang.LOST, explain)]
        assert [m and m.group(1) for m in found] == [peer, peer], line


@pytest.mark.parametrize("project", [{}], indirect=True)
def test_only_forked_dataloader_workers_are_asked_for_their_stacks(project, tmp_path, monkeypatch):
    """A worker forked after hang.start() has faulthandler's handler and writes its stacks;
    one started another way (spawn) lacks it, and the signal would end it: it is left
    alone."""
    import faulthandler
    import multiprocessing
    import time

    hang = importlib.import_module("hang")
    monkeypatch.setattr(hang.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(hang._state, "folder", tmp_path)
    hidden = tmp_path / f".workers-{hang.HOST}-rank0.txt"
    monkeypatch.setattr(
        hang._state, "workers", os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    )
    faulthandler.register(hang.WORKER_SIGNAL, file=hang._state.workers, all_threads=True)
    try:
        forked = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
        spawned = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
        forked.start()
        spawned.start()
        deadline = time.monotonic() + 30  # a spawned child sets its handlers as it starts
        while not hang._catches(forked.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        hang._write_workers("told")
        text = (tmp_path / f"workers-{hang.HOST}-rank0.txt").read_text()
        assert f"worker pid {forked.pid}\n" in text and "Current thread" in text
        assert f"worker pid {spawned.pid}" not in text
        assert spawned.is_alive() and forked.is_alive()
    finally:
        faulthandler.unregister(hang.WORKER_SIGNAL)
        for child in multiprocessing.active_children():
            child.kill()
            child.join()


@pytest.mark.parametrize("recorder", [True, False], ids=["flight-recorder", "none"])
@pytest.mark.parametrize("project", [{}], indirect=True)
def test_a_torch_without_a_flight_recorder_is_said_once(
    project, tmp_path, monkeypatch, capsys, recorder
):
    """Older torch versions have no Flight Recorder for gloo: rank 0 says, as the group
    starts, that the records hold stacks and heartbeats only; a torch with one says
    nothing."""
    import faulthandler

    import torch
    import torch.distributed as dist

    if not recorder:
        monkeypatch.delattr(torch._C._distributed_c10d, "_dump_fr_trace")
    hang = importlib.import_module("hang")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        hang.record(tmp_path / "hang")
        hang.start()
        hang.stop()
    finally:
        dist.destroy_process_group()
        faulthandler.unregister(hang.WORKER_SIGNAL)
        if hang._state.workers is not None:
            os.close(hang._state.workers)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hang:")]
    expected = (
        f"hang: torch {torch.__version__} keeps no Flight Recorder for gloo: hang/ will hold "
        "stacks and heartbeats only"
    )
    assert said == ([] if recorder else [expected])


@pytest.mark.parametrize("project", [{}], indirect=True)
def test_the_nodes_sharing_a_hang_folder_set_the_last_attempts_records_aside_together(
    project, tmp_path, monkeypatch
):
    """Two nodes' first processes set aside the records of the attempt before at once (a
    shared folder, as the elastic e2e run's): a record the other moved first is left to it
    (it crashed a restarted worker in CI), and previous/ filled by the other for this attempt
    is kept, while an older attempt's previous/ goes."""
    import os
    import time

    hang = importlib.import_module("hang")
    folder, now = tmp_path / "hang", time.time()
    (folder / "previous").mkdir(parents=True)
    records = [folder / f"fr-node{n}-rank{n}" for n in (0, 1)]
    for path in (*records, folder / "previous" / "fr-gone-rank7"):
        path.write_text(path.name)
        os.utime(path, (now - 100, now - 100))
    os.utime(folder / "previous", (now - 90, now - 90))
    hang._state.since = now - 50
    listed = {}  # what each node's process listed: node 1 before node 0 moved rank 0's
    monkeypatch.setattr(type(folder), "glob", lambda self, pattern: iter(listed["now"]))
    for seen in ([records[0]], records):
        listed["now"] = seen
        hang._set_aside(folder)
    assert sorted(p.name for p in (folder / "previous").iterdir()) == [r.name for r in records]
    assert not any(path.exists() for path in records)

"""Trace one training step of a genie project on fake tensors and report a rank's peak
memory by category. Run by ``genie plan`` with the project's Python, in the project's
folder (its modules import as they do for train.py): it imports nothing from genie.

    python trace.py REQUEST.json

REQUEST: {"argv": train.py's arguments, "variants": [{"strategy": "ddp"|"fsdp"|"hsdp",
"world": ranks, "shard": ranks per shard group, "precision": "fp32"|"bf16"|"fp16",
"checkpointing": bool, "batch": micro-batch}, ...]}. Prints a JSON line with the torch
version, then one per variant: bytes per category at the step's peak, or {"error": ...}.
A torch without the memory trackers (before 2.5) counts the model's states instead
(activations: null).

Nothing is allocated: the model is built of fake tensors (shapes and dtypes, no storage)
on the CPU, sharded over a fake process group of the variant's world size, given its
AdamW state, then put through forward, backward and the optimizer step once, tracked.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn

if TYPE_CHECKING:  # (both exist from torch 2.5; the trackers are imported where they are)
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import DeviceMesh

CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries")
# The trackers' categories (mem_tracker's _MemRefType, its FSDP variant's _FSDPRefType):
# "parameters" are what a rank keeps (its shards under FSDP), "gradients" what it keeps of
# them; the whole copies FSDP gathers for a unit's forward and backward and the
# collectives' buffers are temporaries.
BY_CATEGORY = {
    "Parameter": "parameters", "Buffer": "parameters", "Sharded Param": "parameters",
    "Gradient": "gradients", "Sharded Grad": "gradients",
    "Optstate": "optimizer", "OptState": "optimizer",
    "Activation": "activations", "Inputs": "activations",
    "Unsharded Param": "temporaries", "Unsharded Grad": "temporaries",
    "All Gather": "temporaries", "Reduce Scatter": "temporaries", "Temp": "temporaries",
}  # fmt: skip


def main() -> None:
    request = json.loads(open(sys.argv[1]).read())
    sys.path.insert(0, os.getcwd())
    warnings.filterwarnings("ignore")
    import config

    args = config.parse_args(request["argv"])
    traced = can_trace()
    unpadded_as_in_a_real_run()
    say = int(os.environ.get("RANK", "0")) == 0  # under torchrun (real tensors): rank 0
    if say:
        print(json.dumps({"torch": torch.__version__, "traced": traced}), flush=True)
    for variant in request["variants"]:
        try:
            result = trace(args, variant) if traced else count(args, variant)
        except Exception as error:  # reported per variant: the others still count
            result = {"error": f"{type(error).__name__}: {error}".splitlines()[0]}
        if say:
            print(json.dumps(result), flush=True)


def can_trace() -> bool:
    """Whether this torch has the memory trackers (2.5 and later)."""
    try:
        import torch.distributed._tools.fsdp2_mem_tracker  # noqa: F401
    except ImportError:
        return False
    return True


def count(args: argparse.Namespace, variant: dict) -> dict:
    """Without the trackers: the model's states counted from its parameters (fp32
    weights, gradients and two AdamW moments, split across the shard group), activations
    and temporaries unknown (None)."""
    import data
    import model as task

    never_pretrained(task, args)
    with torch.device("meta"):
        net = task.build_model(args, data.example_batch(args, 1)[1])
    count = sum(p.numel() for p in net.parameters())
    share = count * 4 // variant["shard"]
    buffers = sum(b.numel() * b.element_size() for b in net.buffers())
    figures = {"parameters": share + buffers, "gradients": share, "optimizer": 2 * share,
               "activations": None, "temporaries": None, "traced": False,
               "parameter_count": count}  # fmt: skip
    return figures


def trace(args: argparse.Namespace, variant: dict) -> dict:
    import data
    import model as task

    args.batch_size = variant["batch"]
    args.precision = variant["precision"]
    sharded = variant["strategy"] != "ddp"
    mesh = process_group(variant) if sharded else None
    try:
        return step(task, data, args, variant, mesh)
    finally:
        if mesh is not None and not variant.get("real"):
            dist.destroy_process_group()


def step(task: ModuleType, data: ModuleType, args: argparse.Namespace, variant: dict,
         mesh: DeviceMesh | None) -> dict:  # fmt: skip
    from torch._subclasses.fake_tensor import FakeTensorMode

    sharded = mesh is not None
    # "real": the same step on real tensors, under torchrun (bench/plan_accuracy.py)
    fake = contextlib.nullcontext() if variant.get("real") else FakeTensorMode()
    with fake:
        batch, outputs = data.example_batch(args, args.batch_size)
        net = build(task, args, outputs, variant, mesh)
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)  # as on GPUs
        for p in net.parameters():  # a step on zero gradients makes the Adam state
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tracker = memory_tracker(net, optimizer, sharded)
        with tracker:
            one_step(task, net, optimizer, batch, args.precision)
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    figures = dict.fromkeys(CATEGORIES, 0)
    for name, size in peak.items():
        if name != "Total":  # a category this table lacks counts as a temporary
            figures[BY_CATEGORY.get(name, "temporaries")] += size
    if not sharded:  # DDP's buckets hold every gradient, from its start to the end (with
        # gradient_as_bucket_view the gradients traced were views into them)
        figures["gradients"] = sum(p.numel() * p.element_size() for p in net.parameters())
    figures["traced"] = True
    figures["parameter_count"] = sum(p.numel() for p in net.parameters())  # whole sizes
    figures["parameter_tensors"] = len(list(net.parameters()))
    figures["buffer_bytes"] = sum(b.numel() * b.element_size() for b in net.buffers())
    return figures


def process_group(variant: dict) -> DeviceMesh:
    """A fake process group of the variant's world size (this process plays rank 0, the
    others exist only as numbers) and the mesh FSDP shards over: one dimension (fsdp), or
    replicas x shard group (hsdp). Made outside the fake mode: the mesh is real."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    world, shard = variant["world"], variant["shard"]
    if variant.get("real"):
        if not dist.is_initialized():
            dist.init_process_group("gloo")
    else:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    if variant["strategy"] == "hsdp":
        names = ("replicate", "shard")
        return init_device_mesh("cpu", (world // shard, shard), mesh_dim_names=names)
    return init_device_mesh("cpu", (world,))


def build(
    task: ModuleType, args: argparse.Namespace, outputs: int, variant: dict, mesh: DeviceMesh | None
) -> nn.Module:
    """The project's model as train.py builds it, on fake tensors: pretrained weights are
    never read (their shapes come from the config), activation checkpointing on the
    model's blocks, and FSDP2 units (then the rest) with bf16 compute and fp32 reduction
    under --precision bf16."""
    never_pretrained(task, args)
    net = task.build_model(args, outputs)  # fake tensors: initialising them costs nothing
    blocks = task.blocks(net)
    if variant["checkpointing"]:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            apply_activation_checkpointing,
        )

        chosen = set(blocks)
        apply_activation_checkpointing(net, check_fn=lambda m: m in chosen)
    if mesh is not None:
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:  # torch 2.5: not public yet
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

        dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for unit in units(net, blocks):
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        net = fully_shard(net, mesh=mesh, mp_policy=policy)
    return net


def units(net: nn.Module, blocks: list[nn.Module]) -> list[nn.Module]:
    """FSDP's units as the project's own fsdp.py chooses them (embedding tables, blocks,
    output head), or the blocks where it has none (Lightning and HF Trainer projects)."""
    try:
        import fsdp
    except ImportError:
        return blocks
    own = getattr(fsdp, "units", None)  # FSDP1 projects (torch before 2.6) have none
    return own(net) if own is not None else blocks


def never_pretrained(task: ModuleType, args: argparse.Namespace) -> None:
    """Build from the config only: weights are never read."""
    args.from_scratch = True  # the llm task
    args.pretrained = False  # cv
    setattr(task, "pretrained", lambda args: False)  # nlp, llm  # noqa: B010


def memory_tracker(net: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> MemTracker:
    if sharded:
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        return global_peak_only(FSDPMemTracker(net, optimizer))
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(net, optimizer)
    return global_peak_only(tracker)


def global_peak_only(tracker: MemTracker) -> MemTracker:
    """The tracker, updating at each operator only the peak genie reads, not also every
    module's (operators x modules: 25 of a 7B step's 31 s); as it is where it differs."""
    from copy import deepcopy

    total = getattr(sys.modules[type(tracker).__module__], "_TOTAL_KEY", None)
    if total is None or not hasattr(tracker, "_peak_mem_snap"):  # its internals since 2.5
        return tracker

    def update(peak_state: object) -> None:
        for device, snapshot in tracker._curr_mem_snap.items():
            if tracker._peak_mem.get(device, 0) < snapshot[total]:
                tracker._peak_mem[device] = snapshot[total]
                tracker._peak_mem_snap[device] = deepcopy(snapshot)

    tracker._update_peak_stats = update  # type: ignore[method-assign]
    return tracker


# transformers' decisions that read a tensor's values (see unpadded_as_in_a_real_run)
FIXED_DECISIONS = ("find_packed_sequence_indices", "_ignore_causal_mask_sdpa")


def unpadded_as_in_a_real_run() -> None:
    """transformers counts a fake tensor as a graph being traced, and then builds the
    causal mask a real step leaves to SDPA (``is_causal``): a tensor of batch x sequence^2
    per layer that a real run never holds. The example batches are single unpadded
    sequences, so the trace decides as a real step on them does."""
    try:
        from transformers import masking_utils
    except ImportError:
        return
    from torch._subclasses.fake_tensor import FakeTensor

    packed, skip = (getattr(masking_utils, name, None) for name in FIXED_DECISIONS)
    if packed is None or skip is None:
        return
    signature = inspect.signature(skip)

    def one_sequence(position_ids: torch.Tensor) -> torch.Tensor | None:
        return None if isinstance(position_ids, FakeTensor) else packed(position_ids)

    def no_mask_needed(*args: object, **kwargs: object) -> bool:
        bound = signature.bind(*args, **kwargs)
        if isinstance(bound.arguments.get("padding_mask"), FakeTensor):
            bound.arguments["padding_mask"] = None  # no padding in a full batch
        if isinstance(bound.arguments.get("q_offset"), FakeTensor):
            bound.arguments["q_offset"] = 0  # training: nothing cached before the batch
        return skip(*bound.args, **bound.kwargs)

    setattr(masking_utils, FIXED_DECISIONS[0], one_sequence)
    setattr(masking_utils, FIXED_DECISIONS[1], no_mask_needed)


def one_step(
    task: ModuleType, net: nn.Module, optimizer: torch.optim.Optimizer, batch: dict, precision: str
) -> None:
    inputs = dict(batch)
    labels = inputs.pop("labels")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        loss = task.training_loss(net(**inputs), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()

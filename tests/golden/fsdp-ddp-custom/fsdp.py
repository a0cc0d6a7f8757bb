"""Fully Sharded Data Parallel: FSDP2 (fully_shard)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    set_model_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import dist_utils
from model import blocks


def build_sharded(
    build: Callable[[], nn.Module], device: torch.device, args: argparse.Namespace
) -> nn.Module:
    """The model sharded across the ranks, never whole on any rank but 0: rank 0 builds
    it on the CPU (initialised, or loaded), every rank builds its skeleton on the meta
    device (no memory), shards it and allocates only its own shard; then rank 0 sends
    each rank its part of the weights."""
    full = build() if dist.get_rank() == 0 else None
    with torch.device("meta"):
        model = build()
    # wrapped before sharding: FSDP2 shards the wrappers
    if args.activation_checkpointing:
        dist_utils.checkpoint_activations(model, blocks(model))
    model = shard(model, device, args.precision)
    model.to_empty(device=device)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(
        model, full.state_dict() if full is not None else {}, options=options
    )
    send_buffers(model, full)
    return model


def send_buffers(model: nn.Module, full: nn.Module | None) -> None:
    """Buffers outside the state dict (position ids, masks): rank 0 sends them too."""
    saved = set(model.state_dict())
    for name, buffer in model.named_buffers():
        name = name.replace("_checkpoint_wrapped_module.", "")
        if name in saved:
            continue
        if full is not None:
            buffer.copy_(full.get_buffer(name))
        dist.broadcast(buffer, src=0)


def shard(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """FSDP2: split each of the model's blocks, then the rest, across the ranks.

    A unit's parameters are gathered whole only for its forward and backward, so at rest
    a rank holds 1/world_size of the weights, gradients and optimizer state. With bf16
    the gathered weights compute in bfloat16 while the sharded master weights and the
    gradient reduction stay fp32.
    """
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for unit in blocks(model):
        fully_shard(unit, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def no_sync(model: nn.Module):
    """FSDP2's no_sync: accumulate unsharded gradients, reduce-scatter them later."""

    @contextlib.contextmanager
    def gradients_stay_local() -> Iterator[None]:
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    return gradients_stay_local

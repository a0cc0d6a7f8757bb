"""Fully Sharded Data Parallel: FSDP1."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

import dist_utils
from model import blocks


def build_sharded(
    build: Callable[[], nn.Module], device: torch.device, args: argparse.Namespace
) -> nn.Module:
    """The model sharded across the ranks, never whole on any rank but 0: rank 0 builds
    it (initialised, or loaded), the others on the meta device (no memory); FSDP then
    gives each rank its own shard and sends rank 0's weights (sync_module_states)."""
    if dist.get_rank() == 0:
        model = build()
    else:
        with torch.device("meta"):
            model = build()
    model = shard(model, device, args.precision)
    # FSDP1: around the blocks, inside their units
    if args.activation_checkpointing:
        dist_utils.checkpoint_activations(model, blocks(model))
    return model


def shard(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """FSDP1: wrap each of the model's blocks, then the rest, split across the ranks.

    A unit's parameters are gathered whole only for its forward and backward, so at rest
    a rank holds 1/world_size of the weights, gradients and optimizer state. With bf16
    the gathered weights compute in bfloat16 while the sharded master weights and the
    gradient reduction stay fp32.
    """
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return FSDP(
        model,
        auto_wrap_policy=functools.partial(
            lambda_auto_wrap_policy, lambda_fn=set(blocks(model)).__contains__
        ),
        mixed_precision=MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32),
        device_id=device if device.type == "cuda" else None,
        use_orig_params=True,  # the model's own parameter names; torch.compile works
        # the ranks built on the meta device get memory for their shard only, then
        # rank 0's weights (and buffers)
        sync_module_states=True,  # FSDP1 needs GPUs for it (genie refuses FSDP1 on CPU)
        param_init_fn=materialize(device),
    )


def materialize(device: torch.device) -> Callable[[nn.Module], None]:
    """What FSDP1 runs on each module still on the meta device (ranks other than 0)."""

    def allocate(module: nn.Module) -> None:
        module.to_empty(device=device, recurse=False)  # its own tensors, uninitialised

    return allocate


def no_sync(model: nn.Module):
    return model.no_sync

"""Fully Sharded Data Parallel: FSDP1."""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

from model import shard_units


def shard(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """FSDP1: wrap each unit of shard_units(), then the rest, split across the ranks.

    A unit's parameters are gathered whole only for its forward and backward, so at rest
    a rank holds 1/world_size of the weights, gradients and optimizer state. With bf16
    the gathered weights compute in bfloat16 while the sharded master weights and the
    gradient reduction stay fp32.
    """
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return FSDP(
        model,
        auto_wrap_policy=functools.partial(
            lambda_auto_wrap_policy, lambda_fn=set(shard_units(model)).__contains__
        ),
        mixed_precision=MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32),
        device_id=device if device.type == "cuda" else None,
        use_orig_params=True,  # the model's own parameter names; torch.compile works
    )


def no_sync(model: nn.Module):
    return model.no_sync

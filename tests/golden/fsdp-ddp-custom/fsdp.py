"""Fully Sharded Data Parallel: FSDP2 (fully_shard)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from model import shard_units


def shard(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """FSDP2: split each unit of shard_units(), then the rest, across the ranks.

    A unit's parameters are gathered whole only for its forward and backward, so at rest
    a rank holds 1/world_size of the weights, gradients and optimizer state. With bf16
    the gathered weights compute in bfloat16 while the sharded master weights and the
    gradient reduction stay fp32.
    """
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for unit in shard_units(model):
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

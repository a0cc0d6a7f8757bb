"""A minimal hand-written DDP training loop (no checkpoints, no AMP, no accumulation)."""

import torch
from common import Synthetic, mlp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def run(epochs: int, out: str) -> None:
    """Train for ``epochs`` in the process group the caller set up (``out``: unused)."""
    torch.manual_seed(0)
    data = Synthetic()
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, num_workers=0)
    model = DDP(mlp())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            loss = nn.functional.cross_entropy(model(batch["features"]), batch["labels"])
            opt.zero_grad()
            loss.backward()
            opt.step()

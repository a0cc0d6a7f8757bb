"""The baseline: a minimal hand-written DDP script, the kind of thing a user writes first.

Same tiny task as a genie project's --smoke mode (32 -> 16 -> 10 MLP, 64 synthetic samples,
batch 4 per process, 2 epochs), no checkpoints or extras. Run under
``torchrun --standalone --nproc_per_node=2``.
"""

import gc
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g)
    y = (x @ torch.randn(32, 10, generator=g)).argmax(1)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(32, 16), nn.GELU(), nn.Linear(16, 10)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    if int(os.environ["RANK"]) == 0:
        print("loss", loss.item())
    del model, opt, loss
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

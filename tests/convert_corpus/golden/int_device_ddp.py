"""Written for GPU 0 by number: set_device(0), .to(0) and device=0."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
import gc
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

# torchrun starts one process per device and gives each its LOCAL_RANK (on this machine)
# and RANK (among all processes); each process trains on its own device.
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
RANK = int(os.environ.get("RANK", "0"))
DEVICE = torch.device(f"cuda:{LOCAL_RANK}" if torch.cuda.is_available() else "cpu")


def setup_distributed() -> None:
    """Join the other processes: NCCL between GPUs, gloo between CPU processes."""
    if DEVICE.type == "cuda":
        torch.cuda.set_device(DEVICE)
    dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo")


def cleanup_distributed() -> None:
    """Leave the process group once what its collectives used is freed (gloo can abort at
    exit otherwise: pytorch/pytorch#190489)."""
    gc.collect()
    dist.destroy_process_group()


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 4), torch.randn(128, 1))
    loader = DataLoader(
        data,
        batch_size=16,
        drop_last=True,
        sampler=DistributedSampler(data, shuffle=True),
    )
    model = nn.Linear(4, 1).to(DEVICE)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    noise_scale = torch.tensor(0.01, device=DEVICE)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(DEVICE), y.to(DEVICE)
            loss = nn.functional.mse_loss(model(x), y + noise_scale)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if RANK == 0:
            print("epoch", epoch, "loss", round(loss.item(), 4))


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

"""Class-balanced sampling with a WeightedRandomSampler (with replacement, its default): each
rank draws its own share."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler
import gc
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# torchrun starts one process per device and gives each its LOCAL_RANK (on this machine)
# and RANK (among all processes); each process trains on its own device.
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
RANK = int(os.environ.get("RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))
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


def per_rank(num_samples: int) -> int:
    """This process's share of the samples a sampler draws with replacement per epoch."""
    return -(-int(num_samples) // WORLD_SIZE)


def rank_generator() -> torch.Generator:
    """A generator of this process's own, from the script's seed and RANK: each process
    draws different samples."""
    return torch.Generator().manual_seed(torch.initial_seed() + RANK)


def main():
    device = DEVICE
    torch.manual_seed(0)
    labels = (torch.rand(120) > 0.8).long()
    data = TensorDataset(torch.randn(120, 6), labels)
    weights = 1.0 / torch.bincount(labels).float()
    sampler = WeightedRandomSampler(
        weights[labels], num_samples=per_rank(len(labels)), generator=rank_generator()
    )
    train_loader = DataLoader(data, batch_size=12, sampler=sampler)
    model = nn.Linear(6, 2).to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if RANK == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

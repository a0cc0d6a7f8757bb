"""A stream of samples (an IterableDataset, as research code reads shards of a corpus):
no sampler can take it; each rank must keep its own share, the same count on each."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset
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


class RankShard(torch.utils.data.IterableDataset):
    """This process's share of an iterable dataset: of every WORLD_SIZE items in a row,
    the RANK-th; an incomplete last group is dropped (every process, the same count)."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:  # where the dataset has a length
        return len(self.dataset) // WORLD_SIZE

    def __iter__(self):
        group = []
        for item in self.dataset:
            group.append(item)
            if len(group) == WORLD_SIZE:
                yield group[RANK]
                group = []


class NoisyLine(IterableDataset):
    """y = 3x - 1 plus noise, 203 samples read one by one from a seeded generator."""

    def __init__(self, count=203, seed=7):
        self.count, self.seed = count, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.count):
            x = torch.randn(1, generator=g)
            yield x, 3 * x - 1 + 0.05 * torch.randn(1, generator=g)


def main():
    torch.manual_seed(0)
    device = DEVICE
    model = nn.Linear(1, 1).to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train_loader = DataLoader(RankShard(NoisyLine()), batch_size=8)
    for epoch in range(3):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.mse_loss(model(x), y)
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

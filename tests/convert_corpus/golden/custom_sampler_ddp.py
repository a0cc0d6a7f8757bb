"""A sampler class of the script's own (batches bucketed by label): genie must not guess how
to shard it, so it leaves a TODO, and the check says what is wrong until it is done."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Sampler, TensorDataset
import gc
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

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


class BucketSampler(Sampler):
    """Every sample once per epoch, the samples of each label together."""

    def __init__(self, labels):
        self.order = torch.argsort(labels, stable=True).tolist()

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


def main():
    device = DEVICE
    torch.manual_seed(0)
    labels = (torch.rand(120) > 0.8).long()
    data = TensorDataset(torch.randn(120, 6), labels)
    # genie: TODO: train_loader has its own sampler: make it shard by rank (see DistributedSampler)
    train_loader = DataLoader(data, batch_size=12, sampler=BucketSampler(labels))
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

# The training loop lives in another module (corpus_lib/training.py); this script builds the
# model, the data and the optimizer, hard-coded, and calls it once per epoch.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from corpus_lib.training import train_one_epoch
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
    device = DEVICE
    x = torch.randn(64, 10)
    y = (x[:, 0] > 0).long()
    train_dataset = TensorDataset(x, y)
    train_loader = DataLoader(
        train_dataset,
        batch_size=8,
        sampler=DistributedSampler(train_dataset, shuffle=True),
    )
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        train_loader.sampler.set_epoch(epoch)
        loss = train_one_epoch(model, train_loader, optimizer, device)
        if RANK == 0:
            print(f"epoch {epoch} loss {loss:.4f}")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

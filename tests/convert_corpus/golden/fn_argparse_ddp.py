"""Train a small classifier on synthetic data: the function-style loop with argparse."""

import argparse

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


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside DDP's wrapper; a plain one (rebuilt or reloaded) as it is."""
    return model.module if isinstance(model, DDP) else model


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument(
        "--shuffle", action=argparse.BooleanOptionalAction, default=True
    )
    parser.add_argument("--out", default="model.pt")
    return parser.parse_args()


def make_data(n=256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 20, generator=g)
    y = (x[:, :5].sum(dim=1) > 0).long()
    return TensorDataset(x, y)


def train_one_epoch(model, loader, optimizer, loss_fn, device):
    model.train()
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def main():
    args = parse_args()
    torch.manual_seed(0)
    device = DEVICE
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    dataset = make_data()
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=DistributedSampler(dataset, shuffle=args.shuffle),
    )
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        loss = train_one_epoch(model, loader, optimizer, loss_fn, device)
        if RANK == 0:
            print(f"epoch {epoch}: loss {loss:.4f}")
    if RANK == 0:
        torch.save(unwrap(model).state_dict(), args.out)


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

"""AdamW with a warmup-then-decay schedule, gradient clipping and argparse."""

import argparse

import torch
from torch import nn
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


def get_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default="scheduled.pt")
    return p.parse_args()


def build_model():
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))


def main(args):
    torch.manual_seed(0)
    device = DEVICE
    data = TensorDataset(torch.randn(96, 10), torch.randint(0, 3, (96,)))
    train_loader = DataLoader(
        data,
        batch_size=args.batch_size,
        sampler=DistributedSampler(data, shuffle=args.shuffle),
    )
    model = build_model().to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps = args.epochs * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=steps
    )
    criterion = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        train_loader.sampler.set_epoch(epoch)
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(features), labels)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            scheduler.step()
        if RANK == 0:
            print(
                f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.5f} loss {loss.item():.4f}"
            )
    if RANK == 0:
        torch.save(
            {"model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict()},
            args.out,
        )


if __name__ == "__main__":
    setup_distributed()
    try:
        main(get_args())
    finally:
        cleanup_distributed()

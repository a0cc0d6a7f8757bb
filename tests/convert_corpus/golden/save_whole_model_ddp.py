"""Saves the whole model object (not a state dict), then loads it back for a test."""

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


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1))

    def forward(self, x):
        return self.body(x)


def run():
    device = DEVICE
    torch.manual_seed(0)
    x = torch.randn(128, 6)
    y = x.sum(dim=1, keepdim=True)
    dataset = TensorDataset(x, y)
    loader = DataLoader(
        dataset, batch_size=16, sampler=DistributedSampler(dataset, shuffle=True)
    )
    model = Regressor().to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = nn.functional.mse_loss(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if RANK == 0:
        torch.save(unwrap(model), "regressor.pt")
    dist.barrier()
    restored = torch.load("regressor.pt", weights_only=False, map_location=DEVICE)
    if RANK == 0:
        with open("metrics.txt", "w") as f:
            f.write(f"final loss {loss.item():.4f}\n")
    dist.barrier()
    if RANK == 0:
        print("restored predicts", restored(x[:2].to(device)).squeeze().tolist())


if __name__ == "__main__":
    setup_distributed()
    try:
        run()
    finally:
        cleanup_distributed()

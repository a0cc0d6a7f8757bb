# The model is chosen by a command-line flag in an if/elif, and trained with the old
# torch.cuda.amp spelling of mixed precision (disabled on CPU).
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
import gc
import os
import torch.distributed as dist
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


setup_distributed()

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="mlp", choices=["mlp", "linear"])
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()

torch.manual_seed(0)
use_cuda = torch.cuda.is_available()
device = DEVICE
x = torch.randn(64, 6)
y = x @ torch.randn(6, 1)
dataset = TensorDataset(x, y)
loader = DataLoader(
    dataset, batch_size=8, sampler=DistributedSampler(dataset, shuffle=True)
)

if args.model == "mlp":
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1)).to(device)
elif args.model == "linear":
    model = nn.Linear(6, 1).to(device)
else:
    raise ValueError(args.model)

optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.cuda.amp.GradScaler(enabled=use_cuda)
try:
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            with torch.cuda.amp.autocast(enabled=use_cuda):
                loss = nn.functional.mse_loss(model(inputs), targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if RANK == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")
finally:
    cleanup_distributed()

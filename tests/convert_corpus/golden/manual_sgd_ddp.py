# No optimizer: the parameters are updated by hand after backward(), and no seed is set.
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
    torch.manual_seed(shared_seed())  # the script sets no seed: rank 0's, everywhere


def cleanup_distributed() -> None:
    """Leave the process group once what its collectives used is freed (gloo can abort at
    exit otherwise: pytorch/pytorch#190489)."""
    gc.collect()
    dist.destroy_process_group()


def shared_seed() -> int:
    """Rank 0's random seed, for every rank: what the script draws before its models are
    wrapped (synthetic data, targets) must be the same on every rank."""
    seed = torch.tensor([torch.initial_seed() % 2**62], device=DEVICE)
    dist.broadcast(seed, src=0)
    return int(seed.item())


setup_distributed()

device = DEVICE
lr = 0.05
x = torch.randn(64, 5)
y = (x[:, :1] > 0).float()
train_dataset = TensorDataset(x, y)
train_loader = DataLoader(
    train_dataset, batch_size=8, sampler=DistributedSampler(train_dataset, shuffle=True)
)

model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
try:
    for epoch in range(2):
        train_loader.sampler.set_epoch(epoch)
        for inputs, targets in train_loader:
            inputs, targets = inputs.to(device), targets.to(device)
            model.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(
                model(inputs), targets
            )
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-lr)
        if RANK == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")
finally:
    cleanup_distributed()

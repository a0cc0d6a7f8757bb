# A top-level script with tqdm progress bars, TensorBoard, and no main block.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm
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


setup_distributed()

torch.manual_seed(0)
device = DEVICE

inputs = torch.randn(160, 12)
targets = inputs @ torch.randn(12, 1) + 0.1 * torch.randn(160, 1)
train_dataset = TensorDataset(inputs, targets)
train_loader = DataLoader(
    train_dataset,
    batch_size=16,
    sampler=DistributedSampler(train_dataset, shuffle=True),
)

model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 1)).to(device)
model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
writer = SummaryWriter("runs/tqdm_loop") if RANK == 0 else None

try:
    for epoch in range(2):
        train_loader.sampler.set_epoch(epoch)
        model.train()
        progress = tqdm(train_loader, desc=f"epoch {epoch}", disable=RANK != 0)
        for x, y in progress:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            progress.set_postfix(loss=f"{loss.item():.4f}")
        if RANK == 0:
            tqdm.write(f"epoch {epoch} done, last loss {loss.item():.4f}")
            writer.add_scalar("loss", loss.item(), epoch)
    if RANK == 0:
        writer.close()
finally:
    cleanup_distributed()

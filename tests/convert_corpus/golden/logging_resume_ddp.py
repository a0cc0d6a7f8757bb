"""Logs with the logging module, checkpoints model and optimizer, resumes when it can."""

import logging
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
import gc
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


logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
logger = logging.getLogger(__name__)
CHECKPOINT = "last.ckpt"


def main():
    device = DEVICE
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(160, 10), torch.randint(0, 5, (160,)))
    train_loader = DataLoader(
        data, batch_size=20, sampler=DistributedSampler(data, shuffle=True)
    )
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5)).to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    start = 0
    if os.path.exists(CHECKPOINT):
        state = torch.load(CHECKPOINT, map_location=DEVICE)
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        if RANK == 0:
            logger.info("resumed from epoch %d", state["epoch"])
    for epoch in range(start, start + 2):
        train_loader.sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(train_loader):
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 4 == 0:
                if RANK == 0:
                    logger.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
        state = {
            "model": unwrap(model).state_dict(),
            "optimizer": optimizer.state_dict(),
        }
        state["epoch"] = epoch
        if RANK == 0:
            torch.save(state, CHECKPOINT)
        dist.barrier()


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

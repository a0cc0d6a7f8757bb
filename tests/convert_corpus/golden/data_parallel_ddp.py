"""nn.DataParallel over every visible GPU: the classic single-process multi-GPU script."""

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


def main():
    device = DEVICE
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(200, 5), torch.randint(0, 2, (200,)))
    loader = DataLoader(
        dataset, batch_size=20, sampler=DistributedSampler(dataset, shuffle=True)
    )

    model = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 2))
    if torch.cuda.device_count() > 1:
        if RANK == 0:
            print("Let's use", torch.cuda.device_count(), "GPUs!")
    model.to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            loss = criterion(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if RANK == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")

    state = (
        model.module.state_dict()
        if isinstance(model, nn.DataParallel)
        else unwrap(model).state_dict()
    )
    if RANK == 0:
        torch.save(state, "dp_model.pt")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

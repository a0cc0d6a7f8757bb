"""Train with a validation loop: accuracy each epoch, keep the best weights, reload them."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split
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


def same_on_every_rank(decision: object) -> bool:
    """Rank 0's ``decision``, taken by every process: a branch that holds a collective (a
    barrier, the next training step) must be entered by all processes or by none."""
    flag = torch.tensor([1 if decision else 0], device=DEVICE)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


BEST = "best.pt"


def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total


def main():
    torch.manual_seed(0)
    device = DEVICE
    x = torch.randn(300, 8)
    y = (x[:, 0] + x[:, 1] > 0).long()
    train_set, val_set = random_split(TensorDataset(x, y), [240, 60])
    train_loader = DataLoader(
        train_set, batch_size=20, sampler=DistributedSampler(train_set, shuffle=True)
    )
    val_loader = DataLoader(val_set, batch_size=30)

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model.to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    best_acc = 0.0
    for epoch in range(3):
        train_loader.sampler.set_epoch(epoch)
        model.train()
        for xb, yb in train_loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
        acc = evaluate(model, val_loader, device)
        if RANK == 0:
            print(f"epoch {epoch}: val accuracy {acc:.3f}")
        if same_on_every_rank(acc > best_acc):
            best_acc = acc
            if RANK == 0:
                torch.save(unwrap(model).state_dict(), BEST)
            dist.barrier()

    unwrap(model).load_state_dict(torch.load(BEST, map_location=DEVICE))
    print(f"best val accuracy {evaluate(model, val_loader, device):.3f}")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

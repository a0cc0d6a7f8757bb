# Keeps the best checkpoint by the training loss seen so far, and reloads it at the end.
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


def same_on_every_rank(decision: object) -> bool:
    """Rank 0's ``decision``, taken by every process: a branch that holds a collective (a
    barrier, the next training step) must be entered by all processes or by none."""
    flag = torch.tensor([1 if decision else 0], device=DEVICE)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def main():
    torch.manual_seed(0)
    device = DEVICE
    x = torch.randn(96, 4)
    y = x.sum(dim=1, keepdim=True) + 0.5 * torch.randn(96, 1)
    dataset = TensorDataset(x, y)
    loader = DataLoader(
        dataset, batch_size=4, sampler=DistributedSampler(dataset, shuffle=True)
    )
    model = nn.Linear(4, 1).to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    best_loss = float("inf")
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            if same_on_every_rank(loss.item() < best_loss):
                best_loss = loss.item()
                if RANK == 0:
                    torch.save(unwrap(model).state_dict(), "best.pt")
                dist.barrier()
                if RANK == 0:
                    print(f"epoch {epoch}: new best loss {best_loss:.4f}")
    unwrap(model).load_state_dict(torch.load("best.pt", map_location=DEVICE))
    if RANK == 0:
        print(f"best loss {best_loss:.4f}")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

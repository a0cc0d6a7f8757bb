# Research code's shape: a Solver class takes the model and the loader in its constructor and
# builds the optimizer in a method of its own; its train() holds the epoch loop.
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


class Solver:
    def __init__(self, model, loader, lr):
        self.model = model
        self.model = DDP(
            self.model.to(DEVICE),
            device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None,
        )
        self.loader = loader
        self.lr = lr
        self.build_optimizer()

    def build_optimizer(self):
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr)

    def train(self, epochs):
        for epoch in range(epochs):
            self.loader.sampler.set_epoch(epoch)
            for x, y in self.loader:
                self.optimizer.zero_grad()
                loss = nn.functional.cross_entropy(self.model(x), y)
                loss.backward()
                self.optimizer.step()
            if RANK == 0:
                print(epoch, loss.item())
        if RANK == 0:
            torch.save(unwrap(self.model).state_dict(), "solver.pt")


if __name__ == "__main__":
    setup_distributed()
    try:
        torch.manual_seed(0)
        x = torch.randn(64, 4)
        y = (x[:, 0] > 0).long()
        train_dataset = TensorDataset(x, y)
        train_loader = DataLoader(
            train_dataset,
            batch_size=8,
            sampler=DistributedSampler(train_dataset, shuffle=True),
        )
        Solver(nn.Linear(4, 2), train_loader, 1e-2).train(2)
    finally:
        cleanup_distributed()

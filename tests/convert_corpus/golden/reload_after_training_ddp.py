# A tutorial's shape: train a model, save it, then build a fresh copy and load the saved
# weights to show reloading. The model that trains is the first one, not the last built.
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


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def main():
    torch.manual_seed(0)
    device = DEVICE
    x = torch.randn(64, 8)
    y = (x.sum(dim=1) > 0).long()
    dataset = TensorDataset(x, y)
    loader = DataLoader(
        dataset, batch_size=8, sampler=DistributedSampler(dataset, shuffle=True)
    )

    model = Net().to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        model.train()
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), labels)
            loss.backward()
            optimizer.step()
        if RANK == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")
    if RANK == 0:
        torch.save(unwrap(model).state_dict(), "net.pt")
    dist.barrier()

    model = Net().to(device)
    model.load_state_dict(torch.load("net.pt", map_location=DEVICE))
    model.eval()
    with torch.no_grad():
        correct = (model(x.to(device)).argmax(dim=1) == y.to(device)).sum().item()
    if RANK == 0:
        print(f"reloaded model: {correct}/{len(x)} correct")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

# The PyTorch quickstart's style: torch.accelerator, train() and test() functions,
# an epoch loop over t, accuracy on a test set.
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


setup_distributed()

device = DEVICE
if RANK == 0:
    print(f"Using {device} device")

g = torch.Generator().manual_seed(0)
training_data = TensorDataset(
    torch.rand(240, 1, 8, 8, generator=g), torch.randint(0, 10, (240,), generator=g)
)
test_data = TensorDataset(
    torch.rand(80, 1, 8, 8, generator=g), torch.randint(0, 10, (80,), generator=g)
)

batch_size = 20
train_dataloader = DataLoader(
    training_data,
    batch_size=batch_size,
    sampler=DistributedSampler(training_data, shuffle=True),
)
test_dataloader = DataLoader(test_data, batch_size=batch_size)


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(8 * 8, 32), nn.ReLU(), nn.Linear(32, 10)
        )

    def forward(self, x):
        x = self.flatten(x)
        logits = self.linear_relu_stack(x)
        return logits


model = NeuralNetwork().to(device)
model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)


def train(dataloader, model, loss_fn, optimizer):
    size = len(dataloader.dataset)
    model.train()
    for batch, (X, y) in enumerate(dataloader):
        X, y = X.to(device), y.to(device)
        pred = model(X)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if batch % 4 == 0:
            loss, current = loss.item(), (batch + 1) * len(X)
            if RANK == 0:
                print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")


def test(dataloader, model, loss_fn):
    size = len(dataloader.dataset)
    num_batches = len(dataloader)
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for X, y in dataloader:
            X, y = X.to(device), y.to(device)
            pred = model(X)
            test_loss += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    test_loss /= num_batches
    correct /= size
    if RANK == 0:
        print(
            f"Test Error: \n Accuracy: {(100*correct):>0.1f}%, Avg loss: {test_loss:>8f} \n"
        )


epochs = 2
try:
    for t in range(epochs):
        train_dataloader.sampler.set_epoch(t)
        if RANK == 0:
            print(f"Epoch {t+1}\n-------------------------------")
        train(train_dataloader, model, loss_fn, optimizer)
        test(test_dataloader, model, loss_fn)
    if RANK == 0:
        print("Done!")
        torch.save(unwrap(model).state_dict(), "model.pth")
        print("Saved PyTorch Model State to model.pth")
finally:
    cleanup_distributed()

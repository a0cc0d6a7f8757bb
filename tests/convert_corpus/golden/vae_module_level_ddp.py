"""The VAE example's style: loaders and model at module level, a main block, a custom
method (decode) called on the model, a test loader that shuffles."""

import argparse
import os

import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F
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


setup_distributed()

parser = argparse.ArgumentParser(description="VAE Example")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--no-cuda", action="store_true", default=False)
args = parser.parse_args()
args.cuda = not args.no_cuda and torch.cuda.is_available()
torch.manual_seed(1)
device = DEVICE
kwargs = {"num_workers": 1, "pin_memory": True} if args.cuda else {}
data = torch.utils.data.TensorDataset(torch.rand(256, 64), torch.zeros(256))
train_loader = torch.utils.data.DataLoader(
    data,
    batch_size=args.batch_size,
    sampler=DistributedSampler(data, shuffle=True),
    **kwargs,
)
test_loader = torch.utils.data.DataLoader(
    data, batch_size=args.batch_size, shuffle=True, **kwargs
)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc21 = nn.Linear(32, 8)
        self.fc22 = nn.Linear(32, 8)
        self.fc3 = nn.Linear(8, 32)
        self.fc4 = nn.Linear(32, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
optimizer = optim.Adam(model.parameters(), lr=1e-3)


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x, reduction="sum")
    return bce - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


def train(epoch):
    model.train()
    train_loader.sampler.set_epoch(epoch)
    for data, _ in train_loader:
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        optimizer.step()
    if RANK == 0:
        print("====> Epoch: {} loss: {:.4f}".format(epoch, loss.item()))


def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for data, _ in test_loader:
            data = data.to(device)
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
    if RANK == 0:
        print(
            "====> Test set loss: {:.4f}".format(test_loss / len(test_loader.dataset))
        )


if __name__ == "__main__":
    try:
        os.makedirs("results", exist_ok=True)
        for epoch in range(1, args.epochs + 1):
            train(epoch)
            test(epoch)
            with torch.no_grad():
                sample = torch.randn(64, 8).to(device)
                sample = unwrap(model).decode(sample).cpu()
                if RANK == 0:
                    torch.save(sample, "results/sample_" + str(epoch) + ".pt")
    finally:
        cleanup_distributed()

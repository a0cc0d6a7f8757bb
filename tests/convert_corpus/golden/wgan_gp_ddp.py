# A WGAN-GP in the style of the popular GAN collections: a critic trained several steps per
# generator step, with a gradient penalty through the critic (autograd.grad on random
# interpolates, create_graph=True), noise drawn in the loop, Adam with betas (0.5, 0.9).
import argparse

import torch
import torch.nn as nn
from torch import autograd
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


def seed_each_rank() -> None:
    """From here on every rank draws its own random numbers (batches picked at random,
    noise, dropout): DDP has just made the weights the same on every rank."""
    seed = torch.initial_seed() + RANK
    torch.manual_seed(seed)


setup_distributed()

parser = argparse.ArgumentParser()
parser.add_argument("--n_epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--n_critic", type=int, default=3)
parser.add_argument("--lambda_gp", type=float, default=10.0)
opt = parser.parse_args()

torch.manual_seed(0)
latent = 4
real_data = torch.randn(192, 8) * 0.5 + 1.0
data_dataset = TensorDataset(real_data)
dataloader = DataLoader(
    data_dataset,
    batch_size=opt.batch_size,
    sampler=DistributedSampler(data_dataset, shuffle=True),
)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(latent, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, z):
        return self.model(z)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(8, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1)
        )

    def forward(self, x):
        return self.model(x)


def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    scores = critic(mixed)
    grads = autograd.grad(
        outputs=scores,
        inputs=mixed,
        grad_outputs=torch.ones_like(scores),
        create_graph=True,
        retain_graph=True,
    )[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


generator = Generator()
generator = DDP(
    generator.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None
)
critic = Critic()
critic = DDP(
    critic.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None
)
seed_each_rank()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.9))
optimizer_D = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))

try:
    for epoch in range(opt.n_epochs):
        dataloader.sampler.set_epoch(epoch)
        for i, (real,) in enumerate(dataloader):
            optimizer_D.zero_grad()
            z = torch.randn(real.size(0), latent)
            fake = generator(z)
            gp = gradient_penalty(critic, real, fake.detach())
            d_loss = (
                -critic(real).mean() + critic(fake.detach()).mean() + opt.lambda_gp * gp
            )
            d_loss.backward()
            optimizer_D.step()

            if i % opt.n_critic == 0:
                optimizer_G.zero_grad()
                g_loss = -critic(generator(z)).mean()
                g_loss.backward()
                optimizer_G.step()
                if RANK == 0:
                    print(
                        f"[{epoch}/{opt.n_epochs}] [{i}] D {d_loss.item():.4f} G {g_loss.item():.4f}"
                    )

    if RANK == 0:
        torch.save(unwrap(generator).state_dict(), "generator.pth")
finally:
    cleanup_distributed()

# A GAN in the DCGAN example's style: the seed is random unless --manualSeed, each model is
# moved to the device and then initialised (and optionally loaded), two optimizers.
import argparse
import random

import torch
import torch.nn as nn
import torch.optim as optim
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


def seed_each_rank() -> None:
    """From here on every rank draws its own random numbers (batches picked at random,
    noise, dropout): DDP has just made the weights the same on every rank."""
    seed = torch.initial_seed() + RANK
    torch.manual_seed(seed)


setup_distributed()

parser = argparse.ArgumentParser()
parser.add_argument("--niter", type=int, default=1)
parser.add_argument("--batchSize", type=int, default=16)
parser.add_argument("--manualSeed", type=int, help="manual seed")
parser.add_argument("--netG", default="", help="path to netG (to continue training)")
opt = parser.parse_args()

if opt.manualSeed is None:
    opt.manualSeed = random.randint(1, 10000)
if RANK == 0:
    print("Random Seed: ", opt.manualSeed)
random.seed(opt.manualSeed)
torch.manual_seed(opt.manualSeed)

device = DEVICE
nz = 4
dataset = torch.utils.data.TensorDataset(torch.randn(96, 8) * 0.5 + 1.0)
dataloader = torch.utils.data.DataLoader(
    dataset, batch_size=opt.batchSize, sampler=DistributedSampler(dataset, shuffle=True)
)


def weights_init(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.02)
        nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(nz, 16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, x):
        return torch.sigmoid(self.main(x))


netG = Generator().to(device)
netG.apply(weights_init)
if opt.netG != "":
    netG.load_state_dict(torch.load(opt.netG, map_location=DEVICE))
netG = DDP(netG.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
netD = Discriminator().to(device)
netD.apply(weights_init)
netD = DDP(netD.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
seed_each_rank()
criterion = nn.BCELoss()
optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))

try:
    for epoch in range(opt.niter):
        dataloader.sampler.set_epoch(epoch)
        for i, (real,) in enumerate(dataloader):
            real = real.to(device)
            ones = torch.ones(real.size(0), 1, device=device)
            zeros = torch.zeros(real.size(0), 1, device=device)
            netD.zero_grad()
            fake = netG(torch.randn(real.size(0), nz, device=device))
            errD = criterion(
                netD(torch.cat([real, fake.detach()])), torch.cat([ones, zeros])
            )
            errD.backward()
            optimizerD.step()
            netG.zero_grad()
            errG = criterion(netD(fake), ones)
            errG.backward()
            optimizerG.step()
            if RANK == 0:
                print(
                    f"[{epoch}][{i}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f}"
                )
finally:
    cleanup_distributed()

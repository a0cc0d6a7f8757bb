# A GAN in the old DCGAN example's style: two models, two optimizers, weights initialised
# after the models are built, moved to the GPU in a branch, top-level code.
import argparse
import os

import torch
import torch.nn as nn
import torch.optim as optim
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


def seed_each_rank() -> None:
    """From here on every rank draws its own random numbers (batches picked at random,
    noise, dropout): DDP has just made the weights the same on every rank."""
    seed = torch.initial_seed() + RANK
    torch.manual_seed(seed)


setup_distributed()

parser = argparse.ArgumentParser()
parser.add_argument("--niter", type=int, default=2)
parser.add_argument("--batchSize", type=int, default=16)
parser.add_argument("--outf", default="gan_out")
parser.add_argument("--cuda", action="store_true")
opt = parser.parse_args()
os.makedirs(opt.outf, exist_ok=True)
torch.manual_seed(0)

real_data = torch.randn(128, 8) * 0.5 + 1.0
dataloader = torch.utils.data.DataLoader(
    real_data,
    batch_size=opt.batchSize,
    sampler=DistributedSampler(real_data, shuffle=True),
)
nz = 4


def weights_init(m):
    if isinstance(m, nn.Linear):
        m.weight.data.normal_(0.0, 0.02)
        m.bias.data.fill_(0)


netG = nn.Sequential(nn.Linear(nz, 16), nn.ReLU(), nn.Linear(16, 8))
netG.apply(weights_init)
netD = nn.Sequential(
    nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1), nn.Sigmoid()
)
netD.apply(weights_init)
criterion = nn.BCELoss()

if opt.cuda:
    netD.to(DEVICE)
    netG.to(DEVICE)
netD = DDP(netD.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
netG = DDP(netG.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
seed_each_rank()

# setup optimizer
optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))

try:
    for epoch in range(opt.niter):
        dataloader.sampler.set_epoch(epoch)
        for i, real in enumerate(dataloader):
            real = real.to(DEVICE) if opt.cuda else real
            batch_size = real.size(0)
            ones = torch.ones(batch_size, 1, device=real.device)
            zeros = torch.zeros(batch_size, 1, device=real.device)

            netD.zero_grad()
            errD_real = criterion(netD(real), ones)
            errD_real.backward()
            noise = torch.randn(batch_size, nz, device=real.device)
            fake = netG(noise)
            errD_fake = criterion(netD(fake.detach()), zeros)
            errD_fake.backward()
            optimizerD.step()

            netG.zero_grad()
            errG = criterion(netD(fake), ones)
            errG.backward()
            optimizerG.step()

            if RANK == 0:
                print(
                    f"[{epoch}/{opt.niter}][{i}/{len(dataloader)}] "
                    f"Loss_D: {(errD_real + errD_fake).item():.4f} Loss_G: {errG.item():.4f}"
                )

        if RANK == 0:
            torch.save(unwrap(netG).state_dict(), f"{opt.outf}/netG_epoch_{epoch}.pth")
            torch.save(unwrap(netD).state_dict(), f"{opt.outf}/netD_epoch_{epoch}.pth")
finally:
    cleanup_distributed()

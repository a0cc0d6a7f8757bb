# A conditional GAN in the style of the popular GAN collections: the generator and the
# discriminator both embed the class label (nn.Embedding), noise and random labels drawn from
# numpy in the loop, BCE on the discriminator's verdict, the .detach() pattern; the
# discriminator keeps an auxiliary classifier head that training never uses.
import argparse

import numpy as np
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


def seed_each_rank() -> None:
    """From here on every rank draws its own random numbers (batches picked at random,
    noise, dropout): DDP has just made the weights the same on every rank."""
    seed = torch.initial_seed() + RANK
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)


setup_distributed()

parser = argparse.ArgumentParser()
parser.add_argument("--n_epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--n_classes", type=int, default=3)
opt = parser.parse_args()

torch.manual_seed(0)
np.random.seed(0)
latent = 4
labels_all = torch.randint(0, opt.n_classes, (192,))
samples = torch.randn(192, 8) * 0.2 + labels_all[:, None].float()
data_dataset = TensorDataset(samples, labels_all)
dataloader = DataLoader(
    data_dataset,
    batch_size=opt.batch_size,
    sampler=DistributedSampler(data_dataset, shuffle=True),
)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_emb = nn.Embedding(opt.n_classes, opt.n_classes)
        self.model = nn.Sequential(
            nn.Linear(latent + opt.n_classes, 32), nn.ReLU(), nn.Linear(32, 8)
        )

    def forward(self, noise, labels):
        return self.model(torch.cat((self.label_emb(labels), noise), -1))


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_embedding = nn.Embedding(opt.n_classes, opt.n_classes)
        self.model = nn.Sequential(
            nn.Linear(8 + opt.n_classes, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1)
        )
        self.classifier = nn.Linear(8, opt.n_classes)  # for evaluation

    def forward(self, x, labels):
        return self.model(torch.cat((x, self.label_embedding(labels)), -1))

    def classify(self, x):
        return self.classifier(x)


adversarial_loss = nn.BCEWithLogitsLoss()
generator = Generator()
generator = DDP(
    generator.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None
)
discriminator = Discriminator()
discriminator = DDP(
    discriminator.to(DEVICE),
    device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None,
    find_unused_parameters=True,
)
seed_each_rank()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))

try:
    for epoch in range(opt.n_epochs):
        dataloader.sampler.set_epoch(epoch)
        for i, (real, labels) in enumerate(dataloader):
            valid = torch.ones(real.size(0), 1)
            fake = torch.zeros(real.size(0), 1)

            optimizer_G.zero_grad()
            z = torch.tensor(
                np.random.normal(0, 1, (real.size(0), latent)), dtype=torch.float
            )
            gen_labels = torch.tensor(np.random.randint(0, opt.n_classes, real.size(0)))
            gen = generator(z, gen_labels)
            g_loss = adversarial_loss(discriminator(gen, gen_labels), valid)
            g_loss.backward()
            optimizer_G.step()

            optimizer_D.zero_grad()
            real_loss = adversarial_loss(discriminator(real, labels), valid)
            fake_loss = adversarial_loss(discriminator(gen.detach(), gen_labels), fake)
            d_loss = (real_loss + fake_loss) / 2
            d_loss.backward()
            optimizer_D.step()
            if RANK == 0:
                print(
                    f"[{epoch}/{opt.n_epochs}] [{i}] D {d_loss.item():.4f} G {g_loss.item():.4f}"
                )

    if RANK == 0:
        torch.save(unwrap(generator).state_dict(), "generator.pth")
finally:
    cleanup_distributed()

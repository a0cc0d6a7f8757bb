# A WGAN-GP in the style of the popular GAN collections: a critic trained several steps per
# generator step, with a gradient penalty through the critic (autograd.grad on random
# interpolates, create_graph=True), noise drawn in the loop, Adam with betas (0.5, 0.9).
import argparse

import torch
import torch.nn as nn
from torch import autograd
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--n_epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--n_critic", type=int, default=3)
parser.add_argument("--lambda_gp", type=float, default=10.0)
opt = parser.parse_args()

torch.manual_seed(0)
latent = 4
real_data = torch.randn(192, 8) * 0.5 + 1.0
dataloader = DataLoader(
    TensorDataset(real_data), batch_size=opt.batch_size, shuffle=True
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
critic = Critic()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.9))
optimizer_D = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))

for epoch in range(opt.n_epochs):
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
            print(
                f"[{epoch}/{opt.n_epochs}] [{i}] D {d_loss.item():.4f} G {g_loss.item():.4f}"
            )

torch.save(generator.state_dict(), "generator.pth")

# A conditional GAN in the style of the popular GAN collections: the generator and the
# discriminator both embed the class label (nn.Embedding), noise and random labels drawn from
# numpy in the loop, BCE on the discriminator's verdict, the .detach() pattern; the
# discriminator keeps an auxiliary classifier head that training never uses.
import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

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
dataloader = DataLoader(
    TensorDataset(samples, labels_all), batch_size=opt.batch_size, shuffle=True
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
discriminator = Discriminator()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))

for epoch in range(opt.n_epochs):
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
        print(
            f"[{epoch}/{opt.n_epochs}] [{i}] D {d_loss.item():.4f} G {g_loss.item():.4f}"
        )

torch.save(generator.state_dict(), "generator.pth")

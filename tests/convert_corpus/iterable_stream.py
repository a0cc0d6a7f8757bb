"""A stream of samples (an IterableDataset, as research code reads shards of a corpus):
no sampler can take it; each rank must keep its own share, the same count on each."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset


class NoisyLine(IterableDataset):
    """y = 3x - 1 plus noise, 203 samples read one by one from a seeded generator."""

    def __init__(self, count=203, seed=7):
        self.count, self.seed = count, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.count):
            x = torch.randn(1, generator=g)
            yield x, 3 * x - 1 + 0.05 * torch.randn(1, generator=g)


def main():
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Linear(1, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train_loader = DataLoader(NoisyLine(), batch_size=8)
    for epoch in range(3):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

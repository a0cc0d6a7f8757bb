"""Class-balanced sampling with a WeightedRandomSampler (with replacement, its default): each
rank draws its own share."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    labels = (torch.rand(120) > 0.8).long()
    data = TensorDataset(torch.randn(120, 6), labels)
    weights = 1.0 / torch.bincount(labels).float()
    sampler = WeightedRandomSampler(weights[labels], num_samples=len(labels))
    train_loader = DataLoader(data, batch_size=12, sampler=sampler)
    model = nn.Linear(6, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

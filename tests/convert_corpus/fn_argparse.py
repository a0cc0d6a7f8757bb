"""Train a small classifier on synthetic data: the function-style loop with argparse."""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument(
        "--shuffle", action=argparse.BooleanOptionalAction, default=True
    )
    parser.add_argument("--out", default="model.pt")
    return parser.parse_args()


def make_data(n=256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 20, generator=g)
    y = (x[:, :5].sum(dim=1) > 0).long()
    return TensorDataset(x, y)


def train_one_epoch(model, loader, optimizer, loss_fn, device):
    model.train()
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def main():
    args = parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(make_data(), batch_size=args.batch_size, shuffle=args.shuffle)
    for epoch in range(args.epochs):
        loss = train_one_epoch(model, loader, optimizer, loss_fn, device)
        print(f"epoch {epoch}: loss {loss:.4f}")
    torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()

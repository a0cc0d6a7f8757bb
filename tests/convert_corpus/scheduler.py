"""AdamW with a warmup-then-decay schedule, gradient clipping and argparse."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def get_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default="scheduled.pt")
    return p.parse_args()


def build_model():
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))


def main(args):
    torch.manual_seed(0)
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(96, 10), torch.randint(0, 3, (96,)))
    train_loader = DataLoader(data, batch_size=args.batch_size, shuffle=args.shuffle)
    model = build_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps = args.epochs * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=steps
    )
    criterion = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(features), labels)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            scheduler.step()
        print(
            f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.5f} loss {loss.item():.4f}"
        )
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict()}, args.out
    )


if __name__ == "__main__":
    main(get_args())

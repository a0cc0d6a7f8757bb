"""Train with a validation loop: accuracy each epoch, keep the best weights, reload them."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split

BEST = "best.pt"


def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total


def main():
    torch.manual_seed(0)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    x = torch.randn(300, 8)
    y = (x[:, 0] + x[:, 1] > 0).long()
    train_set, val_set = random_split(TensorDataset(x, y), [240, 60])
    train_loader = DataLoader(train_set, batch_size=20, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=30)

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    best_acc = 0.0
    for epoch in range(3):
        model.train()
        for xb, yb in train_loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
        acc = evaluate(model, val_loader, device)
        print(f"epoch {epoch}: val accuracy {acc:.3f}")
        if acc > best_acc:
            best_acc = acc
            torch.save(model.state_dict(), BEST)

    model.load_state_dict(torch.load(BEST))
    print(f"best val accuracy {evaluate(model, val_loader, device):.3f}")


if __name__ == "__main__":
    main()

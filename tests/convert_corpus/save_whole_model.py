"""Saves the whole model object (not a state dict), then loads it back for a test."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1))

    def forward(self, x):
        return self.body(x)


def run():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(128, 6)
    y = x.sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = Regressor().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = nn.functional.mse_loss(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    torch.save(model, "regressor.pt")
    restored = torch.load("regressor.pt", weights_only=False)
    with open("metrics.txt", "w") as f:
        f.write(f"final loss {loss.item():.4f}\n")
    print("restored predicts", restored(x[:2].to(device)).squeeze().tolist())


if __name__ == "__main__":
    run()

# The training loop lives in another module (corpus_lib/training.py); this script builds the
# model, the data and the optimizer, hard-coded, and calls it once per epoch.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from corpus_lib.training import train_one_epoch


def main():
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(64, 10)
    y = (x[:, 0] > 0).long()
    train_loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        loss = train_one_epoch(model, train_loader, optimizer, device)
        print(f"epoch {epoch} loss {loss:.4f}")


if __name__ == "__main__":
    main()

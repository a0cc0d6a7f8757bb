"""Written for one GPU: .cuda() on the model, the loss and every batch."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


def main():
    torch.manual_seed(0)
    x = torch.randn(192, 16)
    y = torch.randint(0, 4, (192,))
    loader = DataLoader(TensorDataset(x, y), batch_size=24, shuffle=True)
    model = MLP().cuda()
    criterion = nn.CrossEntropyLoss().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for inputs, targets in loader:
            inputs = inputs.cuda(non_blocking=True)
            targets = targets.cuda(non_blocking=True)
            loss = criterion(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("epoch", epoch, "loss", loss.item())


if __name__ == "__main__":
    main()

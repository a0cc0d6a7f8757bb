"""Written for GPU 0 by number: set_device(0), .to(0) and device=0."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 4), torch.randn(128, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True, drop_last=True)
    model = nn.Linear(4, 1).to(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    noise_scale = torch.tensor(0.01, device=0)
    for epoch in range(2):
        for x, y in loader:
            x, y = x.to(0), y.to(0)
            loss = nn.functional.mse_loss(model(x), y + noise_scale)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("epoch", epoch, "loss", round(loss.item(), 4))


if __name__ == "__main__":
    main()

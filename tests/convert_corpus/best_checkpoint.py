# Keeps the best checkpoint by the training loss seen so far, and reloads it at the end.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(96, 4)
    y = x.sum(dim=1, keepdim=True) + 0.5 * torch.randn(96, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    best_loss = float("inf")
    for epoch in range(2):
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            if loss.item() < best_loss:
                best_loss = loss.item()
                torch.save(model.state_dict(), "best.pt")
                print(f"epoch {epoch}: new best loss {best_loss:.4f}")
    model.load_state_dict(torch.load("best.pt"))
    print(f"best loss {best_loss:.4f}")


if __name__ == "__main__":
    main()

# A tutorial's shape: train a model, save it, then build a fresh copy and load the saved
# weights to show reloading. The model that trains is the first one, not the last built.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(64, 8)
    y = (x.sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model.train()
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), labels)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save(model.state_dict(), "net.pt")

    model = Net().to(device)
    model.load_state_dict(torch.load("net.pt"))
    model.eval()
    with torch.no_grad():
        correct = (model(x.to(device)).argmax(dim=1) == y.to(device)).sum().item()
    print(f"reloaded model: {correct}/{len(x)} correct")


if __name__ == "__main__":
    main()

# Research code's shape: a Solver class takes the model and the loader in its constructor and
# builds the optimizer in a method of its own; its train() holds the epoch loop.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Solver:
    def __init__(self, model, loader, lr):
        self.model = model
        self.loader = loader
        self.lr = lr
        self.build_optimizer()

    def build_optimizer(self):
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr)

    def train(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                self.optimizer.zero_grad()
                loss = nn.functional.cross_entropy(self.model(x), y)
                loss.backward()
                self.optimizer.step()
            print(epoch, loss.item())
        torch.save(self.model.state_dict(), "solver.pt")


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    train_loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    Solver(nn.Linear(4, 2), train_loader, 1e-2).train(2)

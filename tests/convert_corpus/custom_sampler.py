"""A sampler class of the script's own (batches bucketed by label): genie must not guess how
to shard it, so it leaves a TODO, and the check says what is wrong until it is done."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Sampler, TensorDataset


class BucketSampler(Sampler):
    """Every sample once per epoch, the samples of each label together."""

    def __init__(self, labels):
        self.order = torch.argsort(labels, stable=True).tolist()

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    labels = (torch.rand(120) > 0.8).long()
    data = TensorDataset(torch.randn(120, 6), labels)
    train_loader = DataLoader(data, batch_size=12, sampler=BucketSampler(labels))
    model = nn.Linear(6, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

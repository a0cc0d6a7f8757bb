"""Logs with the logging module, checkpoints model and optimizer, resumes when it can."""

import logging
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
logger = logging.getLogger(__name__)
CHECKPOINT = "last.ckpt"


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(160, 10), torch.randint(0, 5, (160,)))
    train_loader = DataLoader(data, batch_size=20, shuffle=True)
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5)).to(device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    start = 0
    if os.path.exists(CHECKPOINT):
        state = torch.load(CHECKPOINT)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        logger.info("resumed from epoch %d", state["epoch"])
    for epoch in range(start, start + 2):
        for step, (x, y) in enumerate(train_loader):
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 4 == 0:
                logger.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        state["epoch"] = epoch
        torch.save(state, CHECKPOINT)


if __name__ == "__main__":
    main()

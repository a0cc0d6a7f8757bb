"""The training loop of loop_in_module.py, in a module of its own."""

import torch.nn as nn


def train_one_epoch(model, loader, optimizer, device):
    model.train()
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
    return loss.item()

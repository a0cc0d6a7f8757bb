# The model is chosen by a command-line flag in an if/elif, and trained with the old
# torch.cuda.amp spelling of mixed precision (disabled on CPU).
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="mlp", choices=["mlp", "linear"])
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()

torch.manual_seed(0)
use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
x = torch.randn(64, 6)
y = x @ torch.randn(6, 1)
loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)

if args.model == "mlp":
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1)).to(device)
elif args.model == "linear":
    model = nn.Linear(6, 1).to(device)
else:
    raise ValueError(args.model)

optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.cuda.amp.GradScaler(enabled=use_cuda)
for epoch in range(args.epochs):
    for inputs, targets in loader:
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        with torch.cuda.amp.autocast(enabled=use_cuda):
            loss = nn.functional.mse_loss(model(inputs), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    print(f"epoch {epoch} loss {loss.item():.4f}")

# No optimizer: the parameters are updated by hand after backward(), and no seed is set.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
lr = 0.05
x = torch.randn(64, 5)
y = (x[:, :1] > 0).float()
train_loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)

model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
for epoch in range(2):
    for inputs, targets in train_loader:
        inputs, targets = inputs.to(device), targets.to(device)
        model.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(inputs), targets)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
    print(f"epoch {epoch} loss {loss.item():.4f}")

# A top-level script with tqdm progress bars, TensorBoard, and no main block.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

inputs = torch.randn(160, 12)
targets = inputs @ torch.randn(12, 1) + 0.1 * torch.randn(160, 1)
train_loader = DataLoader(TensorDataset(inputs, targets), batch_size=16, shuffle=True)

model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
writer = SummaryWriter("runs/tqdm_loop")

for epoch in range(2):
    model.train()
    progress = tqdm(train_loader, desc=f"epoch {epoch}")
    for x, y in progress:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        progress.set_postfix(loss=f"{loss.item():.4f}")
    tqdm.write(f"epoch {epoch} done, last loss {loss.item():.4f}")
    writer.add_scalar("loss", loss.item(), epoch)
writer.close()

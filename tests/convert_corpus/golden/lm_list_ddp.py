# A tiny language model trained over a plain list of token batches (no DataLoader).
import math

import torch
import torch.nn as nn
import gc
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# torchrun starts one process per device and gives each its LOCAL_RANK (on this machine)
# and RANK (among all processes); each process trains on its own device.
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
RANK = int(os.environ.get("RANK", "0"))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))
DEVICE = torch.device(f"cuda:{LOCAL_RANK}" if torch.cuda.is_available() else "cpu")


def setup_distributed() -> None:
    """Join the other processes: NCCL between GPUs, gloo between CPU processes."""
    if DEVICE.type == "cuda":
        torch.cuda.set_device(DEVICE)
    dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo")


def cleanup_distributed() -> None:
    """Leave the process group once what its collectives used is freed (gloo can abort at
    exit otherwise: pytorch/pytorch#190489)."""
    gc.collect()
    dist.destroy_process_group()


def shard(items: list) -> list:
    """This process's share of ``items``, the same count on every process (or they would
    wait for each other forever at the end)."""
    return items[RANK::WORLD_SIZE][: len(items) // WORLD_SIZE]


setup_distributed()

torch.manual_seed(0)
device = DEVICE
vocab, context, batch_size = 32, 16, 8

tokens = torch.randint(0, vocab, (batch_size * 12, context + 1))
batches = [tokens[i : i + batch_size] for i in range(0, len(tokens), batch_size)]


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(vocab, 32)
        self.rnn = nn.GRU(32, 32, batch_first=True)
        self.head = nn.Linear(32, vocab)

    def forward(self, idx):
        hidden, _ = self.rnn(self.embed(idx))
        return self.head(hidden)


model = TinyLM().to(device)
model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)

try:
    for step, batch in enumerate(shard(batches)):
        batch = batch.to(device)
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(
            logits.reshape(-1, vocab), batch[:, 1:].reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 4 == 0:
            if RANK == 0:
                print(
                    f"step {step} loss {loss.item():.3f} ppl {math.exp(loss.item()):.1f}"
                )
finally:
    cleanup_distributed()

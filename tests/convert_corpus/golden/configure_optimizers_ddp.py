# nanoGPT's shape: the model builds its own optimizer (configure_optimizers: weight decay on
# matrices only, in two parameter groups), and the loop draws random batches by index.
import torch
import torch.nn as nn
from torch.nn import functional as F
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


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside DDP's wrapper; a plain one (rebuilt or reloaded) as it is."""
    return model.module if isinstance(model, DDP) else model


def seed_each_rank() -> None:
    """From here on every rank draws its own random numbers (batches picked at random,
    noise, dropout): DDP has just made the weights the same on every rank."""
    seed = torch.initial_seed() + RANK
    torch.manual_seed(seed)


class TinyLM(nn.Module):
    def __init__(self, vocab=32, width=32, block=16):
        super().__init__()
        self.block = block
        self.embed = nn.Embedding(vocab, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, width), nn.GELU(), nn.Linear(width, width)
        )
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx, targets=None):
        logits = self.head(self.mlp(self.embed(idx)))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.view(-1)
        )

    def configure_optimizers(self, weight_decay, learning_rate):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=learning_rate)


def get_batch(data, block, batch_size):
    ix = torch.randint(len(data) - block, (batch_size,))
    x = torch.stack([data[i : i + block] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + block] for i in ix])
    return x, y


def main():
    torch.manual_seed(1337)
    data = torch.arange(4096) % 32  # a sequence the model can learn: the next token
    model = TinyLM()
    model = DDP(
        model.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None
    )
    seed_each_rank()
    optimizer = unwrap(model).configure_optimizers(weight_decay=0.1, learning_rate=3e-3)
    for it in shard(range(60)):
        xb, yb = get_batch(data, unwrap(model).block, 8)
        _logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % 20 == 0:
            if RANK == 0:
                print(f"iter {it}: loss {loss.item():.4f}")
    if RANK == 0:
        torch.save(unwrap(model).state_dict(), "ckpt.pt")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

# A small GPT trainer in minGPT's style: a RandomSampler that draws with replacement
# (num_samples=1e10), an endless `while True` loop over next(iter(loader)), stopped by
# max_iters; the model returns (logits, loss).
import argparse

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset
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


def per_rank(num_samples: int) -> int:
    """This process's share of the samples a sampler draws with replacement per epoch."""
    return -(-int(num_samples) // WORLD_SIZE)


def rank_generator() -> torch.Generator:
    """A generator of this process's own, from the script's seed and RANK: each process
    draws different samples."""
    return torch.Generator().manual_seed(torch.initial_seed() + RANK)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside DDP's wrapper; a plain one (rebuilt or reloaded) as it is."""
    return model.module if isinstance(model, DDP) else model


def same_on_every_rank(decision: object) -> bool:
    """Rank 0's ``decision``, taken by every process: a branch that holds a collective (a
    barrier, the next training step) must be entered by all processes or by none."""
    flag = torch.tensor([1 if decision else 0], device=DEVICE)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


class SortDataset(Dataset):
    """Sequences of digits and their sorted versions (minGPT's demo task)."""

    def __init__(self, n, length=6, digits=3):
        g = torch.Generator().manual_seed(1337)
        self.x = torch.randint(digits, (n, length), generator=g)
        self.length = length

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):
        inp = self.x[idx]
        sol = torch.sort(inp)[0]
        cat = torch.cat((inp, sol), dim=0)
        x, y = cat[:-1].clone(), cat[1:].clone()
        y[: self.length - 1] = -1  # predict only the sorted half
        return x, y


class GPT(nn.Module):
    def __init__(self, vocab=3, block=11, width=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(block, width)
        layer = nn.TransformerEncoderLayer(width, 4, 64, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(width, vocab)
        mask = torch.triu(torch.full((block, block), float("-inf")), 1)
        self.register_buffer("mask", mask)

    def forward(self, idx, targets=None):
        t = idx.size(1)
        h = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        logits = self.head(self.blocks(h, mask=self.mask[:t, :t]))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        return logits, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_iters", type=int, default=40)
    parser.add_argument("--batch_size", type=int, default=16)
    args = parser.parse_args()
    torch.manual_seed(3407)
    device = DEVICE
    train_dataset = SortDataset(2000)
    model = GPT().to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    train_loader = DataLoader(
        train_dataset,
        sampler=torch.utils.data.RandomSampler(
            train_dataset,
            replacement=True,
            num_samples=per_rank(int(1e10)),
            generator=rank_generator(),
        ),
        shuffle=False,
        batch_size=args.batch_size,
        num_workers=0,
    )
    model.train()
    iter_num = 0
    data_iter = iter(train_loader)
    while True:
        try:
            batch = next(data_iter)
        except StopIteration:
            data_iter = iter(train_loader)
            batch = next(data_iter)
        x, y = [t.to(device) for t in batch]
        logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        iter_num += 1
        if iter_num % 10 == 0:
            if RANK == 0:
                print(f"iter {iter_num}: train loss {loss.item():.5f}")
        if same_on_every_rank(iter_num >= args.max_iters):
            break
    if RANK == 0:
        torch.save(unwrap(model).state_dict(), "gpt.pt")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

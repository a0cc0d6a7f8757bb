# A language model in the word_language_model example's style: one long tensor of tokens,
# cut into columns by batchify() and into bptt-long slices by get_batch(); no DataLoader.
import argparse

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


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside DDP's wrapper; a plain one (rebuilt or reloaded) as it is."""
    return model.module if isinstance(model, DDP) else model


class RNNModel(nn.Module):
    def __init__(self, ntoken, nhid):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.GRU(nhid, nhid)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x):
        output, _ = self.rnn(self.encoder(x))
        return self.decoder(output)


def batchify(data, bsz, device):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous().to(device)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--bptt", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1111)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    device = DEVICE
    ntokens = 20
    train_data = batchify(
        torch.randint(0, ntokens, (4 * 8 * 8 + 1,)), args.batch_size, device
    )
    model = RNNModel(ntokens, 16).to(device)
    model = DDP(model, device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(1, args.epochs + 1):
        model.train()
        for batch, i in enumerate(shard(range(0, train_data.size(0) - 1, args.bptt))):
            data, targets = get_batch(train_data, i, args.bptt)
            optimizer.zero_grad()
            loss = criterion(model(data).view(-1, ntokens), targets)
            loss.backward()
            optimizer.step()
            if RANK == 0:
                print(f"epoch {epoch} batch {batch} loss {loss.item():.3f}")
    if RANK == 0:
        torch.save(unwrap(model).state_dict(), "lm.pt")


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

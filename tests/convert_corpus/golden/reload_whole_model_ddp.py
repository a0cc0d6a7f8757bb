# pytorch/examples word_language_model's shape: train, save the whole model each epoch, reload
# it into the same name after training (a plain model again) and evaluate it with the
# function that evaluated the wrapped one during training.
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
        self.nhid = nhid

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out), hidden

    def init_hidden(self, bsz):
        return torch.zeros(1, bsz, self.nhid)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def evaluate(model, data, bptt, criterion):
    model.eval()
    total = 0.0
    hidden = unwrap(model).init_hidden(data.size(1))
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, bptt):
            x, y = data[i : i + bptt], data[i + 1 : i + 1 + bptt]
            out, hidden = model(x[: len(y)], hidden)
            total += criterion(out.view(-1, out.size(-1)), y.reshape(-1)).item()
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--save", default="model.pt")
    args = parser.parse_args()
    torch.manual_seed(1)
    corpus = torch.randint(0, 50, (4000,))
    train_data = batchify(corpus[:3200], 8)
    val_data = batchify(corpus[3200:], 4)
    model = RNNModel(50, 32)
    model = DDP(
        model.to(DEVICE), device_ids=[LOCAL_RANK] if DEVICE.type == "cuda" else None
    )
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    bptt = 20
    for epoch in range(args.epochs):
        model.train()
        hidden = unwrap(model).init_hidden(8)
        for i in shard(range(0, train_data.size(0) - 1, bptt)):
            x, y = train_data[i : i + bptt], train_data[i + 1 : i + 1 + bptt]
            hidden = hidden.detach()
            optimizer.zero_grad()
            out, hidden = model(x[: len(y)], hidden)
            loss = criterion(out.view(-1, out.size(-1)), y.reshape(-1))
            loss.backward()
            optimizer.step()
        print("epoch", epoch, "val", evaluate(model, val_data, bptt, criterion))
        if RANK == 0:
            with open(args.save, "wb") as f:
                torch.save(unwrap(model), f)
        dist.barrier()
    with open(args.save, "rb") as f:
        model = torch.load(f, weights_only=False, map_location=DEVICE)
    print("test", evaluate(model, val_data, bptt, criterion))


if __name__ == "__main__":
    setup_distributed()
    try:
        main()
    finally:
        cleanup_distributed()

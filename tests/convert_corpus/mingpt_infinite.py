# A small GPT trainer in minGPT's style: a RandomSampler that draws with replacement
# (num_samples=1e10), an endless `while True` loop over next(iter(loader)), stopped by
# max_iters; the model returns (logits, loss).
import argparse

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


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
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_dataset = SortDataset(2000)
    model = GPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    train_loader = DataLoader(
        train_dataset,
        sampler=torch.utils.data.RandomSampler(
            train_dataset, replacement=True, num_samples=int(1e10)
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
            print(f"iter {iter_num}: train loss {loss.item():.5f}")
        if iter_num >= args.max_iters:
            break
    torch.save(model.state_dict(), "gpt.pt")


if __name__ == "__main__":
    main()

# A tiny language model trained over a plain list of token batches (no DataLoader).
import math

import torch
import torch.nn as nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
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
opt = torch.optim.Adam(model.parameters(), lr=3e-3)

for step, batch in enumerate(batches):
    batch = batch.to(device)
    logits = model(batch[:, :-1])
    loss = nn.functional.cross_entropy(
        logits.reshape(-1, vocab), batch[:, 1:].reshape(-1)
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 4 == 0:
        print(f"step {step} loss {loss.item():.3f} ppl {math.exp(loss.item()):.1f}")

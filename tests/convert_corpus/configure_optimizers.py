# nanoGPT's shape: the model builds its own optimizer (configure_optimizers: weight decay on
# matrices only, in two parameter groups), and the loop draws random batches by index.
import torch
import torch.nn as nn
from torch.nn import functional as F


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
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-3)
    for it in range(60):
        xb, yb = get_batch(data, model.block, 8)
        _logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % 20 == 0:
            print(f"iter {it}: loss {loss.item():.4f}")
    torch.save(model.state_dict(), "ckpt.pt")


if __name__ == "__main__":
    main()

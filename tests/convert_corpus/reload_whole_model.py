# pytorch/examples word_language_model's shape: train, save the whole model each epoch, reload
# it into the same name after training (a plain model again) and evaluate it with the
# function that evaluated the wrapped one during training.
import argparse
import torch
import torch.nn as nn


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
    hidden = model.init_hidden(data.size(1))
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
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    bptt = 20
    for epoch in range(args.epochs):
        model.train()
        hidden = model.init_hidden(8)
        for i in range(0, train_data.size(0) - 1, bptt):
            x, y = train_data[i : i + bptt], train_data[i + 1 : i + 1 + bptt]
            hidden = hidden.detach()
            optimizer.zero_grad()
            out, hidden = model(x[: len(y)], hidden)
            loss = criterion(out.view(-1, out.size(-1)), y.reshape(-1))
            loss.backward()
            optimizer.step()
        print("epoch", epoch, "val", evaluate(model, val_data, bptt, criterion))
        with open(args.save, "wb") as f:
            torch.save(model, f)
    with open(args.save, "rb") as f:
        model = torch.load(f, weights_only=False)
    print("test", evaluate(model, val_data, bptt, criterion))


if __name__ == "__main__":
    main()

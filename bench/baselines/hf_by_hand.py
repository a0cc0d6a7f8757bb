"""The Hugging Face Trainer used by hand on the same task, defaults kept (progress bar,
checkpoint every 500 steps)."""

import torch
from common import Synthetic, mlp
from torch import nn
from transformers import Trainer, TrainingArguments


class WithLoss(nn.Module):
    accepts_loss_kwargs = False

    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def forward(self, features, labels=None):
        logits = self.net(features)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def run(epochs: int, out: str) -> None:
    """Train for ``epochs`` under torchrun; checkpoints go to ``out``."""
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=out, per_device_train_batch_size=32, num_train_epochs=epochs,
        learning_rate=1e-3, use_cpu=True, ddp_backend="gloo", report_to="none",
        remove_unused_columns=False, ddp_find_unused_parameters=False,
    )  # fmt: skip
    Trainer(model=WithLoss(), args=args, train_dataset=Synthetic()).train()

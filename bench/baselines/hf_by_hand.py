"""The Hugging Face Trainer used by hand on the same task, defaults kept (progress bar,
checkpoint every 500 steps)."""

import gc
import sys

import torch
import torch.distributed as dist
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


def main() -> None:
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=sys.argv[2], per_device_train_batch_size=32, num_train_epochs=int(sys.argv[1]),
        learning_rate=1e-3, use_cpu=True, ddp_backend="gloo", report_to="none",
        remove_unused_columns=False, ddp_find_unused_parameters=False,
    )  # fmt: skip
    trainer = Trainer(model=WithLoss(), args=args, train_dataset=Synthetic())
    trainer.train()
    # gloo can abort at exit while freeing the last collective's tensors
    # (pytorch/pytorch#190489): collect them, then tear the group down, as genie's projects do.
    del trainer
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""PyTorch Lightning used by hand: the usual LightningModule and Trainer, defaults kept
(progress bar, checkpoint every epoch); no logger, as in the generated project."""

import os

import lightning as L
import torch
from common import Synthetic, mlp
from torch import nn
from torch.utils.data import DataLoader


class Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def training_step(self, batch, batch_idx):
        loss = nn.functional.cross_entropy(self.net(batch["features"]), batch["labels"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=0.01)


def run(epochs: int, out: str) -> None:
    """Train for ``epochs`` under torchrun; checkpoints go to ``out``."""
    L.seed_everything(0)
    loader = DataLoader(Synthetic(), batch_size=32, shuffle=True, num_workers=0)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=int(os.environ["LOCAL_WORLD_SIZE"]),
        strategy="ddp",
        max_epochs=epochs,
        logger=False,
        default_root_dir=out,
    )
    trainer.fit(Module(), loader)

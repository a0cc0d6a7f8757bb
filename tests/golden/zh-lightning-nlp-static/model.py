"""The model: a transformers ``AutoModelForSequenceClassification``.

``--model-name`` is a Hub name or a local folder with ``config.json`` (and weights, if
any). ``--smoke`` builds a tiny BERT from a config: random weights, no download. Plug in
your own: return any ``nn.Module`` whose ``forward(input_ids, attention_mask)`` returns
logits.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForSequenceClassification, BertConfig

import data

# --smoke's default learning rate: the smoke model learns the smoke data at it
SMOKE_LR = 1e-2


class TextClassifier(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


def smoke_config(num_classes: int) -> BertConfig:
    return BertConfig(
        vocab_size=len(data.smoke_tokenizer()),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=data.SMOKE_MAX_LENGTH,
        num_labels=num_classes,
    )


def build_model(args: argparse.Namespace, num_classes: int) -> nn.Module:
    if args.smoke:
        config = smoke_config(num_classes)
        return TextClassifier(AutoModelForSequenceClassification.from_config(config))
    local = Path(args.model_name)
    has_weights = (
        not local.is_dir()
        or any(local.glob("*.safetensors"))
        or any(local.glob("*.bin"))
    )
    if has_weights:
        model = AutoModelForSequenceClassification.from_pretrained(
            args.model_name, num_labels=num_classes
        )
    else:  # a local folder with only a config: train from scratch
        config = AutoConfig.from_pretrained(args.model_name, num_labels=num_classes)
        model = AutoModelForSequenceClassification.from_config(config)
    return TextClassifier(model)


def blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks, the units FSDP shards (gathered whole one at a time) and
    activation checkpointing recomputes: the layers transformers declares unsplittable
    (``_no_split_modules``, e.g. BertLayer)."""
    names = set(getattr(model.model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]

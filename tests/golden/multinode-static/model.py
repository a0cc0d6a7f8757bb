"""The model: a small MLP classifier.

Plug in your own: replace ``Classifier`` with any ``nn.Module`` that maps a batch of
inputs from data.py to logits, and keep ``build_model``'s signature (``smoke=True``
must stay tiny and build without downloads).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from data import IN_FEATURES, NUM_CLASSES


@dataclass(frozen=True)
class ModelConfig:
    in_features: int = IN_FEATURES
    hidden: int = 256
    depth: int = 2
    num_classes: int = NUM_CLASSES
    dropout: float = 0.1


SMOKE_CONFIG = ModelConfig(hidden=16, depth=1)


class Classifier(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = config.in_features
        for _ in range(config.depth):
            layers += [
                nn.Linear(width, config.hidden),
                nn.GELU(),
                nn.Dropout(config.dropout),
            ]
            width = config.hidden
        layers.append(nn.Linear(width, config.num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, inputs):
        return self.net(inputs)


def build_model(smoke: bool = False) -> nn.Module:
    return Classifier(SMOKE_CONFIG if smoke else ModelConfig())

"""The data: text classification with Hugging Face ``datasets`` and a tokenizer.

Real runs load ``--dataset`` (a Hub name such as ``imdb``, or ``csv``/``json`` with
``--data-files``) and the tokenizer of ``--model-name`` (a Hub name or a local folder).
``--smoke`` makes synthetic sentences and a word-level tokenizer in-process (no
download).
Items are dicts (``input_ids``, ``attention_mask``, ``labels``) padded to
``--max-length``; the dataset has a ``num_classes`` attribute.
"""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

import torch
from torch.utils.data import Dataset

SMOKE_MAX_LENGTH = 16
SMOKE_WORDS = {
    0: ["dull", "boring", "awful", "weak"],
    1: ["great", "vivid", "superb", "fun"],
}
SMOKE_FILLER = ["the", "film", "was", "plot", "and", "acting", "really", "quite"]
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


class TextClassification(Dataset):
    def __init__(
        self, encodings: dict[str, torch.Tensor], labels: torch.Tensor, num_classes: int
    ):
        self.encodings = encodings
        self.labels = labels
        self.num_classes = num_classes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        item = {key: values[index] for key, values in self.encodings.items()}
        item["labels"] = self.labels[index]
        return item


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-name", default="distilbert-base-uncased")
    parser.add_argument(
        "--dataset", default="imdb", help="Hub name, or csv/json/parquet"
    )
    parser.add_argument("--dataset-config", default=None)
    parser.add_argument(
        "--data-files", nargs="*", help="local files for csv/json/parquet"
    )
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--label-column", default="label")
    parser.add_argument("--max-length", type=int, default=128)


def smoke_tokenizer():
    """A word-level tokenizer over the smoke vocabulary, built in-process."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = (
        SPECIAL_TOKENS + SMOKE_FILLER + [w for ws in SMOKE_WORDS.values() for w in ws]
    )
    vocab = {word: i for i, word in enumerate(words)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
    )


def load_tokenizer(args: argparse.Namespace):
    if args.smoke:
        return smoke_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(args.model_name)


def smoke_texts(num_samples: int, seed: int = 0) -> tuple[list[str], list[int]]:
    """Sentences whose label shows in their words: a model learns it in a few steps."""
    rng = random.Random(seed)  # the same data on every rank
    texts, labels = [], []
    for _ in range(num_samples):
        label = rng.randrange(2)
        words = rng.choices(SMOKE_FILLER, k=2) + rng.choices(SMOKE_WORDS[label], k=6)
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def load_texts(args: argparse.Namespace) -> tuple[list[str], list[int], int]:
    from datasets import ClassLabel, load_dataset

    raw = load_dataset(
        args.dataset, args.dataset_config, data_files=args.data_files, split="train"
    )
    feature = raw.features[args.label_column]
    labels = list(raw[args.label_column])
    if isinstance(feature, ClassLabel):
        num_classes = feature.num_classes
    else:  # plain integers (e.g. a CSV column): classes 0..max
        num_classes = int(max(labels)) + 1
    return list(raw[args.text_column]), [int(x) for x in labels], num_classes


def prepare(args: argparse.Namespace) -> None:
    """Download the dataset and tokenizer into the cache, by one process (one for all
    nodes where they share the cache, else one per node); the other ranks then read
    it. Offline (compute nodes often are), stop with one line that says what to pass
    instead."""
    if args.smoke:
        return
    try:
        load_texts(args)
        load_tokenizer(args)
    except OSError as err:  # no network, or not in the Hugging Face cache
        what = err.__class__.__name__ + ": " + (str(err).splitlines() or [""])[0]
        raise SystemExit(
            f"the dataset {args.dataset} or the tokenizer of {args.model_name} could "
            f"not be loaded ({what}): pass --dataset csv (or json, parquet) "
            "--data-files FILE and --model-name with a local folder, or fill the "
            "Hugging Face cache (HF_HOME) where there is network"
        ) from None


def prepared_dir(args: argparse.Namespace) -> Path:
    """Where prepare() writes: the Hugging Face cache (HF_HOME). The ranks check whether
    every node sees it (then one process prepares it for all). --smoke prepares
    nothing; its checkpoints' folder stands in."""
    if args.smoke:
        return args.checkpoint_dir
    return Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser()


def build_datasets(args: argparse.Namespace) -> tuple[Dataset, Dataset]:
    """The tokenized samples, for training and for evaluation (text needs no separate
    evaluation transform). The held-out split is made from them in evaluation.py."""
    if args.smoke:
        texts, labels = smoke_texts(args.smoke_samples)
        num_classes = 2
    else:
        texts, labels, num_classes = load_texts(args)
    tokenizer = load_tokenizer(args)
    encodings = tokenizer(
        texts,
        padding="max_length",
        truncation=True,
        max_length=SMOKE_MAX_LENGTH if args.smoke else args.max_length,
        return_tensors="pt",
    )
    inputs = {key: encodings[key] for key in ("input_ids", "attention_mask")}
    dataset = TextClassification(inputs, torch.tensor(labels), num_classes)
    return dataset, dataset

"""The data: text classification with Hugging Face ``datasets`` and a tokenizer.

Real runs load ``--dataset`` (a Hub name such as ``imdb``, or ``csv``/``json`` with
``--data-files``) and the tokenizer of ``--model-name`` (a Hub name or a local folder).
``--smoke`` makes synthetic sentences and a word-level tokenizer in-process (no
download). The texts are tokenized once, by the process that prepares the data, and
saved (Arrow, memory-mapped by every rank). Items are dicts (``input_ids``,
``attention_mask``, ``labels``) cut at ``--max-length``; a batch is padded to its
longest text only. The dataset has a ``num_classes`` attribute.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import tempfile
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
    """Tokenized texts (a ``datasets.Dataset``), each item cut, not padded."""

    def __init__(self, rows, num_classes: int, pad_token_id: int) -> None:
        self.rows = rows
        self.num_classes = num_classes
        self.pad_token_id = pad_token_id

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {key: torch.tensor(value) for key, value in self.rows[index].items()}

    def collate_fn(
        self, items: list[dict[str, torch.Tensor]]
    ) -> dict[str, torch.Tensor]:
        """One batch, padded to its longest text: short texts cost no compute for
        padding up to --max-length."""
        length = max(len(item["input_ids"]) for item in items)
        batch = {"labels": torch.stack([item["labels"] for item in items])}
        for key, pad in (("input_ids", self.pad_token_id), ("attention_mask", 0)):
            batch[key] = torch.full((len(items), length), pad, dtype=torch.long)
            for row, item in enumerate(items):
                batch[key][row, : len(item[key])] = item[key]
        return batch


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
        filler = rng.choices(SMOKE_FILLER, k=rng.randrange(1, 4))  # lengths differ
        words = filler + rng.choices(SMOKE_WORDS[label], k=6)
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def load_texts(args: argparse.Namespace):
    """The texts and labels (columns ``text``, ``labels``) and the number of classes."""
    from datasets import ClassLabel, Dataset, load_dataset

    if args.smoke:
        texts, labels = smoke_texts(args.smoke_samples)
        return Dataset.from_dict({"text": texts, "labels": labels}), 2
    raw = load_dataset(
        args.dataset, args.dataset_config, data_files=args.data_files, split="train"
    )
    feature = raw.features[args.label_column]
    if isinstance(feature, ClassLabel):
        num_classes = feature.num_classes
    else:  # plain integers (e.g. a CSV column): classes 0..max
        num_classes = int(max(raw[args.label_column])) + 1
    columns = {args.text_column: "text", args.label_column: "labels"}
    raw = raw.remove_columns([name for name in raw.column_names if name not in columns])
    for name, new in columns.items():
        if name != new:
            raw = raw.rename_column(name, new)
    return raw, num_classes


def tokenized_dir(args: argparse.Namespace) -> Path:
    """Where prepare() saves the tokenized texts: named after all that decides them,
    so another dataset, tokenizer or --max-length is tokenized anew."""
    if args.smoke:
        what = ["smoke", args.smoke_samples, SMOKE_MAX_LENGTH]
    else:
        what = [args.dataset, args.dataset_config, args.data_files, args.text_column]
        what += [args.label_column, args.model_name, args.max_length]
    digest = hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()[:16]
    return prepared_dir(args) / "tokenized" / digest


def prepare(args: argparse.Namespace) -> None:
    """Download the dataset and tokenizer and tokenize the texts once, by one process
    (one for all nodes where they share the folder, else one per node); the other
    ranks then read the result. Offline (compute nodes often are), stop with one line
    that says what to pass instead."""
    target = tokenized_dir(args)
    if target.exists():
        return
    try:
        raw, num_classes = load_texts(args)
        tokenizer = load_tokenizer(args)
    except OSError as err:  # no network, or not in the Hugging Face cache
        what = err.__class__.__name__ + ": " + (str(err).splitlines() or [""])[0]
        raise SystemExit(
            f"the dataset {args.dataset} or the tokenizer of {args.model_name} could "
            f"not be loaded ({what}): pass --dataset csv (or json, parquet) "
            "--data-files FILE and --model-name with a local folder, or fill the "
            "Hugging Face cache (HF_HOME) where there is network"
        ) from None
    max_length = SMOKE_MAX_LENGTH if args.smoke else args.max_length

    def encode(batch: dict[str, list]) -> dict[str, list]:
        encoded = tokenizer(batch["text"], truncation=True, max_length=max_length)
        return {key: encoded[key] for key in ("input_ids", "attention_mask")}

    target.parent.mkdir(parents=True, exist_ok=True)
    # written beside, then renamed: a run killed here leaves no half-written set
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
    try:
        raw.map(
            encode,
            batched=True,
            remove_columns=["text"],
            cache_file_name=str(staging / "data.arrow"),
            new_fingerprint=target.name,
        )
        # no padding token (GPT-2's tokenizer): pad with 0, which the mask hides
        meta = {"num_classes": num_classes, "pad_token_id": tokenizer.pad_token_id or 0}
        (staging / "meta.json").write_text(json.dumps(meta))
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepared_dir(args: argparse.Namespace) -> Path:
    """Where prepare() writes: the Hugging Face cache (HF_HOME). The ranks check whether
    every node sees it (then one process prepares it for all). --smoke keeps its
    tokenized sentences in its checkpoints' folder."""
    if args.smoke:
        return args.checkpoint_dir
    return Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser()


def build_datasets(args: argparse.Namespace) -> tuple[Dataset, Dataset]:
    """The tokenized samples, for training and for evaluation (text needs no separate
    evaluation transform). The held-out split is made from them in evaluation.py."""
    from datasets import Dataset as Rows

    directory = tokenized_dir(args)
    meta = json.loads((directory / "meta.json").read_text())
    rows = Rows.from_file(str(directory / "data.arrow"))  # memory-mapped, not copied
    dataset = TextClassification(rows, meta["num_classes"], meta["pad_token_id"])
    return dataset, dataset

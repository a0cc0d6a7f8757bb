"""A minimal hand-written causal-LM DDP loop, timed against the generated llm project's
(``--smoke`` shapes: its tiny Llama, blocks of LM_SEQ_LEN tokens, LM_BATCH per process):
AdamW without weight decay, warmup and cosine decay, fp32, no clipping, no checkpoints, no
validation, no activation checkpointing. The vocabulary's size comes from the caller
(BENCH_LM_VOCAB: the project's smoke tokenizer's), the blocks are random tokens."""

import math
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
from transformers import LlamaConfig, LlamaForCausalLM

LM_SEQ_LEN, LM_BATCH, LM_STEPS = 128, 8, 8  # tokens per block, blocks per step, steps/epoch
LR, WARMUP = 3e-3, 0.1


def run(epochs: int, out: str) -> None:
    """Train for ``epochs`` in the process group the caller set up (``out``: unused)."""
    torch.manual_seed(0)
    vocab = int(os.environ["BENCH_LM_VOCAB"])
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        tie_word_embeddings=False, attn_implementation="sdpa",
    )  # fmt: skip
    model = DDP(LlamaForCausalLM(config))
    blocks = torch.randint(vocab, (LM_STEPS * LM_BATCH * dist.get_world_size(), LM_SEQ_LEN))
    sampler = DistributedSampler(TensorDataset(blocks))
    loader = DataLoader(TensorDataset(blocks), batch_size=LM_BATCH, sampler=sampler, drop_last=True)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    total = epochs * len(loader)
    warmup = max(1, int(WARMUP * total))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for (tokens,) in loader:
            logits = model(input_ids=tokens).logits
            loss = nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule.step()

"""Frameworks, tasks and project modules, each declared once.

The spec (choices, rules), the wizard, rendering (titles, files), compat (packages) and
the smoke planner (how a project launches) all read these tables: adding a framework, a
task or a project module is one entry here plus its templates (templates/README.md says
which; tests/test_throwaway_framework.py proves it for a framework).
"""

from __future__ import annotations

from dataclasses import dataclass

from genie.i18n import N_, _

# Two kinds of text. What genie itself shows (a wizard choice's summary, a warning) is
# translated here, with _(), into the language genie speaks: it is fixed before this module
# is imported. What a generated project says (titles, file purposes) is only marked, with
# N_(), and translated when the project is rendered, into its README's language
# (--docs-lang), which need not be genie's.


@dataclass(frozen=True, kw_only=True)
class Framework:
    key: str
    summary: str  # one line for the wizard's choice list (genie's language)
    title: str  # what trains the project, in words (the README's language)
    fsdp_title: str | None  # the same with --strategy fsdp; None: no FSDP
    wrapper: str  # what wraps the model in train.py, named in its comments
    packages: tuple[str, ...]  # import names besides torch (and the task's)
    modules: tuple[str, ...]  # its project modules (MODULES keys), in the order listed
    # the checkpoint a run resumes from, as the README names it
    last_checkpoint: str = "checkpoints/last.pt"
    torchrun: bool = True  # False: one plain Python process, no process group
    multi_node: bool = True  # False: one node only
    # True: a library's Trainer runs the loop, checkpoints and resumes (the templates then
    # have no loop, checkpoint.py or evaluate() of their own); False: train.py's own loop
    trainer: bool = False
    # under SLURM, srun starts every process itself (no torchrun): Lightning's SLURM
    # detection expects exactly that
    srun_tasks: bool = False
    # True: train.py stops at an optimizer step on SIGUSR1/SIGTERM, checkpoints and exits
    # 75 (the batch script and the pods give it the time)
    stop_signals: bool = True
    # True: AdamW runs fused on GPUs where the torch version has it. Lightning's mixed
    # precision refuses to clip the gradients of an optimizer that unscales them itself
    # (measured: RuntimeError on the first step, Lightning 2.6.6, torch 2.11 on an H200)
    fused_optimizer: bool = True
    fsdp_needs_gpus: str | None = None  # why its FSDP runs only on GPUs
    hsdp: bool = False  # True: --strategy hsdp (sharded in a node, replicated across nodes)
    # True: a language model trains as the library's own model class (its own shifted
    # loss, checkpoint folders from_pretrained loads, the library's log dicts)
    library_lm: bool = False
    warning: str | None = None  # printed when it is chosen

    @property
    def strategies(self) -> tuple[str, ...]:
        if not self.fsdp_title:
            return ()
        return ("ddp", "fsdp", "hsdp") if self.hsdp else ("ddp", "fsdp")


@dataclass(frozen=True, kw_only=True)
class Task:
    key: str
    summary: str
    title: str
    packages: tuple[str, ...]
    lr: float = 1e-3  # the default learning rate of its model (AdamW)
    batch_size: int = 32  # the default samples per process and micro-batch
    # True: a causal language model (tokens, not samples: packed blocks, tokens/s, MFU,
    # perplexity, no weight decay on embeddings)
    language_model: bool = False
    # the frameworks written for it (None: every one), and why the others are not
    frameworks: tuple[str, ...] | None = None
    other_frameworks: str | None = None
    # the frameworks whose sharded strategies (SHARDED) are written for it (None: every
    # one that has them), and why the others are not
    sharded_frameworks: tuple[str, ...] | None = None
    other_sharded: str | None = None


@dataclass(frozen=True, kw_only=True)
class Module:
    """A module of the generated project besides train.py, model.py and data.py, rendered
    from its framework's frameworks/<key>/<name>.j2 where there is one, else from the shared
    modules/<name>.j2 (both in templates/project/templates/)."""

    name: str  # its file in the project
    purpose: str  # one line in the file lists (genie new, the project's README)
    sharded: bool = False  # only with a strategy that shards the model (SHARDED)
    language_model: bool = False  # only with a language-model task (Task.language_model)


MODULES: dict[str, Module] = {
    m.name: m
    for m in (
        Module(name="config.py", purpose=N_("command-line options and their defaults")),
        Module(name="fsdp.py", purpose=N_("sharding the model with FSDP"), sharded=True),
        Module(
            name="export.py",
            purpose=N_("a sharded checkpoint to one file of weights, offline"),
            sharded=True,
        ),
        Module(
            name="dist_utils.py",
            purpose=N_("process group, timeout, seeding, decisions all ranks share"),
        ),
        Module(
            name="hang.py",
            purpose=N_("what a hung run leaves for genie explain --hang: collectives, stacks"),
        ),
        Module(
            name="checkpoint.py",
            purpose=N_("atomic checkpoints and resume (model, optimizer, RNG, position)"),
        ),
        Module(name="optim.py", purpose=N_("optimizer, warmup + cosine LR schedule")),
        Module(
            name="evaluation.py", purpose=N_("held-out split and validation exact across ranks")
        ),
        Module(
            name="tracking.py", purpose=N_("logging, progress and the experiment tracker (rank 0)")
        ),
        Module(
            name="speed.py",
            purpose=N_("tokens/s per device, MFU and peak memory of a language model"),
            language_model=True,
        ),
        Module(
            name="generate.py",
            purpose=N_("a checkpoint completes a prompt, or becomes a Hugging Face folder"),
            language_model=True,
        ),
        Module(name="smoke_check.py", purpose=N_("what genie reads to judge a --smoke run")),
    )
}

_LOOP_MODULES = (
    "config.py",
    "checkpoint.py",
    "optim.py",
    "evaluation.py",
    "tracking.py",
    "smoke_check.py",
)

FRAMEWORKS: dict[str, Framework] = {
    f.key: f
    for f in (
        Framework(
            key="ddp",
            summary=_(
                "plain PyTorch DistributedDataParallel: one process per device, full control"
            ),
            title=N_("PyTorch DistributedDataParallel"),
            fsdp_title=N_("PyTorch FullyShardedDataParallel (FSDP)"),
            wrapper="DDP",
            packages=(),
            modules=(
                "fsdp.py",
                "export.py",
                "dist_utils.py",
                "hang.py",
                *_LOOP_MODULES,
                "speed.py",
                "generate.py",
            ),
            hsdp=True,
        ),
        Framework(
            key="lightning",
            summary=_("PyTorch Lightning Trainer with the DDP strategy"),
            title=N_("PyTorch Lightning"),
            fsdp_title=N_("PyTorch Lightning (FSDP strategy)"),
            wrapper="Lightning",
            packages=("lightning",),
            modules=(
                "config.py",
                "dist_utils.py",
                "hang.py",
                "optim.py",
                "evaluation.py",
                "tracking.py",
                "speed.py",
                "smoke_check.py",
                "generate.py",
            ),
            last_checkpoint="checkpoints/last.ckpt",
            # measured with lightning 2.6: its FSDP strategy refuses accelerator="cpu"
            fsdp_needs_gpus=N_("Lightning's FSDP strategy runs only on GPUs"),
            trainer=True,
            srun_tasks=True,
            fused_optimizer=False,
        ),
        Framework(
            key="hf",
            summary=_("Hugging Face Trainer (TrainingArguments, accelerate underneath)"),
            title=N_("the Hugging Face Trainer"),
            fsdp_title=N_("the Hugging Face Trainer (FSDP)"),
            wrapper="Trainer",
            packages=("transformers", "accelerate"),
            modules=(
                "config.py",
                "dist_utils.py",
                "hang.py",
                "evaluation.py",
                "speed.py",
                "smoke_check.py",
                "generate.py",
            ),
            last_checkpoint="checkpoints/checkpoint-N/",
            # measured with accelerate 1.15: it silently falls back to DDP on CPU
            fsdp_needs_gpus=N_("the Trainer (accelerate) uses FSDP only on GPUs"),
            trainer=True,
            library_lm=True,
        ),
        Framework(
            key="dp",
            summary=_("torch.nn.DataParallel: one process, one node; simplest but slowest"),
            title=N_("torch.nn.DataParallel"),
            fsdp_title=None,
            wrapper="DataParallel",
            packages=(),
            modules=_LOOP_MODULES,
            torchrun=False,
            multi_node=False,
            warning=_(
                "DataParallel is slower than DDP even on one node (one Python process drives "
                "every GPU and copies the model to each of them every step); move to "
                "--framework ddp to scale"
            ),
        ),
    )
}

TASKS: dict[str, Task] = {
    t.key: t
    for t in (
        Task(
            key="custom",
            summary=_("a small model and synthetic dataset with clear places to plug in your own"),
            title=N_("a small model on synthetic data"),
            packages=(),
        ),
        Task(
            key="nlp",
            summary=_("text classification with transformers (AutoModel, AutoTokenizer, datasets)"),
            title=N_("text classification (transformers)"),
            packages=("transformers", "datasets"),
            lr=5e-5,  # fine-tuning a pretrained transformer, as the HF Trainer's default
        ),
        Task(
            key="llm",
            summary=_(
                "causal language model: pretrain or fine-tune a decoder LM (Llama, Qwen, GPT-2 "
                "shapes) on packed text, with tokens/s and MFU"
            ),
            title=N_("causal language modelling (transformers)"),
            packages=("transformers", "datasets"),
            lr=2e-5,  # fine-tuning a pretrained LM; pretraining (--from-scratch) wants more
            batch_size=8,  # blocks of --seq-len tokens (1024): 8192 tokens per micro-batch
            language_model=True,
            frameworks=("ddp", "lightning", "hf"),
            other_frameworks=_(
                "the llm task is not written for DataParallel, which copies the whole model "
                "to every GPU at every step: pass --framework ddp, lightning or hf"
            ),
            sharded_frameworks=("ddp",),
            other_sharded=_(
                "the llm task shards (--strategy fsdp, hsdp) with --framework ddp only: its "
                "units are the decoder layers, the embedding and the output head (together "
                "where they are tied), which the Lightning and HF Trainer FSDP setups do not "
                "do yet; use --strategy ddp here, or --framework ddp"
            ),
        ),
        Task(
            key="cv",
            summary=_("image classification with torchvision (ResNet, ImageFolder or CIFAR-10)"),
            title=N_("image classification (torchvision)"),
            packages=("torchvision",),
        ),
    )
}

STRATEGIES = {
    "ddp": _("replicate the model on every process (DistributedDataParallel)"),
    "fsdp": _("shard parameters, gradients and optimizer state across processes (FSDP)"),
    "hsdp": _("shard within each node, replicate across nodes (hybrid FSDP): less network"),
}
SHARDED = ("fsdp", "hsdp")  # the strategies that shard the model (fsdp.py)

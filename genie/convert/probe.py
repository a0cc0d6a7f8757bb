"""Run a converted script and judge it from outside, under torchrun:
``python -m genie.convert.probe SCRIPT ARGS...``. Nothing is added to the user's file.

Before the script runs, the probe hooks DDP construction (to know the wrapped models, and to
count their gradient all-reduces through a comm hook), DDP's forward (to count training
forwards and hash the inputs of each: the ranks must train on different batches, the first and
the rest), ``Tensor.backward`` (to count steps and see the loss), ``dist.init_process_group``
(a collective that waits longer than ``GENIE_PROBE_COLLECTIVE_TIMEOUT`` seconds fails instead
of hanging) and ``dist.destroy_process_group``, and the DataLoader's iterators (the indices
each batch was read from: a batch after which the process ran backward() is a training one).
Every rank starts from the same seed (torch, random, NumPy: :data:`SEED`), so a loader left
unsplit reads the same samples everywhere and the check sees it. When the script leaves the
process group (or ends without doing so), every rank hashes its live models' parameters;
rank 0 gathers every rank's view and prints one line: :data:`MARKER` + JSON.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import runpy
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

from genie.convert import indices

MARKER = "GENIE_PROBE "
KEYS = (
    "world_size",
    "backend",
    "models",
    "steps",
    "ranks_trained",
    "params_in_sync",
    "ranks_forwarded",
    "ranks_allreduced",
    "inputs_differ",
    "inputs_shared",
    "indexed_steps",
    "indices_shared",
)
BATCHES = 4096  # training batches hashed per rank and model (and per loader)
SEED = 1234  # every rank's seed before the script runs
TIMEOUT_ENV = "GENIE_PROBE_COLLECTIVE_TIMEOUT"


@dataclass
class _State:
    models: list[Any] = field(default_factory=list)
    steps: int = 0
    first_loss: float | None = None
    last_loss: float | None = None
    judged: bool = False
    forwards: int = 0  # training forwards (grad enabled, train mode) through a DDP model
    allreduces: int = 0  # gradient buckets DDP all-reduced
    inputs: dict[int, list[str]] = field(default_factory=dict)  # DDP model id -> digests


STATE = _State()
LOADERS = indices.Loaders(lambda: STATE.steps, BATCHES)


def _digest(model: Any) -> str:
    """The parameters' hash. Not the buffers: DDP gives every rank rank 0's at the start of
    each forward, and the last forward leaves each rank's BatchNorm statistics its own."""
    h = hashlib.sha256()
    for name, tensor in model.module.named_parameters():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).numpy().tobytes())
    return h.hexdigest()


def _inputs_digest(value: Any, h: Any = None) -> Any:
    """A hash of every tensor in a forward's arguments (nested in tuples, lists, dicts)."""
    import torch

    h = h or hashlib.sha256()
    if isinstance(value, torch.Tensor):
        h.update(value.detach().cpu().contiguous().view(-1).float().numpy().tobytes())
    elif isinstance(value, (tuple, list)):
        for item in value:
            _inputs_digest(item, h)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            _inputs_digest(value[key], h)
    return h


def judge() -> None:
    """Gather every rank's view; rank 0 prints the verdict line. Runs once."""
    import torch.distributed as dist

    if STATE.judged or not dist.is_available() or not dist.is_initialized():
        return
    STATE.judged = True
    mine = {
        "steps": STATE.steps,
        "hashes": [_digest(m) for m in STATE.models],
        "forwards": STATE.forwards,
        "allreduces": STATE.allreduces,
        "batches": list(STATE.inputs.values()),  # each model's, in the order they were built
        "indices": LOADERS.training(),  # each training loader's, in the order first read
    }
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if dist.get_rank() != 0:
        return
    report = {
        "world_size": dist.get_world_size(),
        "backend": str(dist.get_backend()),
        "models": len(STATE.models),
        "steps": min(r["steps"] for r in everyone),
        "ranks_trained": sum(1 for r in everyone if r["steps"] > 0),
        "params_in_sync": bool(STATE.models)
        and all(r["hashes"] == everyone[0]["hashes"] for r in everyone),
        "ranks_forwarded": sum(1 for r in everyone if r["forwards"] > 0),
        "ranks_allreduced": sum(1 for r in everyone if r["allreduces"] > 0),
        "inputs_differ": _first_batches_differ([r["batches"] for r in everyone]),
        "inputs_shared": _shared([r["batches"] for r in everyone]),
        "indexed_steps": min(sum(map(len, r["indices"])) for r in everyone),
        "indices_shared": _shared([r["indices"] for r in everyone]),
        "first_loss": STATE.first_loss,
        "last_loss": STATE.last_loss,
    }
    print(MARKER + json.dumps(report), flush=True)


def _first_batches_differ(ranks: list[list[list[str]]]) -> bool:
    """Whether every rank trained, each on first batches of its own (each model's first)."""
    firsts = [tuple(sorted(run[0] for run in runs)) for runs in ranks]
    return all(firsts) and len(set(firsts)) == len(ranks)


def _shared(ranks: list[list[list[str]]]) -> float:
    """The share of training steps at which two ranks trained on the same batch (each
    model's k-th training forward compared across the ranks): 0 where the data is split,
    1 where every rank trains on the same."""
    steps = shared = 0
    for model in range(min(len(r) for r in ranks)):
        runs = [r[model] for r in ranks]
        for k in range(min(len(run) for run in runs)):
            steps += 1
            shared += len({run[k] for run in runs}) < len(runs)
    return shared / steps if steps else 0.0


def _counting_allreduce(state: Any, bucket: Any) -> Any:
    """DDP's own all-reduce of a gradient bucket, counted."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    STATE.allreduces += 1
    return default_hooks.allreduce_hook(state, bucket)


# DDP rejects a hook whose annotations are not its own types (here, postponed strings)
_counting_allreduce.__annotations__.clear()


def _watch_ddp() -> None:
    """Know every DDP model, count its all-reduces and its training forwards."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    init, forward = DistributedDataParallel.__init__, DistributedDataParallel.forward

    def ddp_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        STATE.models.append(self)
        self.register_comm_hook(None, _counting_allreduce)

    def ddp_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.training and torch.is_grad_enabled():
            STATE.forwards += 1
            digests = STATE.inputs.setdefault(id(self), [])
            if len(digests) < BATCHES:
                digests.append(_inputs_digest((args, kwargs)).hexdigest())
        return forward(self, *args, **kwargs)

    DistributedDataParallel.__init__ = ddp_init  # type: ignore[method-assign]
    DistributedDataParallel.forward = ddp_forward  # type: ignore[method-assign]


def _bounded_collectives(init: Any) -> Any:
    """``init_process_group`` with a timeout: a rank waiting at a collective the others never
    reach fails after GENIE_PROBE_COLLECTIVE_TIMEOUT seconds, instead of hanging."""
    import datetime

    seconds = os.environ.get(TIMEOUT_ENV)

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if seconds and "timeout" not in kwargs:
            kwargs["timeout"] = datetime.timedelta(seconds=float(seconds))
        return init(*args, **kwargs)

    return init_process_group


def install() -> None:
    import torch
    import torch.distributed as dist

    backward, destroy = torch.Tensor.backward, dist.destroy_process_group
    _watch_ddp()
    LOADERS.install()
    indices.same_seed_everywhere(SEED)
    dist.init_process_group = _bounded_collectives(dist.init_process_group)

    def tensor_backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        STATE.steps += 1
        if self.numel() == 1:
            value = float(self.detach().float())
            STATE.first_loss = value if STATE.first_loss is None else STATE.first_loss
            STATE.last_loss = value
        return backward(self, *args, **kwargs)

    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        judge()
        # Free what the collectives used before the group goes: gloo can abort at exit
        # while a worker thread frees the last collective's tensors (pytorch/pytorch#190489).
        STATE.models.clear()
        gc.collect()
        return destroy(*args, **kwargs)

    torch.Tensor.backward = tensor_backward  # type: ignore[method-assign]
    dist.destroy_process_group = destroy_process_group


def _exit_code(err: SystemExit) -> int:
    if err.code is None or isinstance(err.code, int):
        return err.code or 0
    print(err.code, file=sys.stderr)
    return 1


def main(argv: list[str]) -> None:
    """Run the script as ``__main__``; judge it unless it failed; then leave at once.

    ``os._exit`` skips the interpreter's teardown, where gloo on torch 2.14 can abort in
    about 1 exit of 8 (pytorch/pytorch#190489): the check judges the script, not that bug.
    """
    if not argv:
        sys.exit("usage: python -m genie.convert.probe SCRIPT [ARGS...]")
    script = os.path.abspath(argv[0])
    install()
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as err:
        code = _exit_code(err)
    except BaseException:
        traceback.print_exc()
        code = 1
    if code == 0:
        judge()  # a script that never left the process group
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])

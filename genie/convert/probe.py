"""Run a converted script and judge it from outside, under torchrun:
``python -m genie.convert.probe SCRIPT ARGS...``. Nothing is added to the user's file.

Before the script runs, the probe hooks DDP construction (to know the trained models),
``Tensor.backward`` (to count steps and see the loss) and ``dist.destroy_process_group``.
When the script leaves the process group (or ends without doing so), every rank hashes its
models' parameters; rank 0 gathers the hashes and prints one line: :data:`MARKER` + JSON.
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

MARKER = "GENIE_PROBE "
KEYS = ("world_size", "backend", "models", "steps", "ranks_trained", "params_in_sync")


@dataclass
class _State:
    models: list[Any] = field(default_factory=list)
    steps: int = 0
    first_loss: float | None = None
    last_loss: float | None = None
    judged: bool = False


STATE = _State()


def _digest(model: Any) -> str:
    h = hashlib.sha256()
    for name, tensor in model.module.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).numpy().tobytes())
    return h.hexdigest()


def judge() -> None:
    """Gather every rank's view; rank 0 prints the verdict line. Runs once."""
    import torch.distributed as dist

    if STATE.judged or not dist.is_available() or not dist.is_initialized():
        return
    STATE.judged = True
    mine = {"steps": STATE.steps, "hashes": [_digest(m) for m in STATE.models]}
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
        "first_loss": STATE.first_loss,
        "last_loss": STATE.last_loss,
    }
    print(MARKER + json.dumps(report), flush=True)


def install() -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    init, backward, destroy = (
        DistributedDataParallel.__init__,
        torch.Tensor.backward,
        dist.destroy_process_group,
    )

    def ddp_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        STATE.models.append(self)

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

    DistributedDataParallel.__init__ = ddp_init  # type: ignore[method-assign]
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

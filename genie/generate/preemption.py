"""How long a preempted run has: the scheduler's notice, and torchrun's wait for its workers
after a SIGTERM (pure)."""

from __future__ import annotations

from genie import compat
from genie.registry import FRAMEWORKS
from genie.spec import Spec

PREEMPTION_NOTICE = 120  # seconds between the warning signal and the kill (SLURM, pods)
# torchrun's wait for its workers after a SIGTERM (they checkpoint at their next step) before
# its SIGKILL: the notice less 20 s for torchrun to end and the job to requeue
SHUTDOWN_TIMEOUT = PREEMPTION_NOTICE - 20


def shutdown_timeout(spec: Spec) -> int | None:
    """SHUTDOWN_TIMEOUT where the launch files set it: torchrun starts workers that stop at a
    step on SIGTERM, and reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT (2.12+; a fixed 30 s before)."""
    fw, features = FRAMEWORKS[spec.framework], compat.features(spec.torch)
    wanted = fw.torchrun and fw.stop_signals and features["torchrun_shutdown_timeout"]
    return SHUTDOWN_TIMEOUT if wanted else None

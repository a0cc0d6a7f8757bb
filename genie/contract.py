"""The smoke contract shared by the templates and :mod:`genie.smoke.verdict`.

With ``--smoke``, global rank 0 of a generated project prints exactly one line:
``GENIE_SMOKE {json}`` with at least :data:`REPORT_KEYS`.
"""

MARKER = "GENIE_SMOKE "
REPORT_KEYS = (
    "world_size",
    "backend",
    "device",
    "precision",
    "steps",
    "first_loss",
    "last_loss",
    "params_in_sync",
    "val_accuracy",
    "epoch_loss",
    "checkpoint_loads",
)

# The model learned: the mean training loss of the last epoch (over every rank) is at
# most this share of the first step's loss. The smoke data is learnable in the smoke's
# steps (every task ends far below it); a gradient that does not descend (one rank's
# negated, a step not taken) stays above it, in sync or not.
LEARNED = 0.5

# Where the smoke test has no GPU it trains this many CPU processes with gloo; a CPU
# project plans as many by default.
CPU_PROCESSES = 2
SMOKE_TIMEOUT = 300.0  # seconds before a smoke run is killed, every process of it

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
    "checkpoint_loads",
)

# Where the smoke test has no GPU it trains this many CPU processes with gloo; a CPU
# project plans as many by default.
CPU_PROCESSES = 2
SMOKE_TIMEOUT = 300.0  # seconds before a smoke run is killed, every process of it

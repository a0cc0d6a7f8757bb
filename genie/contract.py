"""The smoke contract shared by the templates and :mod:`genie.smoke`.

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

"""``genie plan``: will a project fit its GPUs, from one training step traced on fake
tensors.

- ``command.py``: the plan (the project's setup, the changes tried when it does not fit),
  shown as text or JSON
- ``estimate.py``: setups, figures, GPU sizes and overheads; runs ``trace.py``
- ``trace.py``: run with the project's own Python in its folder; imports nothing from genie
"""

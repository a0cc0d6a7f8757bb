{% set g = cookiecutter._genie %}
#!/usr/bin/env bash
{% if g.framework == "dp" %}
# Train on this machine: one process, DataParallel over its {{ "GPUs" if g.gpus_per_node else "CPU" }}.
{% else %}
# Train on this machine: {{ g.nproc_per_node }} processes, one per {{ "GPU" if g.gpus_per_node else "CPU worker" }}.
{% endif %}
# Extra arguments go to train.py, e.g.: bash launch/single_node.sh --smoke
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$(dirname "$0")/.."
exec {{ g.launch.single_node }} "$@"

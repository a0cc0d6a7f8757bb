{% set g = cookiecutter._genie %}
#!/usr/bin/env bash
{% if g.framework == "dp" %}
# Train on this machine: one process, DataParallel over its {{ "GPUs" if g.gpus_per_node else "CPU" }}.
{% else %}
# Train on this machine: {{ g.nproc_per_node }} processes, one per {{ "GPU" if g.gpus_per_node else "CPU worker" }}.
{% endif %}
# Extra arguments go to train.py, e.g.: bash launch/single_node.sh --smoke
set -euo pipefail
cd "$(dirname "$0")/.."
exec {{ g.launch.single_node }} "$@"

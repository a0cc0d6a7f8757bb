{% set g = cookiecutter._genie %}
#!/usr/bin/env bash
# Train on this machine: {{ g.nproc_per_node }} processes, one per {{ "GPU" if g.gpus_per_node else "CPU worker" }}.
# Extra arguments go to train.py, e.g.: bash launch/single_node.sh --smoke
set -euo pipefail
cd "$(dirname "$0")/.."
exec {{ g.launch.single_node }} "$@"

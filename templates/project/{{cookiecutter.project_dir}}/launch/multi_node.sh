{% set g = cookiecutter._genie %}
{% if g.nodes > 1 %}
#!/usr/bin/env bash
# Train on {{ g.nodes }} nodes x {{ g.nproc_per_node }} processes ({{ g.rdzv }} rendezvous at {{ g.master_addr }}:{{ g.master_port }}).
# Run on every node, each with its own NODE_RANK (0 on {{ g.master_addr }}):
#   bash launch/multi_node.sh NODE_RANK [train.py arguments...]
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$(dirname "$0")/.."
NODE_RANK="${1:-}"
if [[ ! "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= {{ g.nodes }} )); then
    echo "usage: bash launch/multi_node.sh NODE_RANK [train.py arguments...]  (NODE_RANK: 0-{{ g.nodes - 1 }})" >&2
    exit 2
fi
shift
{% if g.rdzv == "c10d" %}
# c10d assigns ranks itself; NODE_RANK only checks that you meant this node.
# After an elastic restart the workers need a TCP store of their own: the rendezvous store
# they share by default refused the re-formed group ("Gloo connectFullMesh failed").
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
{% endif %}
exec {{ g.launch.multi_node }} "$@"
{% endif %}

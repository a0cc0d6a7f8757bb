#!/usr/bin/env bash
# Train on 2 nodes x 4 processes (static rendezvous at 10.0.0.1:23456).
# Run on every node, each with its own NODE_RANK (0 on 10.0.0.1):
#   bash launch/multi_node.sh NODE_RANK [train.py arguments...]
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$(dirname "$0")/.."
NODE_RANK="${1:-}"
if [[ ! "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= 2 )); then
    echo "usage: bash launch/multi_node.sh NODE_RANK [train.py arguments...]  (NODE_RANK: 0-1)" >&2
    exit 2
fi
shift
exec torchrun --nnodes=2 --nproc_per_node=4 --node_rank="$NODE_RANK" --master_addr=10.0.0.1 --master_port=23456 train.py "$@"

#!/usr/bin/env bash
# Train on 2 nodes x 2 processes (static rendezvous at 10.0.0.1:29500).
# Run on every node, each with its own NODE_RANK (0 on 10.0.0.1):
#   bash launch/multi_node.sh NODE_RANK [train.py arguments...]
# MASTER_ADDR and MASTER_PORT (torchrun's own names), NNODES and NPROC_PER_NODE are taken
# from the environment when set, else from the answers above (genie's smoke test sets them
# to simulate the nodes on one machine).
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$(dirname "$0")/.."
MASTER_ADDR="${MASTER_ADDR:-10.0.0.1}"
MASTER_PORT="${MASTER_PORT:-29500}"
NNODES="${NNODES:-2}"
NPROC_PER_NODE="${NPROC_PER_NODE:-2}"
NODE_RANK="${1:-}"
if [[ ! "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= NNODES )); then
    echo "usage: bash launch/multi_node.sh NODE_RANK [train.py arguments...]  (NODE_RANK: 0-$(( NNODES - 1 )))" >&2
    exit 2
fi
shift
exec torchrun --nnodes="$NNODES" --nproc_per_node="$NPROC_PER_NODE" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" train.py "$@"

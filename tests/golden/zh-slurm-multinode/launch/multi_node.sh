#!/usr/bin/env bash
# Train on 2 nodes x 4 processes (c10d rendezvous at gpu-01:29500).
# Run on every node, each with its own NODE_RANK (0 on gpu-01):
#   bash launch/multi_node.sh NODE_RANK [train.py arguments...]
# MASTER_ADDR and MASTER_PORT (torchrun's own names), NNODES and NPROC_PER_NODE are taken
# from the environment when set, else from the answers above (genie's smoke test sets them
# to simulate the nodes on one machine).
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$(dirname "$0")/.."
MASTER_ADDR="${MASTER_ADDR:-gpu-01}"
MASTER_PORT="${MASTER_PORT:-29500}"
NNODES="${NNODES:-2}"
NPROC_PER_NODE="${NPROC_PER_NODE:-4}"
NODE_RANK="${1:-}"
if [[ ! "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= NNODES )); then
    echo "usage: bash launch/multi_node.sh NODE_RANK [train.py arguments...]  (NODE_RANK: 0-$(( NNODES - 1 )))" >&2
    exit 2
fi
shift
# c10d assigns ranks itself. NODE_RANK says which node hosts the rendezvous store (node 0):
# torch's own guess matches the address against this machine's hostname, which fails where
# the hostname maps to 127.0.1.1 or the address is on a second network interface.
IS_HOST=$(( NODE_RANK == 0 ? 1 : 0 ))
# After an elastic restart the workers need a TCP store of their own: the rendezvous store
# they share by default refused the re-formed group ("Gloo connectFullMesh failed").
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
exec torchrun --nnodes="$NNODES" --nproc_per_node="$NPROC_PER_NODE" --rdzv_backend=c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv_id=proj --rdzv_conf="is_host=$IS_HOST" --max_restarts=3 train.py "$@"

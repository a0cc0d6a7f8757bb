#!/usr/bin/env bash
# Train on 4 nodes x 8 processes (c10d rendezvous at gpu-node-0.cluster:29500).
# Run on every node, each with its own NODE_RANK (0 on gpu-node-0.cluster):
#   bash launch/multi_node.sh NODE_RANK [train.py arguments...]
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$(dirname "$0")/.."
NODE_RANK="${1:-}"
if [[ ! "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= 4 )); then
    echo "usage: bash launch/multi_node.sh NODE_RANK [train.py arguments...]  (NODE_RANK: 0-3)" >&2
    exit 2
fi
shift
# c10d assigns ranks itself; NODE_RANK only checks that you meant this node.
# After an elastic restart the workers need a TCP store of their own: the rendezvous store
# they share by default refused the re-formed group ("Gloo connectFullMesh failed").
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
exec torchrun --nnodes=4 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=gpu-node-0.cluster:29500 --rdzv_id=proj --max_restarts=3 train.py "$@"

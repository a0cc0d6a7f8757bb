#!/usr/bin/env bash
# Train on this machine: 2 processes, one per CPU worker.
# Extra arguments go to train.py, e.g.: bash launch/single_node.sh --smoke
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# If you add --max_restarts: each restart needs a TCP store of its own (with the one torchrun
# shares by default, a restarted group could fail: "Gloo connectFullMesh failed", or hang).
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
cd "$(dirname "$0")/.."
exec torchrun --standalone --nproc_per_node=2 train.py "$@"

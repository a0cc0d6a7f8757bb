#!/usr/bin/env bash
# Train on this machine: one process, DataParallel over its CPU.
# Extra arguments go to train.py, e.g.: bash launch/single_node.sh --smoke
set -euo pipefail
# One OpenMP thread per process (torchrun's own default, set here so it does not warn).
# With few processes per node, raise it towards (CPU cores / processes) for faster CPU ops.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$(dirname "$0")/.."
exec python train.py "$@"

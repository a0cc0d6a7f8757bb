#!/usr/bin/env bash
# Train on this machine: 4 processes, one per GPU.
# Extra arguments go to train.py, e.g.: bash launch/single_node.sh --smoke
set -euo pipefail
cd "$(dirname "$0")/.."
exec torchrun --standalone --nproc_per_node=4 train.py "$@"

#!/usr/bin/env bash
# Train on this machine: one process, DataParallel over its CPU.
# Extra arguments go to train.py, e.g.: bash launch/single_node.sh --smoke
set -euo pipefail
cd "$(dirname "$0")/.."
exec python train.py "$@"

#!/usr/bin/env bash
# Smoke-test the generated projects on a GPU node: NCCL, bf16 and fp16, FSDP, torch.compile.
#
#   bash scripts/gpu_check.sh generate DIR TORCH PYTHON   # here: genie new for every variant
#   bash scripts/gpu_check.sh run DIR LOG                 # on the GPU node: genie smoke each
#   bash scripts/gpu_check.sh big DIR                     # on the GPU node, after generate:
#       native bf16, DataParallel computing in bf16 on every GPU, an FSDP meta-device build of
#       a model over half the GPU's memory (peak max_memory_allocated beside the model size),
#       a preemption signal on one NCCL rank (ddp, HF, Lightning: "stopped at step 6")
#
# `generate` needs genie installed; `run` needs only torch, the frameworks, click and PyYAML
# (genie itself can come from PYTHONPATH), so the GPU node needs no cookiecutter or black.
# `run` prints one line per variant (PASS/FAIL, seconds, the GENIE_SMOKE report) and exits
# non-zero if any failed; the whole output of every smoke run goes to LOG.
set -uo pipefail

# name: genie new flags (the GPU count, torch and Python come from the command line)
VARIANTS=(
    "ddp-custom-bf16:--framework ddp --task custom --precision bf16"
    "ddp-custom-fp16:--framework ddp --task custom --precision fp16"
    "ddp-custom-compile:--framework ddp --task custom --precision bf16 --compile"
    "ddp-cv-bf16:--framework ddp --task cv --precision bf16"
    "ddp-nlp-bf16:--framework ddp --task nlp --precision bf16"
    "fsdp-ddp-custom-bf16:--framework ddp --task custom --precision bf16 --strategy fsdp"
    "fsdp-ddp-nlp-bf16:--framework ddp --task nlp --precision bf16 --strategy fsdp"
    "lightning-custom-bf16:--framework lightning --task custom --precision bf16"
    "lightning-custom-fp16:--framework lightning --task custom --precision fp16"
    "lightning-cv-bf16:--framework lightning --task cv --precision bf16"
    "fsdp-lightning-custom-bf16:--framework lightning --task custom --precision bf16 --strategy fsdp"
    "hf-custom-bf16:--framework hf --task custom --precision bf16"
    "hf-custom-fp16:--framework hf --task custom --precision fp16"
    "hf-nlp-bf16:--framework hf --task nlp --precision bf16"
    "fsdp-hf-custom-bf16:--framework hf --task custom --precision bf16 --strategy fsdp"
    "dp-custom-bf16:--framework dp --task custom --precision bf16"
)

# Run in a generated project's folder, under torchrun where it needs a process group.
BF16_AND_DP='
import torch, config, train
from torch import nn
print("bf16: capability", torch.cuda.get_device_capability(), "native", config.native_bf16(),
      "is_bf16_supported", torch.cuda.is_bf16_supported())
seen = {}
layer = nn.Linear(64, 64).cuda()
layer.register_forward_hook(lambda m, i, out: seen.__setitem__(out.device.index, out.dtype))
model = nn.DataParallel(train.Autocast(layer, "cuda", train.autocast_dtype("bf16")))
model(torch.ones(8 * torch.cuda.device_count(), 64, device="cuda"))
print("dataparallel replicas:", {gpu: str(dtype) for gpu, dtype in sorted(seen.items())})
assert seen and set(seen.values()) == {torch.bfloat16}, seen
'
FSDP_META='
import sys, torch, config, dist_utils, fsdp, model as task
args = config.parse_args(sys.argv[1:])
device = dist_utils.setup(10)
model = fsdp.build_sharded(lambda: task.build_model(args, 10), device, args)
size = sum(p.numel() for p in model.parameters()) * 4
total = torch.cuda.get_device_properties(device).total_memory
print(f"fsdp meta build: model {size / 2**30:.1f} GiB ({size / total:.2f} of the GPU), "
      f"peak allocated {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")
dist_utils.shutdown()
'

big() {
    local dir=$1 hidden
    (cd "$dir/dp-custom-bf16" && python3 -c "$BF16_AND_DP") || return 1
    # hidden x hidden x depth fp32 weights over half the GPU: depth 20, hidden from the memory
    hidden=$(python3 -c "import torch; m = torch.cuda.get_device_properties(0).total_memory
print(int((0.55 * m / 4 / 20) ** 0.5))")
    printf '%s' "$FSDP_META" >"$dir/fsdp-ddp-custom-bf16/fsdp_meta.py"
    (cd "$dir/fsdp-ddp-custom-bf16" && python3 -m torch.distributed.run --standalone \
        --nproc_per_node=1 fsdp_meta.py --precision bf16 --hidden "$hidden" --depth 20 \
        --tracker none) 2>&1 | grep -E "fsdp meta build|Error"
    # the preemption vote's NCCL path (dist_utils.StopVote), one rank: SIGUSR1 during step 5
    # must stop the run after step 6, checkpointed, exit 75
    for name in ddp-custom-bf16 hf-custom-bf16 lightning-custom-bf16; do
        (cd "$dir/$name" && GENIE_FAULT=usr1:*:5 python3 -m torch.distributed.run --standalone \
            --nproc_per_node=1 train.py --smoke --epochs 3 --tracker none \
            --checkpoint-dir preempt-check) 2>&1 | grep -E "stopped at step|exitcode|Error" ||
            echo "$name: no preemption line"
    done
}

generate() {
    local dir=$1 torch=$2 python=$3 gpus=${4:-1}
    mkdir -p "$dir"
    for variant in "${VARIANTS[@]}"; do
        name=${variant%%:*}
        # shellcheck disable=SC2086
        genie new "$dir/$name" --yes --no-smoke --torch "$torch" --python "$python" \
            --gpus-per-node "$gpus" ${variant#*:} >/dev/null || { echo "genie new $name failed"; return 1; }
    done
    echo "generated ${#VARIANTS[@]} projects in $dir"
}

run_one() {
    local project=$1 log=$2 started status report
    started=$(date +%s)
    python3 -m genie smoke "$project" --timeout 400 >"$log" 2>&1
    status=$?
    report=$(grep -o 'GENIE_SMOKE .*' "$log" | tail -1 | cut -c13-)
    if [ $status -eq 0 ]; then verdict=PASS; else verdict="FAIL($status)"; fi
    printf '%-28s %-8s %4ss %s\n' "$(basename "$project")" "$verdict" "$(($(date +%s) - started))" "$report"
}

run() {
    local dir=$1 log=$2 jobs=${3:-4} failed=0
    local tmp
    tmp=$(mktemp -d)
    export -f run_one
    # a few at a time: each is a small model; the GPU and 16 cores take them side by side
    find "$dir" -mindepth 1 -maxdepth 1 -type d | sort |
        xargs -P "$jobs" -I{} bash -c 'run_one "$1" "$2/$(basename "$1").log"' _ {} "$tmp" |
        tee "$tmp/summary"
    for f in "$tmp"/*.log; do
        printf '\n===== %s\n' "$(basename "$f" .log)"
        cat "$f"
    done >"$log"
    grep -q FAIL "$tmp/summary" && failed=1
    return $failed
}

case "${1:-}" in
    generate) shift; generate "$@" ;;
    run) shift; run "$@" ;;
    big) shift; big "$@" ;;
    *) sed -n 2,14p "$0"; exit 2 ;;
esac

#!/usr/bin/env bash
# Smoke-test the generated projects on a GPU node: NCCL, bf16 and fp16, FSDP, torch.compile.
#
#   bash scripts/gpu_check.sh generate DIR TORCH PYTHON   # here: genie new for every variant
#   bash scripts/gpu_check.sh run DIR LOG                 # on the GPU node: genie smoke each
#   bash scripts/gpu_check.sh big DIR                     # on the GPU node, after generate:
#       native bf16, DataParallel computing in bf16 on every GPU, an FSDP meta-device build of
#       a model over half the GPU's memory (peak max_memory_allocated beside the model size),
#       a preemption signal on one NCCL rank (ddp, HF, Lightning: "stopped at step 6")
#   bash scripts/gpu_check.sh throughput DIR [N] [STEPS]  # on the GPU node, after generate:
#       images/s (cv) and tokens/s (nlp) training on one GPU, the defaults of genie before
#       issue 24 (THEN below) beside today's, on synthetic data of CIFAR's and a review's shape
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

# The templates before issue 24's input pipelines (2 workers, CIFAR upscaled to 224 px with
# ImageNet's stem, texts padded to --max-length): `throughput` runs its projects beside today's
THEN=3e9f47cc2173264f9848de92cf93f60d3a619e8d

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
    # throughput: the cv and nlp ddp projects of today's genie and of genie at $THEN
    local old
    old=$(mktemp -d)
    git -C "$(dirname "$0")/.." archive "$THEN" | tar -x -C "$old" || return 1
    dir=$(realpath "$dir")
    for task in cv nlp; do
        for side in old new; do
            # the old genie from its own folder: python -m puts the current one first on the path
            (cd "$([ $side = old ] && echo "$old" || echo .)" && python3 -m genie new \
                "$dir/throughput/$task-$side" --yes --no-smoke --torch "$torch" --python "$python" \
                --gpus-per-node 1 --framework ddp --task $task --precision bf16 --tracker none \
                >/dev/null) || { echo "genie new $task-$side failed"; return 1; }
        done
    done
    rm -rf "$old"
    echo "generated the throughput projects in $dir/throughput"
}

# Synthetic data for `throughput`: a CIFAR-shaped image folder (10 classes of 32x32 PNGs), a
# CSV of texts of 8-200 words, and a model folder with a tokenizer and DistilBERT-base's
# config only (the project then trains it from scratch: nothing is downloaded).
THROUGHPUT_DATA='
import csv, random, sys
from pathlib import Path
from PIL import Image
from transformers import BertTokenizerFast, DistilBertConfig
root, images, texts = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
for i in range(images):
    folder = root / "images" / f"class{i % 10}"
    folder.mkdir(parents=True, exist_ok=True)
    Image.frombytes("RGB", (32, 32), rng.randbytes(32 * 32 * 3)).save(folder / f"{i}.png")
words = [f"w{i}" for i in range(30000)]
(root / "model").mkdir(exist_ok=True)
(root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words))
BertTokenizerFast(str(root / "vocab.txt")).save_pretrained(root / "model")
DistilBertConfig().save_pretrained(root / "model")
real = 0
with open(root / "texts.csv", "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["text", "label"])
    for i in range(texts):
        n = rng.randint(8, 200)
        out.writerow([" ".join(rng.choice(words) for _ in range(n)), i % 2])
        real += min(n + 2, 128)  # [CLS] and [SEP], cut at --max-length
(root / "tokens_per_text").write_text(str(real / texts))
'

throughput() {
    local dir=$1 samples=${2:-20000} steps=${3:-150} data task side log rate tokens
    data=$(mktemp -d)
    python3 -c "$THROUGHPUT_DATA" "$data" "$samples" "$samples" || return 1
    tokens=$(cat "$data/tokens_per_text")
    for task in cv nlp; do
        for side in old new; do
            log="$data/$task-$side.log"
            if [ $task = cv ]; then  # CIFAR: 224 px was the old default, 32 px is the new
                set -- --data-dir "$data/images" --image-size "$([ $side = old ] && echo 224 || echo 32)"
            else
                set -- --dataset csv --data-files "$data/texts.csv" --model-name "$data/model"
            fi
            (cd "$dir/throughput/$task-$side" && timeout 300 python3 -m torch.distributed.run \
                --standalone --nproc_per_node=1 train.py "$@" --precision bf16 --tracker none \
                --epochs 1 --max-steps "$steps" --log-every $((steps / 3)) --checkpoint-dir "$data/ck-$task-$side") \
                >"$log" 2>&1
            # the last of the step lines (each the rate since the one before: the last third
            # of the steps); not the epoch's line, whose rate counts the start (the workers'
            # start, cuDNN's autotuning), which a run of hours spreads thin
            rate=$(grep -oE 'step [0-9]+/[0-9]+ .* [0-9]+ samples/s' "$log" | tail -1 |
                grep -oE '[0-9]+ samples/s' | cut -d' ' -f1)
            if [ -z "$rate" ]; then
                echo "$task $side: no rate; the log ends:"; tail -5 "$log"; continue
            fi
            if [ $task = cv ]; then
                printf 'cv  %-4s %7s images/s\n' $side "$rate"
            else  # tokens that are text, not padding: the same count on both sides
                printf 'nlp %-4s %7s texts/s  %8.0f tokens/s (%.1f tokens per text)\n' $side "$rate" \
                    "$(python3 -c "print($rate * $tokens)")" "$tokens"
            fi
            printf '         %s, %s DataLoader workers\n' "$(grep -o 'global batch [0-9]*' "$log" | head -1)" \
                "$(cd "$dir/throughput/$task-$side" && python3 -c \
                    'import sys, config; print(config.parse_args(sys.argv[1:]).num_workers)' "$@")"
        done
    done
    rm -rf "$data"
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
    find "$dir" -mindepth 1 -maxdepth 1 -type d ! -name throughput | sort |
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
    throughput) shift; throughput "$@" ;;
    *) sed -n 2,17p "$0"; exit 2 ;;
esac

#!/usr/bin/env bash
# GPU in one command, in about six minutes: the engine's tests on CUDA, the whole notebook on CUDA, then a short
# measurement (benchmarks/gpu_check.py: eager vs transformers, int8/int4, the compiled step and how often it
# compiles). Every step writes its results as it goes, so a kill keeps what was done.
#
#     benchmarks/device_check.sh [OUT]        # from the repository root; OUT defaults to runs/device_check
#
# Writes OUT/env.txt, OUT/tests.log (+ tests.xml), OUT/notebook.log (+ the executed notebook), OUT/gpu_check.log
# and OUT/gpu_check.jsonl (a line per measurement), and OUT/summary.txt (a line per step, appended as each ends).
# Time limits per step (seconds): TESTS_TIMEOUT 150, NOTEBOOK_TIMEOUT 80, GPU_TIMEOUT 170; with the start,
# under 420 s. A failing step never stops the next. Offline: nothing is downloaded; the models are random
# checkpoints built here (a tiny one and a Qwen3-0.6B-shaped one, made on the GPU machine's CPUs).
set -u

OUT="${1:-runs/device_check}"
TESTS_TIMEOUT="${TESTS_TIMEOUT:-150}"
NOTEBOOK_TIMEOUT="${NOTEBOOK_TIMEOUT:-80}"
GPU_TIMEOUT="${GPU_TIMEOUT:-170}"
PY="${PYTHON:-python3}"

mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)" || exit 1
cd "$(dirname "$0")/.." || exit 1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg TOKENIZERS_PARALLELISM=false

record() {  # record STEP STATUS [NOTE]: appended at once
    echo "$1: $2${3:+ ($3)}" | tee -a "$SUMMARY"
}

run_step() {  # run_step NAME TIMEOUT LOG COMMAND...: the command's exit status and time, recorded
    local name="$1" limit="$2" log="$3" start=$SECONDS rc note
    shift 3
    timeout -k 5 "$limit" "$@" > "$log" 2>&1
    rc=$?
    note="$(( SECONDS - start )) s"
    { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && note="$note, timed out after $limit s"
    record "$name" "exit $rc" "$note"
}

{
    echo "== device_check $(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git rev-parse --short HEAD 2>/dev/null)"
    command -v nvidia-smi >/dev/null && nvidia-smi -L
    "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'| transformers', transformers.__version__, '| available', torch.cuda.is_available()); \
torch.cuda.is_available() and print(torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    record cuda "unavailable" "nothing run"
    exit 2
fi
record cuda "available"
"$PY" scripts/make_checkpoint.py models/tiny > /dev/null 2>&1 || record tiny_checkpoint "failed"

# 1. the engine against transformers on the GPU (the compiled step's own tests compile: they are step 3's)
QWEN3_TEST_DEVICE=cuda run_step tests "$TESTS_TIMEOUT" "$OUT/tests.log" \
    "$PY" -m pytest -q -p no:cacheprovider -rs --junitxml="$OUT/tests.xml" tests/test_model.py \
    tests/test_components.py tests/test_int8.py tests/test_int4.py tests/test_moe.py tests/test_qwen35.py \
    tests/test_sampling.py tests/test_cuda_choices.py tests/test_speculation.py tests/test_chat_and_streaming.py
tail -n 1 "$OUT/tests.log" | tee -a "$SUMMARY"

# 2. the whole notebook, demos included, on the GPU (the tiny model: its figures are not the point)
QWEN3_MODEL_DIR=models/tiny QWEN3_DEVICE=cuda run_step notebook "$NOTEBOOK_TIMEOUT" "$OUT/notebook.log" \
    "$PY" -m jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=-1 --output-dir "$OUT" \
    --output notebook_on_cuda qwen3_from_scratch.ipynb

# 3. measurements on a random Qwen3-0.6B (built once in .cache/), each written as it is taken
run_step gpu_check "$GPU_TIMEOUT" "$OUT/gpu_check.log" "$PY" benchmarks/gpu_check.py "$OUT"
grep '^== ' "$OUT/gpu_check.log" | cut -c1-300 | tee -a "$SUMMARY"

echo "== summary ($SUMMARY)"
cat "$SUMMARY"
! grep -qE '^[a-z_]+: exit [1-9]' "$SUMMARY"

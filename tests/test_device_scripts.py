"""The device check's own scripts, run here on the CPU (benchmarks/device_check.sh runs them on a GPU):
the notebook cell by cell under QWEN3_COMPILE=on (issue 30: no demo compiles more than once per shape it
announces), and gpu_check.py's steps end to end on the tiny model."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT


def run(args, checkpoint, **env):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "QWEN3_MODEL_DIR": str(checkpoint), "QWEN3_DEVICE": "cpu", **env})


@pytest.mark.skipif(not all(map(__import__("importlib").util.find_spec, ("nbclient", "ipykernel"))),
                    reason="needs nbclient and ipykernel (requirements-dev.txt)")
def test_the_notebook_compiles_once_per_shape_it_announces(checkpoints, tmp_path):
    """Every cell, demos included, with the compiled step on: the cells that swap functions decode eagerly,
    so the graphs compiled are exactly the shapes announced ("[compiling the decode step for ...")."""
    done = run(["benchmarks/notebook_cells.py", str(tmp_path)], checkpoints("tiny"), QWEN3_COMPILE="on")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cells = json.loads((tmp_path / "notebook_cells.json").read_text())
    assert len(cells) > 100 and not any(c["error"] for c in cells)
    ran = json.loads((tmp_path / "notebook_run.ipynb").read_text())["cells"]
    said = sum("".join(o.get("text", "")).count("[compiling the decode step") for c in ran
               for o in c.get("outputs", []))
    compiled = sum(c["graphs_compiled"] for c in cells)
    assert 1 <= compiled == said, (compiled, said, [c for c in cells if c["graphs_compiled"]])


def test_gpu_check_runs_its_steps(checkpoints, tmp_path):
    done = run(["benchmarks/gpu_check.py", str(tmp_path), "--device", "cpu", "--new-tokens", "6"],
               checkpoints("tiny"))
    rows = [json.loads(line) for line in (tmp_path / "gpu_check.jsonl").read_text().splitlines()]
    assert done.returncode == 0 and all(r["ok"] for r in rows), done.stdout[-3000:] + done.stderr[-3000:]
    assert [r["step"] for r in rows] == ["load bf16", "eager vs transformers", "compiled", "int8 eager",
                                         "int4 eager", "compiled b16"]
    compiled = next(r["value"] for r in rows if r["step"] == "compiled")
    # batch 1 in a 128-slot cache, then the session's 256-slot cache read in 128 slots and in all 256
    assert compiled["unannounced_graphs"] == 0 and len(compiled["compile_seconds"]) == 3

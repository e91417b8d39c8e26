"""The whole notebook, demo cells included, runs top to bottom in a real Jupyter kernel."""

import time

import pytest

from notebook_engine import NOTEBOOK

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (requirements-dev.txt)")


def run_notebook(model_dir, monkeypatch, **settings):
    """Execute every cell in a real kernel; return the code cells, after checking none failed."""
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (requirements-dev.txt)")
    for key, value in dict(QWEN3_MODEL_DIR=str(model_dir), QWEN3_DEVICE="cpu", QWEN3_DTYPE="bfloat16",
                           MPLBACKEND="Agg", **settings).items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    print(f"notebook ran in {time.perf_counter() - start:.1f} s")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, [(e.ename, e.evalue) for e in errors]
    return code


def test_notebook_runs_end_to_end(checkpoints, monkeypatch):
    code = run_notebook(checkpoints("tiny"), monkeypatch)
    text = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "loaded" in text and "tokens/s" in text and "torch's fused scaled_dot_product_attention" in text
    # loading the weights shows a short summary, not a progress bar redrawn into many outputs
    loading = [c for c in code if "weights = load_weights(" in c.source]
    assert len(loading) == 1
    assert len(loading[0].outputs) <= 3, [o.get("text", o.output_type)[:200] for o in loading[0].outputs]


def test_notebook_runs_on_a_moe_checkpoint_in_int8(checkpoints, monkeypatch):
    """Every demo (the layer-0 walk, the mistakes, sessions, the MoE and int8 sections) on MoE + int8."""
    code = run_notebook(checkpoints("moe"), monkeypatch, QWEN3_QUANT="int8")
    text = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "weights int8" in text and "experts used by" in text and "int8 decodes" in text


def test_committed_notebook_is_clean():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    tags = [c.metadata.get("tags", []) for c in code]
    assert sum("parameters" in t for t in tags) == 1
    assert any("demo" in t for t in tags)
    nbformat.validate(nb)


def test_notebook_runs_on_a_qwen35_checkpoint(checkpoints, monkeypatch):
    """Every cell on Qwen3.5 (Gated DeltaNet and gated attention): the demos of Qwen3-only parts (the layer-0
    walk, speculation, the mistakes) say so instead of failing, and the Qwen3.5 demo runs on the loaded model."""
    code = run_notebook(checkpoints("qwen35"), monkeypatch)
    text = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "median half-life per head" in text and "the walk is of a Qwen3 attention layer" in text
    assert "tokens/s" in text and "torch's fused scaled_dot_product_attention" in text

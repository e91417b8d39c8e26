"""The whole notebook, demo cells included, runs top to bottom in a real Jupyter kernel."""

import json
import re
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


def printed(code, start=None):
    """What the code cells printed: all of them, or the one cell whose source starts with `start`."""
    cells = code if start is None else [c for c in code if c.source.startswith(start)]
    assert len(cells) >= 1 if start is None else len(cells) == 1, start
    return "".join(o.get("text", "") for c in cells for o in c.outputs)


def check_what_is_printed_agrees_with_the_model(code, model_dir, run_dtype="bfloat16"):
    """Issue 54: what the notebook says of tools, thinking, QK-norm and sampling holds for the loaded model (its
    template as transformers renders it, its weights, its generation_config.json), and each comparison of speeds
    names the same weights on both sides or the difference."""
    from safetensors import safe_open
    from transformers import AutoTokenizer
    tokenizer, text = AutoTokenizer.from_pretrained(model_dir), printed(code)
    turn = [{"role": "user", "content": "What is 37 * 91?"}]
    tool = {"type": "function", "function": {"name": "calculate", "description": "Evaluate arithmetic.", "parameters": {
        "type": "object", "properties": {"expression": {"type": "string", "description": "e.g. 1 + 2"}}}}}
    render = lambda **kw: tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True, **kw)
    has_tools, thinks = "calculate" in render(tools=[tool]), render(enable_thinking=False) != render()
    names = [k for f in model_dir.glob("*.safetensors") for k in safe_open(f, "pt").keys()]
    qk_norm = any(k.endswith("self_attn.q_norm.weight") for k in names)

    assert ("chat template ignores `tools`" in text) == (not has_tools), has_tools
    called = printed(code, "paris = ")
    assert ("tools called:" in called or "no tool was called" in called) == has_tools, called
    assert ("has no thinking mode" in text) == (not thinks), thinks
    assert ("no thinking mode: the model answers at once" in printed(code, "gen_file = ")) == (not thinks)
    assert ("no QK-norm to take away here" in text) == (not qk_norm), qk_norm
    assert ("next token with QK-norm" in text) == qk_norm

    generation = json.loads((model_dir / "generation_config.json").read_text())
    given = {k: generation[k] for k in ("temperature", "top_k", "top_p") if k in generation}
    note = next(line for line in printed(code, "gen_file = ").splitlines() if "sampling {" in line)
    if given:
        assert "generation_config.json" in note and all(f"'{k}': {v}" in note for k, v in given.items()), note
    else:
        assert "Qwen3's model card" in note and "gives none" in note, note

    saved = json.loads((NOTEBOOK.parent / "docs" / "benchmark.json").read_text())
    line = next(line for line in printed(code, "mine = measure_machine()").splitlines() if "docs/benchmark.json" in line)
    assert f"{saved['checkpoint']}, {saved['dtype']}, {saved['machine']['name']}, {saved['date']}" in line, line
    alike = (saved["checkpoint"], saved["dtype"]) == (model_dir.name, run_dtype)
    assert alike or "not like for like" in line and f"{model_dir.name} in {run_dtype}" in line, line
    assert "int8 decodes" not in text or f"x as fast as {run_dtype} here" in text
    table = printed(code, "table_prompt = ").splitlines()
    rows = [re.split(r"\s{2,}", row.strip()) for row in table[1:] if re.search(r"\d tokens/s", row)]
    assert rows and rows[0][:2] == ["eager (this notebook)", run_dtype], table
    for name, weights, *rest in rows:  # a ratio only against an eager row of the same bits, which it names
        if ratio := re.search(r"x eager, both (\S+)\)", " ".join(rest)):
            assert ratio[1] in weights and any(r[0].startswith("eager") and r[1].startswith(ratio[1])
                                               for r in rows), table


def test_notebook_runs_end_to_end(checkpoints, monkeypatch):
    code = run_notebook(checkpoints("tiny"), monkeypatch)
    check_what_is_printed_agrees_with_the_model(code, checkpoints("tiny"))
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

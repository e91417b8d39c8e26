"""The notebook reads model first: the whole forward pass comes before the plumbing (issue 15).

Positions are counted as a reader meets them: non-blank lines of the engine cells (code cells not
tagged `demo`), in order."""

import json
import re

from notebook_engine import NOTEBOOK

# What the model part must not do: open files, parse JSON, download, or read a clock.
PLUMBING = re.compile(r"\bopen\(|\bjson\.|read_json|safe_open|snapshot_download|hf_hub|perf_counter|time\.time\(|"
                      r"urllib|requests\.")


def cells():
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def engine_lines():
    """[(cell index, source line)] of the engine, blank lines left out."""
    out = []
    for i, c in enumerate(cells()):
        if c["cell_type"] == "code" and "demo" not in c["metadata"].get("tags", []):
            out += [(i, line) for line in "".join(c["source"]).splitlines() if line.strip()]
    return out


def position(name, lines=None):
    """1-based engine line of `def name`."""
    lines = lines or engine_lines()
    return next(n for n, (_, line) in enumerate(lines, 1) if re.match(rf"(async )?def {name}\(", line))


def test_the_model_comes_first():
    lines = engine_lines()
    assert position("rms_norm", lines) <= 130  # Part 1: settings, the checkpoint found, the dtype
    assert position("forward", lines) <= 400
    # every component of the forward pass is defined before it, in the order it runs
    order = [position(n, lines) for n in ("rms_norm", "rope_cos_sin", "silu", "linear", "softmax", "attention",
                                          "decoder_layer", "forward_hidden", "forward", "greedy")]
    assert order == sorted(order), order


def test_nothing_before_forward_touches_files_or_clocks():
    """The model part (Part 2 up to forward) reads no file and no clock: Part 1 finds the checkpoint, Part 4 loads."""
    lines = engine_lines()
    part_2 = next(i for i, c in enumerate(cells()) if "".join(c["source"]).startswith("# Part 2"))
    before = [(i, line) for i, line in lines[:position("forward", lines)] if i > part_2]
    offending = [line for _, line in before if PLUMBING.search(line.split("#")[0])]
    assert not offending, offending


def test_parts_in_order_and_helpers_in_engine_cells():
    all_cells = cells()
    headings = [line for c in all_cells if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("# Part ")]
    assert [h.split("·")[0].strip() for h in headings] == [f"# Part {k}" for k in range(1, 8)], headings
    defined_in_demo = {m for c in all_cells if "demo" in c["metadata"].get("tags", [])
                       for m in re.findall(r"^def (\w+)\(", "".join(c["source"]), re.M)}
    assert "swapped" not in defined_in_demo and position("swapped") > position("forward")


def test_plumbing_cells_are_folded_and_say_what_they_do():
    folded = [c for c in cells() if c["metadata"].get("jupyter", {}).get("source_hidden")]
    assert len(folded) >= 3
    for c in folded:
        first = "".join(c["source"]).splitlines()[0]
        assert first.startswith("# "), first


def test_greedy_loop_of_the_model_part_matches_transformers(engine, reference):
    import torch
    from conftest import TEST_DEVICE, random_ids
    q, model = engine(), reference()
    ids = random_ids(2, 9, seed=41)
    expected = model.generate(ids.to(TEST_DEVICE), attention_mask=torch.ones_like(ids).to(TEST_DEVICE),
                              max_new_tokens=10, min_new_tokens=10, do_sample=False, eos_token_id=None,
                              pad_token_id=0)[:, 9:]
    got = q.greedy(ids, 10)
    assert got.tolist() == expected[:, :got.shape[1]].tolist()
    if got.shape[1] < 10:  # it stops early only when every row has produced a stop id
        assert all(set(row) & set(q.config.stop_ids) for row in got.tolist())

"""Every part boundary leaves a working model, and later parts only add (issue 29).

- the engine cells of Parts 1-2 alone define a model that runs on made-up weights;
- the engine cells up to the end of the loading part alone equal transformers;
- the whole engine still runs Part 2's own functions, and attention's scores are computed at most
  three calls below forward;
- no engine cell redefines a name of Part 2 (only the seams it declares are rebound, once each);
- every anchor link of README and the notebook names a heading that exists."""

import json
import re
import sys

import pytest
import torch

from conftest import ROOT, TEST_DEVICE, random_ids
from notebook_engine import NOTEBOOK, load_engine

SEAMS = {"linear", "attention"}  # the names Part 2 declares for later parts to rebind


def cells():
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def part_of_each_cell():
    part, out = 0, []
    for c in cells():
        headings = re.findall(r"^# Part (\d+) ·", "".join(c["source"]), re.M) if c["cell_type"] == "markdown" else []
        part = int(headings[-1]) if headings else part  # the first cell opens with the reading guide, then Part 1
        out.append(part)
    return out


def engine_source(part):
    return ["".join(c["source"]) for c, p in zip(cells(), part_of_each_cell()) if p == part
            and c["cell_type"] == "code" and "demo" not in c["metadata"].get("tags", [])]


def test_part_2_is_the_plain_model_in_at_most_250_lines():
    lines = [line for source in engine_source(2) for line in source.splitlines() if line.strip()]
    assert len(lines) <= 250, len(lines)
    names = set(re.findall(r"^def (\w+)\(", "\n".join(lines), re.M))
    assert {"rms_norm", "rope_cos_sin", "silu", "softmax", "attention", "decoder_layer", "make_cache",
            "forward", "greedy"} <= names
    # the capabilities come later: no kernel table, quantization, compiler or Qwen3.5 layer in Part 2
    assert not re.search(r"KERNELS|int8|int4|torch\.compile|gated_deltanet|TOKEN_MIXERS", "\n".join(lines))


def test_no_later_cell_redefines_part_2():
    part_2 = {n for source in engine_source(2) for n in re.findall(r"^(?:def |class )?(\w+)\b(?=\(|:| =)", source, re.M)}
    later = "\n".join(s for p in range(3, 9) for s in engine_source(p))
    redefined = set(re.findall(r"^(?:def |class )(\w+)\b", later, re.M)) & part_2
    assert not redefined, redefined
    rebound = [n for n in re.findall(r"^(\w+) = ", later, re.M) if n in part_2]
    assert sorted(rebound) == sorted(SEAMS), rebound  # each seam once, nothing else


@pytest.fixture(scope="module")
def toy_model():
    """Parts 1-2 alone, on made-up weights (the toy shapes the notebook's own demo uses)."""
    q = load_engine(None, device=TEST_DEVICE, dtype="float32", before="# Part 3")
    assert "load_config" not in q and "KERNELS" not in q  # nothing of the later parts ran
    g = torch.Generator().manual_seed(0)
    D, F, H, KV, hd, V = 64, 192, 4, 2, 16, 300
    r = lambda *shape: (torch.randn(*shape, generator=g) * shape[-1] ** -0.5).to(TEST_DEVICE)
    q.config = q.Config(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=2, num_attention_heads=H,
                        num_key_value_heads=KV, head_dim=hd, rms_norm_eps=1e-6, rope_theta=1e6,
                        max_position_embeddings=256, tie_word_embeddings=True, stop_ids=(0,), sampling={})
    ones = lambda n: torch.ones(n, device=TEST_DEVICE)
    layers = [q.LayerWeights(input_layernorm=ones(D), qkv_proj=r((H + 2 * KV) * hd, D),
                             qk_norm=torch.ones(H + KV, hd, device=TEST_DEVICE), o_proj=r(D, H * hd),
                             post_attention_layernorm=ones(D), gate_up_proj=r(2 * F, D), down_proj=r(D, F))
              for _ in range(2)]
    embed = r(V, D)
    q.weights = q.Weights(embed_tokens=embed, layers=layers, norm=ones(D), lm_head=embed)
    return q


def test_the_model_part_runs_alone_on_made_up_weights(toy_model):
    q = toy_model
    ids = random_ids(2, 12, high=300, seed=3)
    full = q.forward(ids)
    assert full.shape == (2, 12, 300) and torch.isfinite(full).all()
    cache = q.make_cache(2, 12)
    q.forward(ids[:, :11], cache)
    torch.testing.assert_close(q.forward(ids[:, 11:], cache, 11)[:, 0], full[:, -1], atol=1e-5, rtol=0)
    new = q.greedy(ids, 5)
    assert new.shape[0] == 2 and 1 <= new.shape[1] <= 5
    assert new[:, 0].tolist() == full[:, -1].argmax(-1).tolist()


@pytest.fixture(scope="module")
def loaded_only(checkpoints):
    """The engine cells up to the end of the loading part, run alone."""
    return load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32", before="# Part 5")


def test_the_engine_up_to_loading_equals_transformers(loaded_only, reference):
    q, model = loaded_only, reference()
    assert "generate" not in q and "calibrate" not in q and "written_out_attention" not in q  # Part 2's attention
    ids = random_ids(2, 20, seed=8)
    torch.testing.assert_close(q.forward(ids).cpu(), model(ids.to(model.device)).logits.float().cpu(),
                               atol=1e-4, rtol=0)
    expected = model.generate(ids.to(model.device), attention_mask=torch.ones_like(ids).to(model.device),
                              max_new_tokens=8, min_new_tokens=8, do_sample=False, eos_token_id=None,
                              pad_token_id=0)[:, 20:]
    got = q.greedy(ids, 8)
    assert got.tolist() == expected[:, :got.shape[1]].tolist()


def calls_during(fn):
    """The code objects of every Python function called while fn() runs, each with its depth below fn's caller."""
    seen, depth = [], [0]

    def profile(frame, event, arg):
        if event == "call":
            depth[0] += 1
            seen.append((frame.f_code, depth[0]))
        elif event == "return":
            depth[0] -= 1
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.parametrize("which", ["loaded_only", "whole engine"])
def test_forward_and_greedy_run_part_2s_own_layer_and_attention(which, loaded_only, engine):
    q = loaded_only if which == "loaded_only" else engine()
    part_2_attention = q.written_out_attention if "written_out_attention" in q else q.attention
    ids = random_ids(1, 9, seed=2)
    for run in (lambda: q.forward(ids), lambda: q.greedy(ids, 3)):
        called = calls_during(run)
        codes = {code for code, _ in called}
        assert {q.forward_hidden.__code__, q.decoder_layer.__code__, part_2_attention.__code__} <= codes
        # the scores: at most three calls below forward (forward -> forward_hidden -> decoder_layer -> attention);
        # the whole engine reaches it through the seam Part 6 rebinds (blocked_attention)
        top = min(d for code, d in called if code is q.forward.__wrapped__.__code__)  # inside inference_mode's
        below = max(d for code, d in called if code is part_2_attention.__code__) - top
        assert below <= (3 if part_2_attention is q.attention else 4), below


def test_anchor_links_resolve():
    headings = {re.sub(r"\s", "-", line.lstrip("#").strip().replace("`", "")) for c in cells() if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if re.match(r"#+ ", line)}
    texts = ["".join(c["source"]) for c in cells() if c["cell_type"] == "markdown"]
    texts.append((ROOT / "README.md").read_text(encoding="utf-8"))
    links = {a for t in texts for a in re.findall(r"\]\((?:qwen3_from_scratch\.ipynb)?#((?:[^()\s]|\([^()\s]*\))+)\)", t)}
    assert links and not links - headings, sorted(links - headings)


def test_generation_functions_take_at_most_8_parameters_and_choose_their_step_once(engine):
    import inspect
    q = engine()
    for f in (q.generate, q._generate, q.chat, q.ChatSession.ask, q.ChatSession.respond, q.ChatSession._reply):
        assert len(inspect.signature(f).parameters) <= 8 + ("self" in inspect.signature(f).parameters), f
    cell = next(c for c in map("".join, (c["source"] for c in cells())) if "\ndef _generate(" in c)
    body = re.search(r"^def _generate\(.*?(?=^\S)", cell + "\n#", re.S | re.M).group(0)
    loop = body.split("while True:")[1]
    assert "STATIC_STEP" not in loop and "speculate" not in loop and "step(" in loop  # chosen before the loop


def test_loading_cells_are_folded_plumbing_and_the_markdown_fits_a_sitting():
    loading = [c for c, p in zip(cells(), part_of_each_cell()) if p == 4 and c["cell_type"] == "code"
               and "demo" not in c["metadata"].get("tags", [])]
    assert loading and all(c["metadata"].get("jupyter", {}).get("source_hidden") and c["metadata"].get("cellView") == "form"
                           and "".join(c["source"]).startswith("# @title Plumbing") for c in loading)
    words = sum(len(re.findall(r"\w+", "".join(c["source"]))) for c in cells() if c["cell_type"] == "markdown")
    assert words <= 8000, words  # counted as the project's checks count them: runs of word characters
    first = "".join(cells()[0]["source"])
    assert "90-minute" in first and all(size in first for size in ("14B", "32B", "Qwen3.5"))


def test_the_engine_does_not_grow_back():
    """Issue 29's targets are 1,600 engine lines, at most 700 of them before the first real text (Parts 1, 2
    and 4; the family part does not count). Three cuts took it from 2,468 to 1,871 and from 1,138 to 694;
    this pins where it stands, with a little headroom, so that later work makes room by deleting (issue 32's
    payback rule at load and the AVX2 packing check took 1,880 to 1,907; a review cut it to 1,892; decode's argument check, 1,898).
    Until 2026-12-03 this count missed Part 1 (its heading shares the first cell with the reading guide), so
    the pin sat 52 lines above the count; counted whole, with the bad-input checks of that day, 1,906. Four
    reviews, between them of every engine cell, then cut 34 lines without changing behaviour, and the
    misspelt-setting note added 3: 1,875. Five more bad-input checks (set_padding, make_cache's kv_dtype,
    logit_lens, encode, calibrate) added 13: 1,888; a third review (messages may be reworded, tests follow)
    cut 18: 1,870; best_seconds, which only demo cells call, moved to
    the first of them: 1,867. Eight bad-input checks (make_cache's float kv_dtype, set_padding's list, trace_bytes,
    rope_theta and rms_norm_eps, layers past num_hidden_layers, the chat template, respond's messages,
    tool_schema's choices) added 20: 1,887;
    greedy's too-long prompt says to shorten it: 1,888."""
    lines = {p: sum(1 for source in engine_source(p) for line in source.splitlines() if line.strip())
             for p in range(1, 8)}
    assert sum(lines.values()) <= 1888, lines
    assert lines[1] + lines[2] + lines[4] <= 700, lines


def test_no_engine_line_is_over_110_characters():
    long = [line for c in cells() if c["cell_type"] == "code" and "demo" not in c["metadata"].get("tags", [])
            for line in "".join(c["source"]).splitlines() if len(line) > 110]
    assert not long, long


def places_written(sources):
    """module-level name -> {(cell, function or None)} where the engine writes it after defining it: assigns
    it, assigns into it (NAME[k] = ..., NAME.attr = ...), or calls a mutating method on it."""
    import ast
    mutators = {"update", "append", "remove", "clear", "pop", "setdefault", "extend", "add"}
    written = {}

    def root(node):  # the name an expression is rooted in: weights.layers[0].x -> weights
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    for cell, source in enumerate(sources):
        tree = ast.parse(source)
        for top in tree.body:
            scope = top.name if isinstance(top, (ast.FunctionDef, ast.ClassDef)) else None
            declared = {n for node in ast.walk(top) if isinstance(node, ast.Global) for n in node.names}
            for node in ast.walk(top):
                targets = []
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    targets = [t for tt in targets for t in (tt.elts if isinstance(tt, ast.Tuple) else [tt])]
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in mutators:
                    targets = [node.func.value]
                elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
                    targets = [node.args[0]]
                for t in targets:
                    name = root(t)
                    top_level_name = scope is None or name in declared or not isinstance(t, ast.Name)
                    if name and top_level_name:
                        written.setdefault(name, set()).add((cell, scope))
    return written


def test_at_most_three_stores_are_written_from_more_than_one_place():
    sources = [s for p in range(1, 9) for s in engine_source(p)]
    defined_in = {}  # module-level data -> the cell that first assigns it (its definition, not a later write)
    for cell, source in enumerate(sources):
        for name in re.findall(r"^(\w+) = ", source, re.M):
            defined_in.setdefault(name, cell)
    written = places_written(sources)
    shared = sorted(n for n, places in written.items() if n in defined_in
                    and len(places - {(defined_in[n], None)}) > 1)
    assert len(shared) <= 3, shared  # today: KERNELS, LINEAR_FORMS (a layer set through a loop variable is not followed)



def test_running_the_seam_cell_again_keeps_part_2s_attention(engine, reference):
    """A reader re-runs cells: rebinding the attention seam a second time must not capture the seam's new
    value as "Part 2's" (blocked_attention calling itself)."""
    from notebook_engine import engine_cells
    q = engine("tiny", QWEN3_MATMUL="native")
    part_2s = q.written_out_attention
    cell = next(c for c in engine_cells() if "def blocked_attention(" in c)
    exec(compile(cell, "rerun", "exec"), q._module.__dict__)
    assert q.written_out_attention is part_2s and q.attention is q.blocked_attention
    ids = random_ids(1, 9, seed=5)
    model = reference()
    torch.testing.assert_close(q.forward(ids).cpu(), model(ids.to(model.device)).logits.float().cpu(),
                               atol=1e-4, rtol=0)

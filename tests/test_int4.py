"""QWEN3_QUANT=int4: the notebook computes what transformers computes on weights replaced by exactly
q * scale + lo (groups of 32 columns; embeddings and lm_head by the int8 scheme), dense and MoE, in
every int4 form."""

import pytest
import torch

from conftest import int8_stored, quantized_engines, random_ids

INF = float("inf")
# one form for every number of rows, or the fused kernel for few rows and tiles for many, both on its layout
FORMS = {"int4": "int4", "int4_tiles": "int4_tiles", "mixed": {1: "int4", 64: "int4", INF: "int4_tiles"}}


def as_stored(name, w):
    """What the int4 scheme keeps of checkpoint tensor `name`, as float32 numbers: layer matrices
    q * scale + lo per group of 32 columns, the embeddings and lm_head q * s (int8, per row), the rest as is."""
    if name.endswith(("embed_tokens.weight", "lm_head.weight")):
        return int8_stored(name, w)
    if w.dim() != 2 or name.endswith("mlp.gate.weight"):
        return w
    groups = w.float().view(w.shape[0], -1, 32)
    lo = groups.amin(dim=-1, keepdim=True)
    scale = (groups.amax(dim=-1, keepdim=True) - lo) / 15
    scale = torch.where(scale == 0, 1.0, scale)
    q = torch.round((groups - lo) / scale).clamp(0, 15)
    return (q * scale + lo).view(w.shape)


@pytest.fixture(scope="module")
def int4_pair(tmp_path_factory, checkpoints, engine):
    """kind -> (int4 engine, unquantized engine, transformers on the q*scale+lo copy), float32 activations."""
    return quantized_engines(tmp_path_factory.mktemp("int4"), checkpoints, engine, "int4", as_stored)


def forms_here(q4):
    """Every int4 form (by name), skipping those with the fused kernel where this device has none for float32,
    and the mixed one where the tiles cannot read the fused kernel's layout."""
    fused = q4.fused_int4_runs()
    return [name for name in FORMS if name == "int4_tiles" or fused and (name == "int4" or q4.mixes_int4_forms())]


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_int4_logits_equal_reference_in_every_form(int4_pair, kind):
    q4, full, model = int4_pair(kind)
    ids = random_ids(2, 40, high=400, seed=61)
    expected = model(ids.to(model.device)).logits
    for form in forms_here(q4):  # 80 rows: the mixed table's tiles, read from the fused kernel's layout
        q4.use_int4_form(FORMS[form])
        torch.testing.assert_close(q4.forward(ids), expected, atol=1e-4, rtol=0, msg=lambda m: f"{form}: {m}")
    assert (full.forward(ids) - expected).abs().max() > 1e-2  # unquantized: far off, so int4 really was applied


@pytest.mark.parametrize("form", FORMS)
def test_int4_batched_generation_equals_single_runs(int4_pair, form):
    q4 = int4_pair()[0]
    if form not in forms_here(q4):
        pytest.skip("no fused int4 kernel for float32 here")
    q4.use_int4_form(FORMS[form])
    prompts = [random_ids(1, n, high=400, seed=n)[0].tolist() for n in (5, 17, 11)]
    batched = q4.generate(prompts, 8).tokens
    assert batched == [q4.generate([p], 8).tokens[0] for p in prompts]


def test_int4_weights_as_documented(int4_pair):
    q4 = int4_pair()[0]
    w, layer, cfg = q4.weights, q4.weights.layers[0], q4.config
    assert w.lm_head is w.embed_tokens and type(w.embed_tokens).__name__ == "Int8Weight"  # tied: one int8 table
    for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        m = getattr(layer, name)
        assert type(m).__name__ == "Int4Weight" and m.q.dtype == torch.uint8 and m.scale_zero.dtype == torch.float32
    assert layer.input_layernorm.dtype == torch.float32 and layer.qk_norm.dtype == torch.float32  # norms stay
    for form in forms_here(q4):  # per-projection views are rows of the stacked matrix, in either layout
        q4.use_int4_form(FORMS[form])
        x = torch.randn(3, cfg.hidden_size, device=q4.device)
        qkv = q4.linear(x, q4.weights.layers[0].qkv_proj)
        H, KV, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        torch.testing.assert_close(q4.linear(x, q4.weights.layers[0].k_proj), qkv[:, H * hd:(H + KV) * hd])
    moe_layer = int4_pair("moe")[0].weights.layers[0]
    experts = moe_layer.experts_gate_up
    assert type(experts).__name__ == "Int4Weight" and len(experts.shape) == 3 and experts.scale_zero.dim() == 4
    assert moe_layer.router.dtype == torch.float32  # routers stay in the model dtype


def test_quantize_int4_scheme(int4_pair):
    q4 = int4_pair()[0]
    w = torch.randn(16, 64)
    w[3, :32] = 0.5  # a constant group: scale 1, every value lo
    stored = q4.quantize_int4(w)
    torch.testing.assert_close(stored.dequantize(torch.float32), as_stored("m", w), atol=1e-6, rtol=0)
    assert stored.q.shape == (16, 32) and stored.scale_zero.shape == (2, 16, 2)
    assert stored.scale_zero[0, 3, 0] == 1 and stored.scale_zero[0, 3, 1] == 0.5 + 8
    with pytest.raises(ValueError, match="int4 groups 32 columns"):
        q4.quantize_int4(torch.randn(16, 40))


def test_notebook_runs_with_int4_weights(checkpoints, monkeypatch):
    """Every demo, the int8 and int4 lessons included, with int4 weights loaded."""
    pytest.importorskip("nbformat", reason="nbformat is not installed (requirements-dev.txt)")
    from test_notebook_runs import run_notebook
    code = run_notebook(checkpoints("tiny"), monkeypatch, QWEN3_QUANT="int4")
    text = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "weights int4" in text and "int8 decodes" in text and "int4: relative weight error" in text


def test_int4_memory_preflight(int4_pair, monkeypatch):
    """Qwen3-30B-A3B in int4 needs about 19 GB (README's table); a load that cannot fit names int8 and int4."""
    import dataclasses
    q4 = int4_pair()[0]
    full = dataclasses.replace(q4.config, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                               num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                               vocab_size=151936, num_experts=128, num_experts_per_tok=8, tie_word_embeddings=False)
    int4 = q4.weight_bytes(q4.expected_shapes(full), torch.bfloat16, "int4")
    assert 19.0e9 < int4 < 19.6e9, int4
    monkeypatch.setitem(q4._module.__dict__, "free_memory_bytes", lambda device: 10_000)
    with pytest.raises(MemoryError, match=r"use a smaller model, or QWEN3_QUANT=int8 \(.*GiB\), or QWEN3_QUANT=int4 \("):
        q4.load_weights(q4.MODEL_DIR, q4.config, q4.device, q4.dtype)


def test_calibration_times_both_int4_forms_and_the_int8_lm_head(int4_pair, capsys):
    """Forced to measure (min_bytes=0): both int4 forms and both int8 forms (for lm_head), in every
    round; the weights are then laid out for the chosen form and still compute the reference."""
    q4, _, model = int4_pair()
    q4.calibrate(min_bytes=0)
    out = capsys.readouterr().out
    assert all(form in out for form in ("int4", "int4_tiles", "int8", "int8_tiles")) and "median of 5 rounds" in out
    assert len(q4.KERNELS["int8"]) == 3 and q4.weights.layers[0].qkv_proj.layout == q4.int4_layout(q4.KERNELS["int4"])
    if q4.fused_int4_runs() and q4.mixes_int4_forms():  # the tiles read the fused layout: a choice per number of rows
        assert len(q4.KERNELS["int4"]) == 3
    ids = random_ids(1, 20, high=400, seed=63)
    torch.testing.assert_close(q4.forward(ids), model(ids.to(model.device)).logits, atol=1e-4, rtol=0)


def test_tiles_read_the_cpu_kernels_layout_in_place(int4_pair):
    """The CPU packer's blocks, read with tensor ops (cpu_block_values), hold the values the fused kernel
    itself reads back (identity @ W.T with scale 1 and zero 8), a last shorter block included; whole blocks
    of rows are a packed matrix too, sliced in place; the tiles multiply from that layout."""
    q4 = int4_pair()[0]
    if not (q4.fused_int4_runs() and q4.device.type == "cpu"):
        pytest.skip("no fused CPU int4 kernel here")
    if q4.CPU_INT4_BLOCK is None:
        pytest.skip("this torch's CPU int4 layout is not the blocked one cpu_block_values reads: read back instead")
    B = q4.CPU_INT4_BLOCK
    for out in (4 * B, 3 * B + 16):  # whole blocks, and a last block of 16 rows
        w = q4.lay_out_int4(q4.quantize_int4(torch.randn(out, 128)), "cpu")
        by_kernel = q4.fused_int4("cpu")(torch.eye(128, dtype=torch.bfloat16), w.q, q4.INT4_GROUP,
                                          torch.tensor([1.0, 8.0], dtype=torch.bfloat16).expand(4, out, 2).contiguous()).T
        assert torch.equal(q4.int4_values(w), by_kernel.to(torch.uint8)), out
        for rows in (slice(B, 3 * B), slice(2 * B, out)):  # whole blocks, the last one too
            part = w[rows]
            assert part.layout == "cpu" and part.q.data_ptr() == w.q[rows.start].data_ptr()  # a view, not a copy
            assert torch.equal(part.dequantize(torch.float32), w.dequantize(torch.float32)[rows])
        x = torch.randn(300, 128)  # many rows: the tiles, from the fused kernel's layout
        torch.testing.assert_close(q4.matmul_tiles(x, w), x @ w.dequantize(torch.float32).T, atol=1e-4, rtol=1e-5)


def test_int4_forms_are_checked(int4_pair):
    q4 = int4_pair()[0]
    with pytest.raises(ValueError, match="with an ANY key"):
        q4.use_int4_form({1: "int4"})
    with pytest.raises(ValueError, match="int4 forms"):
        q4.use_int4_form("int8")
    if not q4.mixes_int4_forms():
        with pytest.raises(ValueError, match="mix only where the tiles read"):
            q4.use_int4_form(FORMS["mixed"])

"""QWEN3_QUANT=int4: the notebook computes what transformers computes on weights replaced by exactly
q * scale + lo (groups of 32 columns; embeddings and lm_head by the int8 scheme), dense and MoE, with aten's
fused kernel where the device has one and with dequantized tiles (the plain layout)."""

import pytest
import torch

from conftest import int8_stored, quantized_engines, random_ids



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


def in_layout(q4, layout):
    """q4's weights with every int4 matrix laid out as `layout` ("plain": the tiles multiply)."""
    import dataclasses
    lay = lambda t: q4.lay_out_int4(t, layout) if isinstance(t, q4.Int4Weight) else t
    w = q4.weights
    return dataclasses.replace(w, layers=[dataclasses.replace(layer, **{f.name: lay(getattr(layer, f.name))
                                                                        for f in dataclasses.fields(layer)})
                                          for layer in w.layers])


def layouts_here(q4):
    """The loaded layout (the fused kernel's, where the device has one) and the plain one (tiles)."""
    return sorted({q4.int4_layout(), "plain"})


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_int4_logits_equal_reference_in_every_layout(int4_pair, kind):
    q4, full, model = int4_pair(kind)
    ids = random_ids(2, 40, high=400, seed=61)
    expected = model(ids.to(model.device)).logits
    for layout in layouts_here(q4):
        with q4.swapped(weights=in_layout(q4, layout)):
            torch.testing.assert_close(q4.forward(ids), expected, atol=1e-4, rtol=0, msg=lambda m: f"{layout}: {m}")
    assert (full.forward(ids) - expected).abs().max() > 1e-2  # unquantized: far off, so int4 really was applied


@pytest.mark.parametrize("layout", ["loaded", "plain"])
def test_int4_batched_generation_equals_single_runs(int4_pair, layout):
    q4 = int4_pair()[0]
    prompts = [random_ids(1, n, high=400, seed=n)[0].tolist() for n in (5, 17, 11)]
    with q4.swapped(weights=q4.weights if layout == "loaded" else in_layout(q4, "plain")):
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
    assert layer.qkv_proj.layout == q4.int4_layout()  # laid out once, at load, for the device's fused kernel
    for layout in layouts_here(q4):  # per-projection views are rows of the stacked matrix, in either layout
        with q4.swapped(weights=in_layout(q4, layout)):
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
    """Qwen3-30B-A3B in int4 needs about 19 GB (docs/reference.md); a load that cannot fit names int8 and int4."""
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


def test_the_kernels_layout_reads_back_the_values_it_was_given(int4_pair):
    """aten's layout is read back through its own kernel (identity @ W.T with scale 1, zero 8): the values and the
    rows of a matrix laid out for it are those of the plain one, a last short block of rows included."""
    q4 = int4_pair()[0]
    if q4.int4_layout() == "plain":
        pytest.skip("no fused int4 kernel here")
    for out in (256, 208):
        plain = q4.quantize_int4(torch.randn(out, 128).to(q4.device))
        packed = q4.lay_out_int4(plain, q4.int4_layout())
        assert torch.equal(q4.int4_values(packed), q4.int4_values(plain))
        assert torch.equal(packed[64:192].dequantize(torch.float32), plain.dequantize(torch.float32)[64:192])
        x = torch.randn(3, 128, device=q4.device)
        torch.testing.assert_close(packed.product(x), plain.product(x), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["auto", "float32"])
def test_the_quantization_lessons_run_the_settings_form(checkpoints, dtype):
    """Part 6's int8 and int4 copies are loaded as QWEN3_QUANT=int8 / int4 loads them, whatever the loaded model:
    the same dtype (the rule's: bf16 activations for quantized weights on a CPU without bf16 instructions), the
    same kind of weight, laid out for the same kernel, the same numbers."""
    from notebook_engine import load_engine
    q = load_engine(checkpoints("tiny"), dtype=dtype, tags=("plots",), QWEN3_COMPILE="off")
    ids = random_ids(1, 12, high=400, seed=64)
    for quant in ("int8", "int4"):
        (w, d), setting = q.loaded_as(quant), load_engine(checkpoints("tiny"), dtype=dtype, QWEN3_QUANT=quant)
        kind = lambda weights: type(weights.layers[0].qkv_proj).__name__  # each engine has its own classes
        assert d == setting.dtype and kind(w) == kind(setting.weights)
        if quant == "int4":
            assert w.layers[0].qkv_proj.layout == setting.weights.layers[0].qkv_proj.layout
        with q.swapped(weights=w, dtype=d):
            assert torch.equal(q.forward(ids), setting.forward(ids))

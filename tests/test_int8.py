"""QWEN3_QUANT=int8: the notebook computes exactly what transformers computes on weights replaced by
q * s (so quantization is the only difference, and it is really applied), dense and MoE."""

import pytest
import torch

from conftest import TEST_DEVICE, int8_stored, quantized_engines, random_ids
from notebook_engine import load_engine


@pytest.fixture(scope="module")
def int8_pair(tmp_path_factory, checkpoints, engine):
    """kind -> (int8 engine, unquantized engine, transformers on the q*s copy), float32 activations."""
    return quantized_engines(tmp_path_factory.mktemp("int8"), checkpoints, engine, "int8", int8_stored)


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_int8_logits_equal_reference_on_quantized_weights(int8_pair, kind):
    q8, full, model = int8_pair(kind)
    ids = random_ids(2, 40, high=400, seed=51)
    expected = model(ids.to(model.device)).logits
    torch.testing.assert_close(q8.forward(ids), expected, atol=1e-4, rtol=0)
    assert (full.forward(ids) - expected).abs().max() > 1e-2  # unquantized: far off, so int8 really was applied


@pytest.mark.parametrize("fused", [True, False], ids=["aten's fused kernel", "dequantized tiles"])
def test_each_int8_product_equals_reference(int8_pair, monkeypatch, fused):
    """Where the device has aten's fused int8 kernel the rule takes it; without one, the tiles: both exact."""
    q8, _, model = int8_pair()
    if fused and not q8.has_kernel("aten::_weight_int8pack_mm", q8.device):
        pytest.skip("no fused int8 kernel for this device")
    assert q8.FUSED_INT8 == q8.has_kernel("aten::_weight_int8pack_mm", q8.device)
    monkeypatch.setitem(q8._module.__dict__, "FUSED_INT8", fused)
    ids = random_ids(2, 30, high=400, seed=52)
    torch.testing.assert_close(q8.forward(ids), model(ids.to(model.device)).logits, atol=1e-4, rtol=0)


def test_int8_weights_as_documented(int8_pair):
    q8, full, _ = int8_pair()
    w = q8.weights
    assert w.lm_head is w.embed_tokens and isinstance(w.embed_tokens, q8.Int8Weight)  # tied: one int8 table
    layer = w.layers[0]
    for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        m = getattr(layer, name)
        assert m.q.dtype == torch.int8 and m.scale.dtype == torch.float32 and m.q.abs().max() <= 127
    assert layer.input_layernorm.dtype == torch.float32 and layer.qk_norm.dtype == torch.float32  # norms stay
    x = torch.randn(3, q8.config.hidden_size, device=q8.device)
    qkv = q8.linear(x, layer.qkv_proj)  # per-projection views are rows of the stacked int8 matrix
    H, KV, hd = q8.config.num_attention_heads, q8.config.num_key_value_heads, q8.config.head_dim
    torch.testing.assert_close(q8.linear(x, layer.k_proj), qkv[:, H * hd:(H + KV) * hd])
    moe_layer = int8_pair("moe")[0].weights.layers[0]
    experts = moe_layer.experts_gate_up  # an Int8Weight of the MoE engine (its own module, its own class)
    assert type(experts).__name__ == "Int8Weight" and experts.q.dim() == 3 and experts.scale.dim() == 2  # (E, 2F)
    assert moe_layer.router.dtype == torch.float32  # routers stay in the model dtype


def test_int8_batched_generation_equals_single_runs(int8_pair):
    q8 = int8_pair()[0]
    prompts = [random_ids(1, n, high=400, seed=n)[0].tolist() for n in (5, 17, 11)]
    batched = q8.generate(prompts, 8).tokens
    assert batched == [q8.generate([p], 8).tokens[0] for p in prompts]


def test_quant_none_is_the_engine_without_the_setting(checkpoints):
    without = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="bfloat16")
    with_none = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="bfloat16", QWEN3_QUANT="none")
    ids = random_ids(2, 30, seed=53)
    assert torch.equal(with_none.forward(ids), without.forward(ids))


def test_zero_row_quantizes_to_zeros(int8_pair):
    q8 = int8_pair()[0]
    w = torch.randn(4, 8)
    w[2] = 0
    quantized = q8.quantize_int8(w)
    assert quantized.scale[2] == 0 and not quantized.q[2].any() and torch.isfinite(quantized.dequantize(torch.float32)).all()
    torch.testing.assert_close(quantized.dequantize(torch.float32), w, atol=w.abs().max().item() / 254, rtol=0)

"""Each hand-written component equals its transformers counterpart (float32 tight, bf16 within rounding)."""

import math
import types

import pytest
import torch
from transformers.models.qwen3 import modeling_qwen3 as ref

from conftest import TEST_DEVICE, random_ids

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def close(ours, theirs, dtype):
    if dtype == "float32":
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    else:  # bf16: the same operations in the same order; allow one rounding step
        torch.testing.assert_close(ours.float(), theirs.float(), atol=1e-2, rtol=1.6e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(engine, dtype):
    q, dt = engine(dtype=dtype), DTYPES[dtype]
    x = (torch.randn(2, 7, 64) * 3).to(TEST_DEVICE, dt)
    norm = ref.Qwen3RMSNorm(64, eps=1e-6)
    norm.weight.data = torch.rand(64) + 0.5
    norm = norm.to(TEST_DEVICE, dt)
    close(q.rms_norm(x, norm.weight.detach()), norm(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_tables_and_rotation(engine, reference, dtype):
    q, dt = engine(dtype=dtype), DTYPES[dtype]
    model = reference(dtype=dt)
    positions = torch.tensor([[0, 1, 2, 3, 100, 300], [5, 6, 7, 8, 9, 511]], device=TEST_DEVICE)
    cos_ref, sin_ref = model.model.rotary_emb(torch.zeros(1, dtype=dt, device=TEST_DEVICE), positions)
    cos, sin = q.rope_cos_sin(positions, *q.config.rope)  # the frequencies the config brings
    close(cos, cos_ref, dtype)
    close(sin, sin_ref, dtype)
    x = torch.randn(2, 6, 4, 32).to(TEST_DEVICE, dt)  # (B, T, heads, hd)
    rotated_ref, _ = ref.apply_rotary_pos_emb(x.transpose(1, 2), x.transpose(1, 2), cos_ref, sin_ref)
    close(q.apply_rope(x, cos[:, :, None], sin[:, :, None]), rotated_ref.transpose(1, 2), dtype)


def test_rope_uses_config_theta_and_head_dim(engine):
    q = engine()
    assert q.config.rope_theta == 1e6 and q.config.head_dim == 32 != q.config.hidden_size // q.config.num_attention_heads
    frequencies, scale = q.config.rope
    assert scale == 1.0 and q.config.rope_scaling is None  # as trained: no YaRN
    cos, _ = q.rope_cos_sin(torch.tensor([[1]], device=TEST_DEVICE), frequencies)
    expected = torch.cos(1e6 ** -(torch.arange(0, 32, 2) / 32))
    torch.testing.assert_close(cos[0, 0, :16].cpu(), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu(engine, dtype):
    q, dt = engine(dtype=dtype), DTYPES[dtype]
    x = (torch.randn(1000) * 6).to(TEST_DEVICE, dt)
    close(q.silu(x), torch.nn.functional.silu(x), dtype)


def test_softmax_is_stable(engine):
    q = engine()
    x = (torch.randn(3, 50) * 30 + 1000).to(TEST_DEVICE)  # exp(1000) overflows without subtracting the max
    torch.testing.assert_close(q.softmax(x), torch.softmax(x, dim=-1))
    assert q.softmax(torch.tensor([[0.0, -float("inf")]], device=TEST_DEVICE)).tolist() == [[1.0, 0.0]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear(engine, dtype):
    q, dt = engine(dtype=dtype), DTYPES[dtype]
    w = torch.randn(600, 64).to(TEST_DEVICE, dt)
    for rows in (1, 3, 8, 40):  # one row (decode) to a prefill chunk
        x = torch.randn(rows, 64).to(TEST_DEVICE, dt)
        close(q.linear(x, w), torch.nn.functional.linear(x, w), dtype)


def test_mask_causal_and_padding(engine):
    q = engine()
    pad = torch.tensor([0, 2], device=TEST_DEVICE)
    allowed = q.attention_mask(pad, start_pos=3, T=2, L=5)[:, 0, 0]  # (B, T, L): True where a query may look
    assert allowed.dtype == torch.bool
    for b in range(2):
        for t in range(2):
            for j in range(5):
                assert bool(allowed[b, t, j]) == (j <= 3 + t and j >= pad[b].item())


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_query_attention(engine, dtype):
    q, dt = engine(dtype=dtype), DTYPES[dtype]
    B, T, H, KV, L, hd = 2, 3, 4, 2, 7, 32
    query, k, v = (t.to(TEST_DEVICE, dt) for t in (torch.randn(B, T, H, hd), torch.randn(B, KV, L, hd),
                                                   torch.randn(B, KV, L, hd)))
    pad = torch.tensor([0, 3], device=TEST_DEVICE)
    mask = q.attention_mask(pad, L - T, T, L)
    module = types.SimpleNamespace(num_key_value_groups=H // KV, training=False)
    additive = torch.zeros(mask[:, 0].shape, dtype=dt, device=TEST_DEVICE).masked_fill(~mask[:, 0], -math.inf)  # M
    out_ref, _ = ref.eager_attention_forward(module, query.transpose(1, 2), k, v, additive, scaling=hd ** -0.5)
    close(q.attention(query, k, v, mask), out_ref.reshape(B, T, H * hd), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp_and_decoder_layers(engine, reference, dtype):
    """Our decoder layer, fed each reference layer's input, gives that layer's output."""
    q, dt = engine(dtype=dtype), DTYPES[dtype]
    model = reference(dtype=dt)
    ids = random_ids(2, 9)
    out = model(ids.to(model.device), output_hidden_states=True)
    hidden = out.hidden_states
    x = hidden[0]
    close(q.mlp(x, q.weights.layers[0]), model.model.layers[0].mlp(x), dtype)
    cos, sin = q.rope_cos_sin(torch.arange(9, device=model.device).expand(2, 9)[:, :, None], *q.config.rope)
    for i in range(q.config.num_hidden_layers - 1):  # the last entry of hidden_states is after the final norm
        cache = q.make_cache(2, 9)
        mask = q.attention_mask(cache.pad, 0, 9, 9)
        with q.swapped(attention=q.written_out_attention):  # Part 2's layer as written (its eager attention too)
            close(q.decoder_layer(hidden[i], q.weights.layers[i], i, cache, 0, cos, sin, mask), hidden[i + 1], dtype)

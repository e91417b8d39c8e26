"""trace(): what the engine computes on the way through the layers (residual stream, attention
probabilities per query head, logits, MoE routing) equals what transformers returns with
output_hidden_states / output_attentions (eager attention), and tracing changes nothing else."""

import pytest
import torch

from conftest import random_ids

ATOL = 1e-4


def reference_outputs(model, ids):
    """transformers' hidden states, attention probabilities and logits, plus what each MoE router chose:
    {layer: (gates, experts)} caught from its router's own outputs."""
    routes, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        router = getattr(layer.mlp, "gate", None)
        if hasattr(router, "top_k"):  # a sparse layer's Qwen3MoeTopKRouter -> (logits, gates, experts)
            hooks.append(router.register_forward_hook(lambda m, args, out, i=i: routes.__setitem__(i, out[1:])))
    try:
        out = model(ids.to(model.device), output_hidden_states=True, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    return out, routes


def assert_trace_equals_reference(q, model, ids):
    assert q.attention is q.fused_attention  # the whole engine attends in torch's fused kernel; trace still sees
    traced = q.trace(ids)
    out, routes = reference_outputs(model, ids)
    L, (B, T) = q.config.num_hidden_layers, ids.shape
    assert traced.hidden.shape == (L + 1, B, T, q.config.hidden_size) and traced.hidden.dtype == torch.float32
    assert traced.attention.shape == (L, B, q.config.num_attention_heads, T, T)
    assert traced.attention.dtype == traced.logits.dtype == torch.float32
    for i in range(L):  # transformers' last entry is after the final norm
        torch.testing.assert_close(traced.hidden[i], out.hidden_states[i], atol=ATOL, rtol=0)
        torch.testing.assert_close(traced.attention[i], out.attentions[i], atol=ATOL, rtol=0)
    torch.testing.assert_close(q.rms_norm(traced.hidden[L], q.weights.norm, q.config.rms_norm_eps), out.hidden_states[L], atol=ATOL, rtol=0)
    torch.testing.assert_close(traced.logits, out.logits, atol=ATOL, rtol=0)
    assert sorted(traced.experts) == sorted(traced.gates) == sorted(routes)
    for i, (gates, experts) in routes.items():
        assert torch.equal(traced.experts[i].reshape(B * T, -1), experts)
        torch.testing.assert_close(traced.gates[i].reshape(B * T, -1), gates, atol=ATOL, rtol=0)
    return traced


@pytest.mark.parametrize("T", [19, 300])  # 300: a long prompt
def test_dense_trace_equals_transformers(engine, reference, T):
    assert_trace_equals_reference(engine(), reference(), random_ids(2, T, seed=T))


@pytest.fixture(scope="module")
def moe(engine, reference):
    return engine("moe_dense_layer_1"), reference("moe_dense_layer_1")  # sparse, dense, sparse


def test_moe_trace_equals_transformers(moe):
    traced = assert_trace_equals_reference(*moe, random_ids(2, 23, high=400, seed=5))
    assert sorted(traced.experts) == [0, 2]  # the dense layer 1 chose no experts
    assert traced.experts[0].shape == (2, 23, moe[0].config.num_experts_per_tok)


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_left_padded_batch_traces_each_row_as_alone(engine, moe, kind):
    q = engine() if kind == "dense" else moe[0]
    rows = [random_ids(1, n, high=400, seed=n)[0].tolist() for n in (5, 17, 11)]
    batch = q.trace(rows)
    assert batch.pad.tolist() == [12, 0, 6] and batch.tokens.shape == (3, 17)
    for b, row in enumerate(rows):
        alone, p = q.trace([row]), 17 - len(row)
        torch.testing.assert_close(batch.hidden[:, b, p:], alone.hidden[:, 0], atol=ATOL, rtol=0)
        torch.testing.assert_close(batch.attention[:, b, :, p:, p:], alone.attention[:, 0], atol=ATOL, rtol=0)
        assert batch.attention[:, b, :, p:, :p].sum() == 0  # no real token looks at the padding
        torch.testing.assert_close(batch.logits[b, p:], alone.logits[0], atol=ATOL, rtol=0)
        for i in alone.experts:
            assert torch.equal(batch.experts[i][b, p:], alone.experts[i][0])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_trace_changes_nothing_and_its_last_lens_is_the_prediction(engine, dtype):
    q = engine(dtype=dtype)
    prompt = random_ids(1, 12, seed=11)[0].tolist()
    engine_functions = {n: q[n] for n in ("decoder_layer", "attention", "softmax", "route", "forward")}
    before = q.generate([prompt], 20).tokens
    traced = q.trace([prompt])
    assert q.generate([prompt], 20).tokens == before
    assert all(q[n] is f for n, f in engine_functions.items())
    with q.swapped(attention=q.written_out_attention):  # trace runs Part 2's written-out attention, which reports
        assert torch.equal(traced.logits, q.forward([prompt]))  # the same computation, not a second copy of it
    lens = q.logit_lens(traced.hidden[-1])  # the last layer's residual stream read through the final norm
    assert torch.equal(lens, traced.logits)
    assert lens[0, -1].argmax().item() == before[0][0]  # = the token generate chose first
    assert (q.logit_lens(traced.hidden[0])[0, -1] != traced.logits[0, -1]).any()


def test_trace_refuses_what_does_not_fit(engine):
    q = engine()
    short, long = random_ids(1, 8)[0].tolist(), random_ids(1, 400)[0].tolist()
    free = q.trace_bytes(1, 200)
    with q.swapped(free_memory_bytes=lambda device: free):
        q.trace([short])
        with pytest.raises(MemoryError, match=r"trace of 1 x 400 tokens .*400 x 400.* MiB"):
            q.trace([long])


def test_trace_bad_input(engine):
    q = engine()
    with pytest.raises(ValueError, match="longer than the context"):
        q.trace([[1] * (q.config.max_position_embeddings + 1)])
    with pytest.raises(TypeError, match="token-id lists"):
        q.trace([1, 2, 3])
    with pytest.raises(ValueError, match="outside the vocabulary"):  # checked as generate checks prompts
        q.trace([[1, 2], [q.config.vocab_size]])

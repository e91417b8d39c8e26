"""Qwen3.5 (Gated DeltaNet + gated attention): the notebook's engine against transformers'
Qwen3_5ForCausalLM (AutoModelForCausalLM) on tiny random checkpoints in the published layout."""

import json

import pytest
import torch

from conftest import TEST_DEVICE, edited_copy, random_ids, session_equals_fresh_generation
from notebook_engine import load_engine


VARIANT = {"published": "qwen35", "text": "qwen35_text"}  # conftest's checkpoints


@pytest.fixture(scope="module")
def q35(checkpoints):
    """name -> checkpoint dir: "published" (vision-language layout, mtp.* tensors), "text" (qwen3_5_text)."""
    return lambda name="published": checkpoints(VARIANT[name])


@pytest.fixture(scope="module")
def engine35(engine):
    return lambda name="published", dtype="float32", **env: engine(VARIANT[name], dtype, **env)


@pytest.fixture(scope="module")
def reference35(reference):
    return lambda name="published", dtype=torch.float32, attn="eager": reference(VARIANT[name], dtype, attn)


def logits(model, ids):
    with torch.no_grad():
        return model(ids.to(model.device)).logits.float()


def test_published_layout_loads_the_text_model(engine35, q35, capsys):
    raw = json.loads((q35() / "config.json").read_text())
    assert raw["model_type"] == "qwen3_5" and raw["text_config"]["model_type"] == "qwen3_5_text"
    q = engine35()
    assert q.config.layer_types.count("linear_attention") == 4 and q.config.rotary_dim == 8
    assert [layer.mixer.__name__ for layer in q.weights.layers] == (
        ["gated_deltanet"] * 3 + ["gated_attention", "gated_deltanet"])
    assert q.weights.lm_head is q.weights.embed_tokens
    assert q.weights.norm.dtype == torch.float32  # zero-centred norms kept as 1 + w
    capsys.readouterr()
    load_engine(q35(), device=TEST_DEVICE, dtype="float32")
    out = capsys.readouterr().out
    assert out.count("skipping") == 1 and "model.visual.*" in out and "mtp.*" in out


@pytest.mark.parametrize("name", ["published", "text"])
def test_float32_logits_equal_reference(engine35, reference35, name):
    q, model = engine35(name), reference35(name)
    for rows, tokens in [(3, 9), (1, 150)]:  # a batch of equal-length prompts; a prompt of several chunks
        ids = random_ids(rows, tokens, high=600, seed=tokens)
        torch.testing.assert_close(q.forward(ids), logits(model, ids), atol=1e-4, rtol=0)


def test_chunked_rule_equals_token_by_token(engine35):
    q = engine35()
    g = torch.Generator().manual_seed(0)
    B, H, T, dk, dv = 2, 3, 150, 16, 24  # 150 tokens: two whole chunks of 64 and a part
    q_, k_ = (q.l2_normalize(torch.randn(B, H, T, dk, generator=g)) for _ in range(2))
    v, g_, beta = torch.randn(B, H, T, dv, generator=g), -torch.rand(B, H, T, generator=g), torch.rand(B, H, T, generator=g)
    start = torch.randn(B, H, dk, dv, generator=g) * 0.1
    o_loop, s_loop = q.delta_rule_recurrent(q_, k_, v, g_, beta, start)
    o_chunk, s_chunk = q.delta_rule_chunked(q_, k_, v, g_, beta, start)
    torch.testing.assert_close(o_chunk, o_loop, atol=1e-5, rtol=0)
    torch.testing.assert_close(s_chunk, s_loop, atol=1e-5, rtol=0)


def test_cached_decode_equals_full_recompute_and_reads_the_state(engine35):
    q = engine35()
    ids = random_ids(2, 100, high=600, seed=3)
    full = q.forward(ids)
    cache = q.make_cache(2, 101)
    assert cache.k.shape[0] == 1 and cache.state.shape[:2] == (4, 2) and cache.conv.shape[:3] == (4, 2, 3)
    torch.testing.assert_close(q.forward(ids[:, :70], cache), full[:, :70], atol=1e-4, rtol=0)
    for pos in range(70, 100):  # one token at a time: the token-by-token rule on the cached state
        torch.testing.assert_close(q.forward(ids[:, pos:pos + 1], cache, start_pos=pos)[:, 0], full[:, pos],
                                   atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="cannot go back"):
        q.forward(ids[:, 50:60], cache, start_pos=50)
    nxt, saved = torch.tensor([[7], [8]]), (cache.conv.clone(), cache.state.clone())

    def step(corrupt=None):  # decode token 101 from the cache as it stands after token 100
        cache.conv.copy_(saved[0]), cache.state.copy_(saved[1]), setattr(cache, "filled", 100)
        if corrupt:
            getattr(cache, corrupt)[1] += 0.5  # layer 1's conv state, or its memory
        return q.forward(nxt, cache, start_pos=100)
    clean = step()
    for part in ("conv", "state"):
        assert (step(part) - clean).abs().max() > 1e-2, part


def test_greedy_generation_equals_transformers(engine35, reference35):
    from test_model import check_greedy_equals_reference
    check_greedy_equals_reference(engine35(), reference35(), new_tokens=30)


def test_left_padded_batch_equals_single_runs(engine35):
    q = engine35()
    prompts = [q.encode(t) for t in ["Hi", "What is the capital of France? Answer briefly.", "测试一下tokenizer的效果"]]
    batch = q.generate(prompts, 16)
    for b, p in enumerate(prompts):
        assert batch.tokens[b] == q.generate([p], 16).tokens[0], b
    longest = max(map(len, prompts))  # logits too: padding never reaches the conv or the memory
    cache = q.make_cache(3, longest)
    cache.set_padding([longest - len(p) for p in prompts])
    padded = q.forward(torch.tensor([[0] * (longest - len(p)) + p for p in prompts]), cache)
    for b, p in enumerate(prompts):
        torch.testing.assert_close(padded[b, longest - len(p):], q.forward([p])[0], atol=1e-4, rtol=0)


def test_bf16_within_transformers_own_bf16_error(engine35, reference35):
    """The engine attends in torch's fused kernel after Part 6, as transformers' default (SDPA) does: the budget is
    the larger of transformers' own bf16 errors, eager and SDPA."""
    q = engine35(dtype="bfloat16")
    ids = random_ids(2, 150, high=600, seed=11)
    exact = logits(reference35(), ids)
    budget = max((logits(reference35(dtype=torch.bfloat16, attn=attn), ids) - exact).abs().max() for attn in ("eager", "sdpa"))
    ours = (q.forward(ids) - exact).abs().max()
    assert ours <= budget, (ours, budget)


@pytest.mark.parametrize("context", [4096, 48])  # 48: the cache grows, its memory and snapshot carried over
def test_session_second_turn_reuses_the_snapshot(engine35, context):
    q = engine35()
    session, history = session_equals_fresh_generation(q, ["Hello there", "What did I just say?"], new_tokens=12,
                                                       context=context)
    first_prompt, second_prompt = (len(q.encode(q.render_chat(history[:i]))) for i in (2, 4))
    assert session.prefilled == [first_prompt, second_prompt - first_prompt]  # the second from the snapshot on


def test_int8_quantizes_the_matrices_only(engine35):
    q = engine35(QWEN3_QUANT="int8")
    attn, delta = q.weights.layers[3], q.weights.layers[0]
    assert all(isinstance(m, q.Int8Weight) for m in (attn.qkv_proj, attn.o_proj, delta.qkv_proj, delta.o_proj))
    assert all(isinstance(t, torch.Tensor) for t in (delta.conv1d, delta.A_log, delta.dt_bias, delta.norm))
    ids = random_ids(1, 20, high=600, seed=2)
    exact = engine35().forward(ids)
    assert (q.forward(ids) - exact).abs().max() < 0.05 * exact.abs().max()


@pytest.mark.parametrize("change, message", [
    (lambda raw: raw["text_config"]["layer_types"].__setitem__(1, "sliding_attention"), "'sliding_attention'"),
    (lambda raw: raw.update(model_type="qwen3_5_moe"), "'qwen3_5_moe'"),
    (lambda raw: raw["text_config"].update(num_experts=256), "mixture-of-experts"),
])
def test_unsupported_layer_types_and_moe_are_refused_by_name(q35, tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        load_engine(edited_copy(q35(), tmp_path / "ckpt", change), device=TEST_DEVICE, dtype="float32")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cache_preflight_counts_the_fixed_memory(engine, monkeypatch, dtype):
    """A cache for Qwen3.5 needs its KV slots plus every Gated DeltaNet layer's state, per sequence: exactly
    what make_cache allocates, in bf16 and float32."""
    q = engine("qwen35", dtype)
    made = q.make_cache(2, 128)
    kv, state = made.k.nbytes + made.v.nbytes, made.conv.nbytes + made.state.nbytes
    assert state > 0 and kv == 2 * 128 * q.kv_bytes_per_token()
    monkeypatch.setitem(q._module.__dict__, "free_memory_bytes", lambda device: kv + state - 1)
    with pytest.raises(MemoryError, match="KV cache for 2 x 128 tokens"):
        q.new_cache(2, 128)
    monkeypatch.setitem(q._module.__dict__, "free_memory_bytes", lambda device: kv + state)
    assert q.new_cache(2, 128).max_len == 128


def test_compile_on_is_refused_by_name(q35):
    with pytest.raises(ValueError, match="QWEN3_COMPILE='on' but this is Qwen3.5"):
        load_engine(q35(), device=TEST_DEVICE, dtype="float32", QWEN3_COMPILE="on")

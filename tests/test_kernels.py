"""Every kernel form the calibration can choose gives the reference's results when forced, and the
defaults (dtype, KV cache, prefill attention) are chosen as documented."""

import pytest
import torch

from conftest import BF16_PACKING, TEST_DEVICE, random_ids
from notebook_engine import load_engine

FORCED = [dict(QWEN3_MATMUL=m) for m in ("native", "widen", "packed")] + [
    dict(QWEN3_KV_DTYPE=k) for k in ("model", "float32")]


@pytest.fixture(scope="module")
def forced(checkpoints):
    cache = {}

    def get(dtype, **env):
        key = (dtype, tuple(sorted(env.items())))
        if key not in cache:
            cache[key] = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype=dtype, **env)
        return cache[key]
    return get


def cpu_only(env):
    if TEST_DEVICE != "cpu" and env.get("QWEN3_MATMUL") in ("widen", "packed"):
        pytest.skip("widen and packed are CPU forms")


@pytest.mark.parametrize("env", FORCED, ids=lambda e: "-".join(f"{k}={v}" for k, v in e.items()))
def test_forced_form_float32_equals_reference(forced, reference, env):
    cpu_only(env)
    q, model = forced("float32", **env), reference()
    ids = random_ids(2, 300, seed=41)  # 300 tokens: prefill attention in query blocks of ATTENTION_BLOCK
    torch.testing.assert_close(q.forward(ids), model(ids.to(model.device)).logits, atol=1e-4, rtol=0)
    tokens = q.generate([ids[0, :20].tolist(), ids[1, :7].tolist()], 6).tokens  # decode steps, a padded batch
    assert tokens[1] == q.generate([ids[1, :7].tolist()], 6).tokens[0]


def within_transformers_own_rounding(ours, ids, reference):
    """bf16 logits as close to the float32 model as one of transformers' own bf16 paths (eager, SDPA):
    the largest error no larger, the mean error within 1% (a sum in another order moves it that much)."""
    truth = reference()(ids.to(reference().device)).logits
    error = lambda logits: (logits.float().to(truth.device) - truth).abs()
    theirs = [error(reference(dtype=torch.bfloat16, attn=attn)(ids.to(truth.device)).logits) for attn in ("eager", "sdpa")]
    mine = error(ours)
    return mine.max() <= max(t.max() for t in theirs) and mine.mean() <= 1.01 * max(t.mean() for t in theirs), (
        (mine.max(), mine.mean()), [(t.max(), t.mean()) for t in theirs])


@pytest.mark.parametrize("env", FORCED, ids=lambda e: "-".join(f"{k}={v}" for k, v in e.items()))
def test_forced_form_bf16_within_transformers_own_rounding(forced, reference, env):
    cpu_only(env)
    if env.get("QWEN3_MATMUL") == "packed" and not BF16_PACKING:  # an AVX2 CPU: refused, saying what to use
        with pytest.raises(ValueError, match="AVX-512 or AVX-NE-CONVERT: use auto, native or widen"):
            forced("bfloat16", **env)
        return
    q = forced("bfloat16", **env)
    for rows in (1, 16):
        ids = random_ids(rows, 40, seed=rows)
        ok, detail = within_transformers_own_rounding(q.forward(ids), ids, reference)
        assert ok, (env, detail)


MANY_ROW_FORMS = {"widen_packed": {"packed": {float("inf"): "widen_packed"}},
                  "float32 chunks": {"attention": "float32"},  # a bf16 cache's keys widened per chunk
                  "float32 cache, bf16 chunks": {"kv_cache": "float32", "attention": "model"}}  # narrowed per chunk


@pytest.mark.parametrize("name", MANY_ROW_FORMS)
def test_many_row_forms_equal_reference(forced, reference, name, monkeypatch):
    """What the calibration may choose for a long prompt: packed weights unpacked and widened, and a
    chunk's keys converted once to the dtype long chunks attend in, from either cache dtype (300 tokens:
    three blocks of queries)."""
    if TEST_DEVICE != "cpu":
        pytest.skip("CPU forms")
    ids = random_ids(2, 300, seed=43)
    kernels = MANY_ROW_FORMS[name]
    if "attention" not in kernels:  # a float32 model's chunks and cache are float32 already: a repeat of the plain run
        q, model = forced("float32", QWEN3_MATMUL="packed"), reference()
        with q.swapped(KERNELS={**q.KERNELS, **kernels}):
            torch.testing.assert_close(q.forward(ids), model(ids).logits, atol=1e-4, rtol=0)
    if "attention" not in kernels and not BF16_PACKING:
        return  # no bf16 packed weights on this CPU (the refusal: test_forced_form_bf16_...)
    q = forced("bfloat16", QWEN3_MATMUL="packed" if BF16_PACKING else "native")
    seen, cached, written_out, blocked = set(), set(), q.written_out_attention, q.blocked_attention
    assert q.attention is blocked  # the seam Part 2 declared, as the engine rebinds it
    monkeypatch.setitem(q._module.__dict__, "written_out_attention",
                        lambda qs, k, v, mask: seen.add(k.dtype) or written_out(qs, k, v, mask))
    monkeypatch.setitem(q._module.__dict__, "attention", lambda qs, k, *a: cached.add(k.dtype) or blocked(qs, k, *a))
    with q.swapped(KERNELS={**q.KERNELS, **kernels}):  # generate's cache: in the dtype KERNELS names
        ok, detail = within_transformers_own_rounding(q.forward(ids, q.new_cache(*ids.shape)), ids, reference)
    assert ok, (name, detail)
    assert cached == {torch.float32 if kernels.get("kv_cache") == "float32" else torch.bfloat16}  # the cache's keys
    assert seen == {torch.float32 if kernels.get("attention") == "float32" else torch.bfloat16}  # the blocks' keys


def test_forced_settings_pin_the_choices(forced):
    if TEST_DEVICE != "cpu":
        pytest.skip("CPU forms")
    assert set(forced("bfloat16", QWEN3_MATMUL="native").KERNELS["plain"].values()) == {"native"}
    assert set(forced("bfloat16", QWEN3_MATMUL="widen").KERNELS["plain"].values()) == {"widen"}
    packed = forced("bfloat16" if BF16_PACKING else "float32", QWEN3_MATMUL="packed")  # float32: on any CPU
    assert packed.KERNELS["weights"] == "packed"
    layer = packed.weights.layers[0]
    assert all(getattr(layer, n).is_mkldnn for n in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"))
    assert not packed.weights.embed_tokens.is_mkldnn  # tied: the lookup table stays plain (and serves lm_head)
    plain = forced("bfloat16" if BF16_PACKING else "float32", QWEN3_MATMUL="native").weights.layers[0]
    assert torch.equal(layer.k_proj, plain.k_proj) and torch.equal(layer.up_proj, plain.up_proj)  # views still read
    assert forced("bfloat16", QWEN3_KV_DTYPE="float32").new_cache(1, 4).k.dtype == torch.float32
    assert forced("bfloat16", QWEN3_KV_DTYPE="model").new_cache(1, 4).k.dtype == torch.bfloat16
    for kept in ("model", "float32"):  # a forced cache dtype: long chunks attend in it too
        assert forced("bfloat16", QWEN3_KV_DTYPE=kept).KERNELS["attention"] == kept


def test_prefill_attention_blocks_equal_one_block(forced, monkeypatch):
    q = forced("float32", QWEN3_MATMUL="native")
    ids = random_ids(2, 260, seed=42)
    blocked = q.forward(ids)
    monkeypatch.setitem(q._module.__dict__, "ATTENTION_BLOCK", 10_000)
    torch.testing.assert_close(q.forward(ids), blocked, atol=1e-4, rtol=0)  # float32: the order of sums differs


def test_attention_block_never_reads_future_keys(forced, monkeypatch):
    """A block of queries gets only the keys up to its own last position: NaN in later keys cannot leak."""
    q = forced("float32", QWEN3_MATMUL="native")
    B, T, H, KV, hd, block = 1, 10, 4, 2, 8, q.ATTENTION_BLOCK
    monkeypatch.setitem(q._module.__dict__, "ATTENTION_BLOCK", 4)
    monkeypatch.setitem(q._module.__dict__, "KEY_STEP", 4)
    qs, k, v = torch.randn(B, T, H, hd), torch.randn(B, KV, T, hd), torch.randn(B, KV, T, hd)
    mask = q.attention_mask(torch.zeros(B, dtype=torch.long), 0, T, T).float()
    clean = q.blocked_attention(qs, k, v, mask)
    k[:, :, 8:], v[:, :, 8:] = float("nan"), float("nan")  # keys of the last block only
    poisoned = q.blocked_attention(qs, k, v, mask)
    assert torch.equal(poisoned[:, :8], clean[:, :8]) and torch.isnan(poisoned[:, 8:]).all()
    assert block == 128


def test_auto_dtype(forced, monkeypatch):
    q = forced("auto")
    assert q.dtype == torch.bfloat16 if TEST_DEVICE == "cpu" else q.dtype in (torch.bfloat16, torch.float32)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))  # a T4
    assert q.pick_dtype("auto", torch.device("cuda"))[0] == torch.float32
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # an A100
    assert q.pick_dtype("auto", torch.device("cuda"))[0] == torch.bfloat16
    assert q.pick_dtype("float32", torch.device("cpu"))[0] == torch.float32


def test_decode_reads_whole_key_steps_and_prefill_uses_few_shapes(forced, monkeypatch):
    """Attention reads the cache in whole KEY_STEPs (slots past the chunk masked), prefill chunks come in
    PREFILL_CHUNK, a multiple of KEY_STEP and a short tail: few matrix shapes, the same logits."""
    q = forced("float32", QWEN3_MATMUL="native")
    seen, real = [], q.attention
    monkeypatch.setitem(q._module.__dict__, "attention", lambda qs, k, *a: seen.append(k.shape[2]) or real(qs, k, *a))
    chunks, real_forward = [], q.forward_hidden
    monkeypatch.setitem(q._module.__dict__, "forward_hidden", lambda ids, *a: chunks.append(ids.shape[1]) or real_forward(ids, *a))
    monkeypatch.setitem(q._module.__dict__, "PREFILL_CHUNK", 256)
    prompt = random_ids(1, 300, seed=43)[0].tolist()
    q.generate([prompt], 3)
    assert chunks == [256, 44, 1, 1]  # 300 = 256 + 0 * 128 + 44, then two decode steps
    layers = q.config.num_hidden_layers
    assert set(seen[-2 * layers:]) == {384}  # decode at slots 300, 301: keys 0..383, the rest masked
    monkeypatch.undo()
    cache = q.make_cache(1, 400)
    q.forward(torch.tensor([prompt]), cache)
    cache.k[:, :, :, 350:] = float("nan")  # as if the slots past the sequence held garbage
    full = q.forward(torch.tensor([prompt + [5]]))
    step = q.forward(torch.tensor([[5]]), cache, start_pos=300)
    assert torch.isnan(step).any()  # NaN keys are read (0 * NaN): the cache must hold finite values there...
    cache.k[:, :, :, 350:] = 0      # ...which make_cache guarantees (zeros), and then the mask hides them
    torch.testing.assert_close(q.forward(torch.tensor([[5]]), cache, start_pos=300)[:, 0], full[:, -1], atol=1e-4, rtol=0)


def test_calibrate_again_keeps_packed_weights_working(forced, reference):
    if TEST_DEVICE != "cpu":
        pytest.skip("packing is a CPU form")
    q = forced("float32", QWEN3_MATMUL="packed")
    q.calibrate()  # a second time: the weights stay packed, nothing breaks
    assert q.KERNELS["weights"] == "packed"
    ids = random_ids(1, 20, seed=44)
    torch.testing.assert_close(q.forward(ids), reference()(ids.to(TEST_DEVICE)).logits, atol=1e-4, rtol=0)


def test_small_models_keep_the_plain_forms(forced):
    """Below the caches' size the timings are noise: the tiny model keeps native products, model-dtype cache."""
    kernels = forced("bfloat16").KERNELS
    assert set(kernels["plain"].values()) == {"native"} and kernels["weights"] == "plain" and kernels["kv_cache"] == "model"


def test_left_padded_long_prompts_equal_single_runs(forced, reference):
    """A padded batch's long chunk takes the whole mask in every block (a block of an unpadded one only
    over its own slots' keys): each row's logits equal the reference's with its padding masked, and its
    own single run's. Padding queries see only themselves (their output is never read)."""
    q, model = forced("float32", QWEN3_MATMUL="native"), reference()
    long, short = random_ids(1, 300, seed=44)[0], random_ids(1, 170, seed=45)[0]
    ids = torch.stack([long, torch.cat([torch.zeros(130, dtype=long.dtype), short])])
    cache = q.make_cache(2, 300)
    cache.set_padding([0, 130])
    logits = q.forward(ids, cache)
    theirs = model(ids.to(model.device), attention_mask=(torch.arange(300) >= torch.tensor([[0], [130]])).long().to(model.device)).logits
    torch.testing.assert_close(logits[0], theirs[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1, 130:], theirs[1, 130:], atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1, 130:], q.forward(short[None])[0], atol=1e-4, rtol=0)
    assert torch.isfinite(logits).all()

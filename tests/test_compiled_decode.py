"""The static decode step (Part 5, "Why a GPU waits for Python"): fixed shapes, positions as tensors, the cache
written in place, compiled with torch.compile under QWEN3_COMPILE=on. On the CPU here (the default torch.compile
mode; CUDA graphs need a GPU). Each compiled shape costs seconds of C++ compilation, so these tests compile three
graphs in all: batch 1 greedy, batch 2 greedy, batch 2 sampled."""

import dataclasses

import pytest
import torch

from conftest import TEST_DEVICE, random_ids
from notebook_engine import load_engine


@pytest.fixture(scope="module")
def compiled(checkpoints):
    return load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32", QWEN3_COMPILE="on")


def graph_counts():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def test_static_step_logits_equal_the_eager_step(engine, reference):
    """Attending over every slot of the cache (masked) with a tensor position gives the eager step's logits,
    across a KEY_STEP boundary and at the cache's last slot; row 1 is left-padded; both equal transformers.
    The two steps sum in other orders (over more slots, in other blocks), so in float32 they may differ by
    what float32 rounding does to this computation: transformers' own float32 logits differ from its
    float64 ones by `rounding`, and two computations each that far from the exact logits differ by at most
    twice it. Absolute, not relative: the error of a small logit is set by the size of the sums behind it."""
    q = engine()
    max_len, n_prompt = 2 * q.KEY_STEP, q.KEY_STEP - 3
    ids = random_ids(2, max_len, seed=11)
    eager, static = q.make_cache(2, max_len), q.make_cache(2, max_len)
    for cache in (eager, static):
        cache.set_padding([0, 3])
        q.forward(ids[:, :n_prompt].to(TEST_DEVICE), cache)
    ref = reference()(ids.to(TEST_DEVICE)).logits.float()  # row 0, unpadded, as one whole sequence
    rounding = (ref[0] - reference(dtype=torch.float64)(ids[:1].to(TEST_DEVICE)).logits[0]).abs().max().item()

    def check(pos):
        token = ids[:, pos:pos + 1].to(TEST_DEVICE)
        want = q.forward(token, eager, pos)[:, -1]
        got = q.static_logits(token, torch.tensor(pos, device=TEST_DEVICE), static)
        torch.testing.assert_close(got, want, atol=2 * rounding, rtol=0)
        torch.testing.assert_close(got[0], ref[0, pos], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(static.k[:, :, :, pos], eager.k[:, :, :, pos])  # written in place, at pos
        static.filled = pos + 1

    for pos in range(n_prompt, q.KEY_STEP + 2):  # 125, 126, 127 | 128, 129: over the KEY_STEP boundary
        check(pos)
    q.forward(ids[:, q.KEY_STEP + 2:max_len - 1].to(TEST_DEVICE), eager, q.KEY_STEP + 2)  # fill up to the end
    q.forward(ids[:, q.KEY_STEP + 2:max_len - 1].to(TEST_DEVICE), static, q.KEY_STEP + 2)
    check(max_len - 1)  # the last slot of the cache


def test_compiled_greedy_equals_eager_and_compiles_once(engine, compiled):
    """Two generations of the same batch size and cache length: tokens as eager's, one compile, no graph break."""
    graphs, breaks = graph_counts()
    for seed in (1, 2):
        prompt = random_ids(1, 9, seed=seed).tolist()
        assert compiled.generate(prompt, 24).tokens == engine().generate(prompt, 24).tokens
    assert graph_counts() == (graphs + 1, breaks)
    assert compiled.reusable_cache(1, 40).k[0].data_ptr() == compiled.reusable_cache(1, 100).k[0].data_ptr()


def test_long_generations_get_a_cache_a_multiple_of_2048_slots(compiled):
    """A power of two up to 2,048 slots, then multiples of 2,048: a 4,128-token generation reads at most 4,608 slots
    (the quarter of a 6,144-slot cache that holds it), not 6,144 of an 8,192-slot one."""
    longer = dataclasses.replace(compiled.config, max_position_embeddings=16384)
    with compiled.swapped(config=longer):
        sizes = [compiled.reusable_cache(1, n).max_len for n in (100, 2000, 2049, 4128, 6145)]
    assert sizes == [128, 2048, 4096, 6144, 8192]
    assert compiled.reusable_cache(1, 600).max_len == compiled.config.max_position_embeddings  # 1,024 > 512: clamped


def test_compiled_left_padded_batch_equals_eager(engine, compiled):
    rows = [random_ids(1, 5, seed=3)[0].tolist(), random_ids(1, 11, seed=4)[0].tolist()]
    assert compiled.generate(rows, 20).tokens == engine().generate(rows, 20).tokens


def test_compiled_sampling_equals_eager_with_the_same_seed(engine, compiled):
    rows = [random_ids(1, 5, seed=5)[0].tolist(), random_ids(1, 11, seed=6)[0].tolist()]
    kw = dict(temperature=0.8, top_k=50, top_p=0.9, seed=7)
    got = compiled.generate(rows, 20, **kw).tokens
    assert got == engine().generate(rows, 20, **kw).tokens
    assert got != engine().generate(rows, 20, **{**kw, "seed": 8}).tokens  # the draws do depend on the seed


@pytest.mark.parametrize("env, message", [
    (dict(QWEN3_COMPILE="yes"), "QWEN3_COMPILE='yes' is not a valid setting: use one of auto, on, off"),
])
def test_compile_settings_checked(checkpoints, env, message):
    with pytest.raises(ValueError, match=message):
        load_engine(checkpoints("tiny"), device="cpu", dtype="float32", **env)


def test_mixture_of_experts_stays_eager(checkpoints):
    """Which experts run depends on the values: QWEN3_COMPILE=on is refused by name, auto stays eager."""
    with pytest.raises(ValueError, match="QWEN3_COMPILE='on' but this is a mixture-of-experts model"):
        load_engine(checkpoints("moe"), device=TEST_DEVICE, QWEN3_COMPILE="on")
    moe = load_engine(checkpoints("moe"), device=TEST_DEVICE, QWEN3_COMPILE="auto")
    assert not moe.COMPILE and moe.compile_note.startswith("this is a mixture-of-experts model")


def test_auto_decodes_eagerly_on_a_cpu_and_says_how_to_compile(checkpoints, monkeypatch):
    """QWEN3_COMPILE=auto is a rule, not a measurement: eager on a CPU, the note naming `on`; without a C++
    compiler even `on` decodes eagerly, saying why."""
    if TEST_DEVICE != "cpu":
        pytest.skip("the CPU rule")
    q = load_engine(checkpoints("tiny"), device="cpu", dtype="float32")  # the default, auto
    assert q.QWEN3_COMPILE == "auto" and not q.COMPILE and "QWEN3_COMPILE=on compiles it" in q.compile_note
    assert "cpu_compile_pays" not in q and "DISPATCHES_PER_LAYER" not in q  # no estimate, no timing
    with q.swapped(QWEN3_COMPILE="on"):
        assert q.decode_step_compiled() == (True, None)
    monkeypatch.setattr(q.shutil, "which", lambda name: None)  # no C++ compiler: eager whatever the setting
    for setting in ("auto", "on"):
        with q.swapped(QWEN3_COMPILE=setting):
            compiled, why = q.decode_step_compiled()
            assert not compiled and "needs a C++ compiler (g++, clang++ or $CXX): none was found" in why


@pytest.fixture
def recorded(checkpoints):
    """A QWEN3_COMPILE=on engine whose compiled step is a recorder around the eager static step (nothing is
    compiled: what static_step and generate() do around it is what these tests check)."""
    q = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32", QWEN3_COMPILE="on")
    calls = []

    def compiled(ids, slot, cache, keys):
        calls.append((ids.is_contiguous(), keys))
        return q.static_logits(ids, slot, cache, keys)
    q.compiled_decode_step = compiled
    q.COMPILED["source"]["compiled_decode_step"] = compiled
    return q, calls


def test_a_failed_compile_decodes_eagerly_and_says_why_once(recorded, engine, capsys):
    q, _ = recorded

    def fails(*args):
        raise RuntimeError("InductorError: LoweringException: no C++ compiler\nmore detail")
    q.compiled_decode_step = q.COMPILED["source"]["compiled_decode_step"] = fails
    prompt = random_ids(1, 9, seed=1).tolist()
    for _ in range(2):
        assert q.generate(prompt, 12).tokens == engine().generate(prompt, 12).tokens
    said = capsys.readouterr().out
    assert said.count("decode eagerly from here on") == 1 and "LoweringException: no C++ compiler" in said
    assert q.COMPILED["failed"] and not q.COMPILED["seconds"]


def test_a_swapped_function_decodes_eagerly(recorded, engine):
    """The compiled step was made from the engine's functions: swapping one (as the demo cells do) must be
    seen, so generate() decodes eagerly then, and with the compiled step again once it is put back."""
    q, calls = recorded
    prompt = random_ids(1, 9, seed=2).tolist()
    q.generate(prompt, 6)
    assert len(calls) == 5
    drawn = []
    with q.swapped(sample=lambda logits, **how: drawn.append(1) or logits.argmax(dim=-1)):
        assert q.generate(prompt, 6).tokens == engine().generate(prompt, 6).tokens
    assert len(calls) == 5 and len(drawn) == 6  # the prefill's token and 5 eager steps, all through `sample`
    q.generate(prompt, 6)
    assert len(calls) == 10


def test_sampling_settings_compile_no_graph_and_strided_ids_are_made_contiguous(recorded):
    """The compiled step computes logits only: sampling (sample(), eager, after it) keys no new graph, greedy
    or sampled; a speculative step's strided ids are made contiguous (another layout would compile again)."""
    q, calls = recorded
    prompt = random_ids(1, 9, seed=3).tolist()
    q.generate(prompt, 6, top_k=5)
    q.generate(prompt, 6, temperature=0.7, top_p=0.5, min_p=0.1, seed=0)
    q.generate([prompt[0] * 2] * 2, 12, speculate=4)  # repeated prompts: drafts accepted, rows strided
    assert sorted(k[:2] for k in q.COMPILED["seconds"]) == [(1, 128), (2, 128)]  # batch 1, then 2: one graph each
    assert all(contiguous for contiguous, _ in calls) and {keys for _, keys in calls} == {128}


def test_the_step_reads_the_filled_part_of_the_cache_in_at_most_four_lengths(recorded, engine):
    """A 256-slot cache is read in its first 128 slots while they hold the sequence, then in all 256: one
    compile each (announced), and the tokens of the eager step, which reads whole KEY_STEPs."""
    q, calls = recorded
    prompt = random_ids(1, 9, seed=5).tolist()
    assert q.generate(prompt, 150).tokens == engine().generate(prompt, 150).tokens
    reads = [keys for _, keys in calls]
    assert reads == sorted(reads) and set(reads) == {128, 256} and reads.count(128) == 128 - 9
    assert sorted(k[-1] for k in q.COMPILED["seconds"]) == [128, 256]


@pytest.mark.parametrize("quant", ["int8", "int4"])
def test_quantized_weights_compile_through_aten_s_fused_kernels(checkpoints, quant):
    """int8 and int4 weights bring their own products (aten's fused kernels where the device has them) into
    the compiled step: frozen in, it compiles, and decodes as the eager step does (float32: greedy tokens of
    random weights are near ties in bf16, and the fused attention rounds by chunk length)."""
    q = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32", QWEN3_QUANT=quant,
                    QWEN3_COMPILE="on")
    assert q.FUSED_INT8 if quant == "int8" else q.weights.layers[0].qkv_proj.layout == q.int4_layout()
    eager = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32", QWEN3_QUANT=quant,
                        QWEN3_COMPILE="off")
    prompt = random_ids(1, 9, seed=4).tolist()
    assert q.generate(prompt, 10).tokens == eager.generate(prompt, 10).tokens
    assert not q.COMPILED["failed"] and len(q.COMPILED["seconds"]) == 1

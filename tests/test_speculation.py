"""generate(..., speculate=K): prompt-lookup drafts verified in one forward pass. Greedy tokens equal
plain decoding (dense, MoE, batches, a session's cached prefix); scripted models show which drafts
are kept; sampling keeps the distribution of plain sampling."""

import math

import pytest
import torch

from conftest import TEST_DEVICE, session_equals_fresh_generation

QUESTIONS = ["What is the capital of France?", "Write a haiku about tensors.", "Count from 1 to 10."]


def chat_prompt(q, text, thinking=True):
    return q.encode(q.render_chat([{"role": "user", "content": text}], enable_thinking=thinking))


@pytest.fixture(scope="module")
def moe_engine(engine):
    return engine("moe")


def chunk_sizes(q, monkeypatch):
    """Record the token count of every forward_hidden call (prefill chunks, then decode steps)."""
    sizes, real = [], q.forward_hidden
    monkeypatch.setitem(q._module.__dict__, "forward_hidden",
                        lambda ids, cache, start_pos=0: sizes.append(ids.shape[1]) or real(ids, cache, start_pos))
    return sizes


@pytest.mark.parametrize("model", ["dense", "moe"])
def test_greedy_tokens_equal_plain_decoding(engine, moe_engine, model):
    q = engine() if model == "dense" else moe_engine
    prompts = [chat_prompt(q, text, thinking) for text, thinking in zip(QUESTIONS, (True, False, True))]
    for prompt in prompts:
        plain = q.generate([prompt], 32)
        guessed = q.generate([prompt], 32, speculate=4)
        assert guessed.tokens == plain.tokens
        assert plain.forward_passes == len(plain.tokens[0]) - 1
        assert guessed.forward_passes <= plain.forward_passes
    batch_plain, batch_guessed = q.generate(prompts, 32), q.generate(prompts, 32, speculate=4)
    assert batch_guessed.tokens == batch_plain.tokens  # left-padded rows of different lengths


def test_repeating_continuations_need_fewer_passes(engine):
    """The tiny model's greedy replies loop; looked-up drafts then give well over one token per pass."""
    q = engine()
    prompt = chat_prompt(q, "Count from 1 to 10.")
    result = q.generate([prompt], 40, speculate=4)
    assert len(result.tokens[0]) == 40 and result.tokens == q.generate([prompt], 40).tokens
    assert len(result.tokens[0]) / result.forward_passes >= 1.5, result.forward_passes


def test_session_with_a_cached_prefix_equals_fresh_generation(engine):
    q = engine()
    session, history = session_equals_fresh_generation(q, ["Hello there", "Say it again, say it again", "Thanks"],
                                                       new_tokens=24, context=256, speculate=4)
    assert session.prefilled[-1] < len(q.encode(q.render_chat(history[:-1])))  # the prefix came from the cache


def test_verification_chunks_have_two_sizes(engine, monkeypatch):
    """Bounded shapes: a decode step feeds 1 token (no draft) or exactly K + 1, never anything between."""
    q = engine()
    prompt = chat_prompt(q, "Count from 1 to 10.")
    sizes = chunk_sizes(q, monkeypatch)
    q.generate([prompt], 40, speculate=3)
    decode = sizes[1:]  # after the one prefill chunk
    assert set(decode) == {1, 4}


def test_prompt_lookup_rules(engine):
    q = engine()
    assert q.prompt_lookup([5, 6, 7, 1, 2, 3, 9, 5, 6, 7], 4) == [1, 2, 3, 9]  # the match at the very start
    assert q.prompt_lookup([1, 2, 3, 4, 9, 3, 5, 2, 3], 2) == [4, 9]           # the longest match, not the latest [3]
    assert q.prompt_lookup([3, 8, 1, 3, 7, 2, 3], 2) == []                     # one token matches by chance: no draft
    assert q.prompt_lookup([3, 8, 1, 3, 7, 2, 3], 2, shortest=1) == [7, 2]     # most recent occurrence of [3]
    assert q.prompt_lookup([9, 3, 8, 1, 9, 3, 7, 2, 9, 3], 2) == [7, 2]        # most recent occurrence of [9, 3]
    assert q.prompt_lookup([4, 5, 4, 5], 5) == [4, 5, 4, 5, 4]                  # the copy runs into itself
    assert q.prompt_lookup([1, 2, 3], 4) == [] and q.prompt_lookup([1], 4) == []


class Scripted:
    """A stand-in for the model: row b continues along texts[b] (the model's choice after position i is
    texts[b][i + 1]), or, with `bigram`, samples from a distribution that depends on the last token
    only. Records the chunks it is fed."""

    def __init__(self, q, texts=None, bigram=None):
        self.q, self.bigram, self.chunks = q, bigram, []
        self.texts = None if texts is None else torch.tensor([t + [0] * (80 - len(t)) for t in texts], device=TEST_DEVICE)

    def forward_hidden(self, ids, cache, start_pos=0):
        self.chunks.append(ids.tolist())
        cache.filled = start_pos + ids.shape[1]
        B, T = ids.shape
        positions = start_pos + torch.arange(T, device=ids.device) - cache.pad[:, None]
        rows = torch.arange(B, device=ids.device)[:, None].expand(B, T)
        return torch.stack([ids, positions, rows], dim=-1).float()             # (B, T, 3)

    def lm_head(self, hidden):
        token, position, row = hidden.long().unbind(-1)
        if self.bigram is not None:
            return self.bigram[token]                                           # (..., V) log-probabilities
        wanted = self.texts[row, position + 1]
        return torch.zeros(*wanted.shape, self.q.config.vocab_size, device=hidden.device).scatter(-1, wanted[..., None], 1.0)

    def install(self, monkeypatch):
        for name in ("forward_hidden", "lm_head"):
            monkeypatch.setitem(self.q._module.__dict__, name, getattr(self, name))
        return self


def scripted_run(q, monkeypatch, text, prompt_len, max_new_tokens, k=4):
    """(speculated result, its decode chunks) with the model continuing along text; checks that the
    tokens equal plain decoding's."""
    model = Scripted(q, [text]).install(monkeypatch)
    guessed = q.generate([text[:prompt_len]], max_new_tokens, speculate=k)
    chunks = [c[0] for c in model.chunks[1:]]
    assert guessed.tokens == q.generate([text[:prompt_len]], max_new_tokens).tokens
    return guessed, chunks


def test_every_draft_rejected(engine, monkeypatch):
    q = engine()
    prompt = [9, 1, 50, 1, 2, 50, 2, 3, 50, 3, 4, 50, 4, 5, 50, 9]  # each pair the model makes is followed by 50
    result, chunks = scripted_run(q, monkeypatch, prompt + [1, 2, 3, 4, 5, 6], len(prompt), 6)  # it goes 1, 2, 3 ...
    assert result.tokens == [[1, 2, 3, 4, 5, 6]] and result.forward_passes == 5
    assert chunks[:4] == [[1, 50, 1, 2, 50], [2, 50, 2, 3, 50], [3, 50, 3, 4, 50], [4, 50, 4, 5, 50]]


def test_every_draft_accepted(engine, monkeypatch):
    q = engine()
    text = list(range(10, 20)) * 4                     # the model repeats a 10-token passage
    result, chunks = scripted_run(q, monkeypatch, text, 13, 16)
    assert result.tokens == [text[13:29]] and result.forward_passes == 3  # 1 + 3 passes x (4 drafts + 1)
    assert chunks == [text[13:18], text[18:23], text[23:28]]


def test_match_at_the_start_of_the_prompt(engine, monkeypatch):
    q = engine()
    text = [5, 6, 7, 1, 2, 3, 4, 5, 6] + [7, 1, 2, 3, 4, 5]
    result, chunks = scripted_run(q, monkeypatch, text, 9, 6)
    assert chunks[0] == [7, 1, 2, 3, 4]                # [5, 6, 7] matched at position 0
    assert result.tokens == [text[9:]] and result.forward_passes == 1


def test_stop_id_inside_an_accepted_draft(engine, monkeypatch):
    q = engine()
    stop = q.config.stop_ids[0]
    text = [1, 2, 3, stop, 9, 8, 1, 2] + [3, stop, 9, 8, 1, 2, 3]
    result, chunks = scripted_run(q, monkeypatch, text, 8, 10)
    assert chunks == [[3, stop, 9, 8, 1]]              # all four drafts agree with the model
    assert result.tokens == [[3, stop]]                # what followed the stop id is dropped


def test_batch_keeps_the_drafts_every_row_agrees_with(engine, monkeypatch):
    q = engine()
    text0 = list(range(10, 20)) * 4                     # row 0: a passage the drafts predict
    text1 = [12, 13, 50, 51, 52, 10, 11, 12] + list(range(13, 30))  # row 1: [12, 13] was followed by 50, not 14
    model = Scripted(q, [text0, text1]).install(monkeypatch)
    rows = [text0[:13], text1[:8]]
    result = q.generate(rows, 6, speculate=4)
    assert result.tokens == [text0[13:19], text1[8:14]] == q.generate(rows, 6).tokens
    assert model.chunks[1] == [text0[13:18], [13, 50, 51, 52, 10]]  # row 0's drafts are right, row 1's are not
    assert [len(c[0]) for c in model.chunks[2:6]] == [1] * 4  # then row 1 has no draft: plain steps
    assert result.forward_passes == 5                   # so the batch gained nothing


def test_speculate_errors(engine):
    q = engine()
    for bad in (-1, 1.5, True, q.MAX_SPECULATE + 1):
        with pytest.raises(ValueError, match="speculate"):
            q.generate([[1, 2, 3]], 4, speculate=bad)
    with pytest.raises(ValueError, match="speculate"):
        q.ChatSession().ask("hi", speculate=-2)


def test_seeded_sampling_with_speculation_gives_a_valid_reply(engine):
    q = engine()
    prompt = chat_prompt(q, "Count from 1 to 10.")
    first = q.generate([prompt], 40, temperature=0.7, top_k=20, seed=5, speculate=4)
    assert first.tokens == q.generate([prompt], 40, temperature=0.7, top_k=20, seed=5, speculate=4).tokens
    tokens = first.tokens[0]
    assert 1 <= len(tokens) <= 40 and all(0 <= t < q.config.vocab_size for t in tokens)
    assert not set(tokens[:-1]) & set(q.config.stop_ids) and first.forward_passes <= len(tokens) - 1


def test_speculative_sampling_keeps_the_distribution(engine, monkeypatch):
    """A bigram model over tokens 1, 2, 3: the first three sampled tokens, over many rows, follow the
    exact joint probabilities, with drafts (from the prompt) verified at every step."""
    q = engine()
    p = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.25, 0.35, 0.4]])  # p[a - 1, b - 1] = P(b after a)
    bigram = torch.full((q.config.vocab_size, q.config.vocab_size), -math.inf)
    bigram[1:4, 1:4] = p.log()
    model = Scripted(q, bigram=bigram.to(TEST_DEVICE)).install(monkeypatch)
    prompt = [1, 1, 2, 1, 3, 2, 2, 3, 3, 1]  # every pair of 1, 2, 3 occurs: each step finds a 2-token match
    rows, n = [], 3
    for seed in range(4):
        rows += q.generate([prompt] * 2500, n, temperature=1.0, seed=seed, speculate=4).tokens
    assert all(len(c[0]) == 5 for c in model.chunks if len(c[0]) != len(prompt))  # every step verified drafts
    expected = {}
    for a in range(3):
        for b in range(3):
            for c in range(3):
                expected[a + 1, b + 1, c + 1] = p[0, a] * p[a, b] * p[b, c]  # the prompt ends with token 1
    counts = {}
    for r in rows:
        counts[tuple(r)] = counts.get(tuple(r), 0) + 1
    tv = 0.5 * sum(abs(counts.get(k, 0) / len(rows) - float(v)) for k, v in expected.items())
    assert sum(counts.values()) == sum(counts.get(k, 0) for k in expected)  # nothing outside tokens 1..3
    assert tv < 0.04, tv  # 10000 rows: sampling noise is about 0.02

"""Practical use: memory preflight, interrupts, multi-turn sessions, chunked prefill, model choice."""

import pytest
import torch

from conftest import random_ids, session_equals_fresh_generation
from notebook_engine import load_engine


def test_model_choice_maps_to_dir_and_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"hf download Qwen/Qwen3-4B-Base --local-dir models/Qwen3-4B-Base"):
        load_engine(None, QWEN3_MODEL="Qwen3-4B-Base")


def test_memory_preflight_fails_before_allocating(engine, monkeypatch):
    q = engine()
    monkeypatch.setitem(q._module.__dict__, "free_memory_bytes", lambda device: 10_000)

    def no_allocation(*args, **kwargs):
        raise AssertionError("allocated before checking memory")
    with pytest.raises(MemoryError, match=r"the weights need .* GiB free: use a smaller model"):
        with monkeypatch.context() as m:
            m.setattr(torch, "empty", no_allocation)
            q.load_weights(q.MODEL_DIR, q.config, q.device, q.dtype)
    with pytest.raises(MemoryError, match="KV cache for 4 x 253 tokens .* use a smaller batch or a shorter max length"):
        with monkeypatch.context() as m:
            m.setattr(torch, "empty", no_allocation)
            m.setattr(torch, "zeros", no_allocation)
            q.generate([[1, 2, 3]] * 4, 250)  # 3 + 250 slots
    monkeypatch.undo()
    assert len(q.generate([[1, 2, 3]], 5).tokens[0]) >= 1


def test_interrupt_returns_partial_result_and_model_stays_usable(engine, capsys):
    q = engine()
    prompt = q.encode("Once upon a time")
    fresh = q.generate([prompt], 30)
    seen = []

    def stop_after_three(piece):
        seen.append(piece)
        if len(seen) == 3:
            raise KeyboardInterrupt
    partial = q.generate([prompt], 30, stream=stop_after_three)
    assert partial.interrupted and "interrupted" in capsys.readouterr().out
    assert 0 < len(partial.tokens[0]) < len(fresh.tokens[0])
    assert partial.tokens[0] == fresh.tokens[0][:len(partial.tokens[0])]
    assert partial.text[0] == q.decode(partial.tokens[0])
    assert q.generate([prompt], 30).tokens == fresh.tokens


@pytest.mark.parametrize("context", [4096, 64])  # 64: the cache has to grow during the conversation
def test_session_equals_fresh_generation_and_reuses_the_prefix(engine, context):
    q = engine()
    session, history = session_equals_fresh_generation(q, ["Hello there", "What did I just say?", "Thanks, bye"],
                                                       context=context)
    first, *later = session.prefilled
    prompt_lengths = [len(q.encode(q.render_chat(history[:i]))) for i in (2, 4, 6)]
    assert first == prompt_lengths[0]
    assert all(n < total for n, total in zip(later, prompt_lengths[1:])), (session.prefilled, prompt_lengths)


def test_chunked_prefill_equals_whole_prefill(engine, monkeypatch, capsys):
    q = engine()
    prompts = [random_ids(1, 50, seed=31)[0].tolist(), [3, 4, 5], random_ids(1, 23, seed=33)[0].tolist()]
    whole = q.generate(prompts, 10)  # left-padded batch
    monkeypatch.setitem(q._module.__dict__, "PREFILL_CHUNK", 16)
    chunked = q.generate(prompts, 10)
    progress = capsys.readouterr().err  # tqdm's bar, on stderr: "prefill: 100%|...| 50/50 [...]"
    assert "prefill" in progress and "50/50" in progress
    assert chunked.tokens == whole.tokens


def interrupt_prefill_at_chunk(q, monkeypatch, n):
    """Prefill in chunks of 16 tokens and press stop while chunk n is computed."""
    monkeypatch.setitem(q._module.__dict__, "PREFILL_CHUNK", 16)
    original, calls = q.forward_hidden, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return original(*args)
    monkeypatch.setitem(q._module.__dict__, "forward_hidden", interrupted)
    return original


def test_interrupt_during_prefill(engine, monkeypatch, capsys):
    q = engine()
    prompt = random_ids(1, 50, seed=34).tolist()
    fresh = q.generate(prompt, 6)
    interrupt_prefill_at_chunk(q, monkeypatch, 3)
    result = q.generate(prompt, 6)
    assert result.interrupted and result.tokens == [[]] and "interrupted" in capsys.readouterr().out
    monkeypatch.undo()
    assert q.generate(prompt, 6).tokens == fresh.tokens


def test_generation_never_computes_logits_for_every_position(engine, monkeypatch):
    q = engine()
    shapes = []
    original = q.lm_head
    monkeypatch.setitem(q._module.__dict__, "lm_head", lambda h: shapes.append(tuple(h.shape)) or original(h))
    q.generate(random_ids(4, 60, seed=32).tolist(), 3)
    assert shapes and all(s == (4, q.config.hidden_size) for s in shapes)


@pytest.mark.parametrize("variant", ["sharded", "base", "untied"])
def test_other_layouts_generate(engine, variant):
    q = engine(variant)
    result = q.generate([q.encode("The quick brown fox"), [1, 2]], 8)
    assert all(1 <= len(t) <= 8 for t in result.tokens)


def test_session_interrupted_during_prefill_continues(engine, monkeypatch):
    """Stop pressed while a turn's prompt is prefilled: the next turn reuses only what the cache holds."""
    q = engine()
    session = q.ChatSession(enable_thinking=False, temperature=0)
    original = interrupt_prefill_at_chunk(q, monkeypatch, 2)
    session.ask("Tell me a long story about tensors and caches", max_new_tokens=4, stream=False)
    assert session.last.interrupted and len(session.cached_ids) == session.cache.filled == 16
    monkeypatch.setitem(q._module.__dict__, "forward_hidden", original)
    answer = session.ask("Again, please", max_new_tokens=6, stream=False)
    prompt = q.encode(q.render_chat(session.messages[:-1], enable_thinking=False))
    assert session.last.tokens[0] == q.generate([prompt], 6, temperature=0).tokens[0] and isinstance(answer, str)

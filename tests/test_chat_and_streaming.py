"""Chat rendering equals transformers' apply_chat_template; streaming never shows broken UTF-8."""

import pytest
import torch
from transformers import PreTrainedTokenizerFast

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system": [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "steam现在最火的游戏是什么"}],
    "multi_turn_with_thinking": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nTwo plus two.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\nThree and three.\n</think>\n\n6"},
        {"role": "user", "content": "Thanks"}],
    "reasoning_field_and_none_keys": [
        {"role": "user", "content": "Hi", "name": None},
        {"role": "assistant", "content": "Hello", "reasoning_content": "greet back", "tool_calls": None},
        {"role": "user", "content": "Bye"}],
}


def transformers_tokenizer(q, checkpoint):
    return PreTrainedTokenizerFast(tokenizer_file=str(checkpoint / "tokenizer.json"), chat_template=q.chat_template)


@pytest.mark.parametrize("variant", ["tiny", "config_v5"])  # template in tokenizer_config.json / chat_template.jinja
@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("thinking", [True, False])
def test_render_chat_equals_transformers(engine, checkpoints, variant, name, thinking):
    q = engine(variant)
    assert "<|im_start|>" in q.chat_template
    tok = transformers_tokenizer(q, checkpoints(variant))
    for add in (True, False):
        ours = q.render_chat(CONVERSATIONS[name], enable_thinking=thinking, add_generation_prompt=add)
        theirs = tok.apply_chat_template(CONVERSATIONS[name], tokenize=False, add_generation_prompt=add,
                                         enable_thinking=thinking)
        assert ours == theirs
    assert q.encode(ours) == tok.encode(ours, add_special_tokens=False)


def test_thinking_switch_and_history(engine):
    q = engine()
    off = q.render_chat(CONVERSATIONS["user"], enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert q.render_chat(CONVERSATIONS["user"]).endswith("<|im_start|>assistant\n")
    history = q.render_chat(CONVERSATIONS["multi_turn_with_thinking"])
    assert "Two plus two" not in history and "Three and three" not in history  # past thinking dropped
    assert q.split_thinking("<think>\nhmm\n</think>\n\nYes.") == ("hmm", "Yes.")
    assert q.split_thinking("<think>\nstill thinking") == ("still thinking", "")  # cut off: no answer yet
    assert q.split_thinking("Plain answer.") == ("", "Plain answer.")


def test_stream_pieces_are_whole_characters(engine):
    q = engine()
    text = "测试一下tokenizer的效果，你好世界"
    ids = q.encode(text)
    assert any("\ufffd" in q.decode(ids[:k]) for k in range(1, len(ids))), "some character must span two ids"
    pieces = []
    show = q._streamer(pieces.append)
    for k in range(1, len(ids) + 1):
        show(ids[:k])
    show(ids, final=True)
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


def test_generate_stream_equals_text(engine, capsys):
    q = engine()
    pieces = []
    prompt = q.encode(q.render_chat([{"role": "user", "content": "你好"}]))
    result = q.generate([prompt, prompt[:3]], 30, stream=pieces.append)
    assert "".join(pieces) == result.text[0] == q.decode(result.tokens[0])
    printed = q.generate([prompt], 30, stream=True)
    assert capsys.readouterr().out == printed.text[0] + "\n"


def test_chat_returns_answer_and_prints_it(engine, capsys):
    q = engine()
    answer = q.chat("Hello?", max_new_tokens=20, seed=1)
    out = capsys.readouterr().out
    assert isinstance(answer, str) and answer in out
    answer2 = q.chat([{"role": "user", "content": "Hello?"}], max_new_tokens=20, seed=1)
    assert answer2 == answer  # seeded sampling repeats
    q.chat("Hello?", enable_thinking=False, max_new_tokens=5, temperature=0)


def im_end_at_step_4(q):
    """A stand-in sampler that emits <|im_end|> as the 4th new token."""
    calls = []

    def fake_sample(logits, *args, **kwargs):
        calls.append(1)
        return torch.full((logits.shape[0],), q.tokenizer.token_to_id("<|im_end|>") if len(calls) == 4 else 7,
                          device=logits.device)
    return fake_sample


def test_base_model_continues_plain_text(engine, monkeypatch):
    base, chat_model = engine("base"), engine("tiny")
    assert base.IS_BASE_MODEL and not chat_model.IS_BASE_MODEL
    for q, expected in ((base, 12), (chat_model, 4)):  # a base model does not stop at <|im_end|>
        monkeypatch.setitem(q._module.__dict__, "sample", im_end_at_step_4(q))
        assert len(q.generate([q.encode("The quick brown fox")], 12).tokens[0]) == expected
        monkeypatch.undo()
    assert isinstance(base.chat("The quick brown fox", max_new_tokens=5), str)
    with pytest.raises(TypeError, match="plain text"):
        base.chat([{"role": "user", "content": "hi"}])


def test_streaming_decodes_a_bounded_number_of_ids_per_token(engine, monkeypatch):
    """Each streamed token decodes only the ids since the last whole character, however long the reply."""
    q = engine()
    text = "测试一下tokenizer的效果，你好世界。" * 12
    ids = q.encode(text)
    decoded, real = [], q.decode
    monkeypatch.setitem(q._module.__dict__, "decode", lambda part: decoded.append(len(part)) or real(part))
    pieces = []
    show = q._streamer(pieces.append)
    for k in range(1, len(ids) + 1):
        show(ids[:k])
    show(ids, final=True)
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)
    assert len(ids) > 100 and max(decoded) <= 4, (len(ids), max(decoded))  # a character spans at most 4 bytes

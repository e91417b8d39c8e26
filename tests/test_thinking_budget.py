"""A thinking budget: a reply that thinks past max_thinking_tokens gets Qwen's early-stop text, fed on the same
cache, then answers; what it answers equals a fresh greedy run on the same text."""

import pytest
import torch


def never_closes_thinking(q, budget_steps):
    """A stand-in sampler: <think> first, then greedy with </think> and the stop ids forbidden for
    budget_steps more tokens (a model that would think forever), then plain greedy."""
    think, end_think = q.tokenizer.token_to_id("<think>"), q.tokenizer.token_to_id("</think>")
    calls = []

    def fake_sample(logits, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            return torch.full((logits.shape[0],), think, device=logits.device)
        if len(calls) <= 1 + budget_steps:
            logits = logits.clone()
            logits[:, [end_think, *q.config.stop_ids]] = -float("inf")
        return logits.argmax(dim=-1)
    return fake_sample


@pytest.mark.parametrize("budget", [0, 5])
def test_thinking_budget_stops_thinking_and_answers(engine, monkeypatch, budget):
    q = engine()
    monkeypatch.setitem(q._module.__dict__, "sample", never_closes_thinking(q, budget_steps=1000))
    fed = []
    original = q.forward_hidden
    monkeypatch.setitem(q._module.__dict__, "forward_hidden", lambda ids, *a: fed.append(ids.shape[1]) or original(ids, *a))
    session = q.ChatSession(max_thinking_tokens=budget, temperature=0)
    session.ask("Think about tensors.", max_new_tokens=40, stream=False)
    reply = session.last.tokens[0]
    stop_text = q.encode(q.THINKING_EARLY_STOP)
    think = q.tokenizer.token_to_id("<think>")
    assert reply[0] == think
    assert reply[1 + budget:1 + budget + len(stop_text)] == stop_text   # exactly `budget` thinking tokens
    answer = reply[1 + budget + len(stop_text):]
    assert answer, "the model goes on to answer"
    thinking, text = q.split_thinking(session.messages[-1]["content"])
    assert thinking.endswith("Considering the limited time by the user, I have to give the solution based on "
                             "the thinking directly now.")
    assert session.messages[-1]["content"] == q.decode(reply)
    # no re-prefill: the prompt once, then the last thinking token and the stop text in one chunk, then decode
    prompt = q.encode(q.render_chat(session.messages[:-1]))
    assert fed[0] == len(prompt) and fed[1:].count(1 + len(stop_text)) == 1 and set(fed[1:]) == {1, 1 + len(stop_text)}
    # what it answers after the stop text is what a fresh greedy run makes of the same tokens
    monkeypatch.undo()
    fresh = q.generate([prompt + reply[:1 + budget + len(stop_text)]], len(answer))
    assert fresh.tokens[0] == answer


def test_thinking_budget_leaves_short_thinking_alone(engine, monkeypatch, capsys):
    q = engine()
    script = q.encode("<think>\nshort\n</think>\n\nDone.") + [q.tokenizer.token_to_id("<|im_end|>")]

    def scripted(logits, *args, **kwargs):
        scripted.step += 1
        return torch.full((logits.shape[0],), script[scripted.step - 1], device=logits.device)
    monkeypatch.setitem(q._module.__dict__, "sample", scripted)
    replies = []
    for budget in (None, len(script) - 3):  # thinking closes within the budget: nothing is inserted
        scripted.step = 0
        session = q.ChatSession(max_thinking_tokens=budget)
        replies.append(session.ask("Hello", max_new_tokens=40, stream=False))
        assert session.last.tokens[0] == script
    assert replies == ["Done.", "Done."]
    scripted.step = 0
    q.chat("Hello", max_new_tokens=40, max_thinking_tokens=2)  # cut after "<think>", 2 tokens: streamed too
    assert "Considering the limited time by the user" in capsys.readouterr().out
    with pytest.raises(ValueError, match="max_thinking_tokens must be None"):
        q.chat("hi", max_thinking_tokens=-1)

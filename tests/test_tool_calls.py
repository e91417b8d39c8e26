"""Tool calls: schemas from Python functions equal transformers' get_json_schema, rendering with tools equals
apply_chat_template on the published template, parse_tool_calls, and the call-and-answer loop (scripted sampler)."""

import enum
import json
from typing import Any, Literal, Optional, Union

import pytest
import torch
from transformers import PreTrainedTokenizerFast
from transformers.utils import get_json_schema

from conftest import TEST_DEVICE, edited_copy, load_engine


@pytest.fixture(scope="module")
def long_engine(checkpoints, tmp_path_factory):
    """The tiny checkpoint with a 4096-token context: its small vocabulary spells the tools' system prompt in
    ~600 tokens, more than tiny's 512."""
    path = edited_copy(checkpoints("tiny"), tmp_path_factory.mktemp("long") / "tiny_4096", max_position_embeddings=4096)
    return load_engine(path, device=TEST_DEVICE, dtype="float32")


def get_current_temperature(location: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> float:
    """
    Get the current temperature at a location.

    Args:
        location: The location to get the temperature for, in the format "City, Country"
        unit: The unit to return the temperature in.
    Returns:
        The current temperature at the specified location, as a float.
    """
    return 22.0


def add(a: int, b: int):
    """Add two integers.

    Args:
        a: the first number
        b: the second number,
            which may be negative
    """
    return a + b


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


def everything(names: list[str], table: dict[str, int], maybe: Optional[int], either: Union[int, str, None],
               pair: tuple[int, str], colour: Colour, size: str = "m", anything: Any = None,
               nested: list[list[float]] | None = None, flag: bool = False) -> dict[str, float]:
    """Exercise every rule of the converter:
    descriptions on two lines.

    Args:
        names (list): the names
        table: a table of counts
        maybe: an optional count
        either: a number or a word
        pair: a number and a word
        colour: a colour
        size: the size (choices: ["s", "m", "l"])
        anything: whatever you like
        nested: rows of numbers
        flag: a switch

    Returns:
        Scores per name.

    Raises:
        ValueError: never
    """
    return {}


def no_arguments() -> str:
    """Say hello."""
    return "hello"


FUNCTIONS = [get_current_temperature, add, everything, no_arguments]


@pytest.mark.parametrize("function", FUNCTIONS, ids=lambda f: f.__name__)
def test_tool_schema_equals_get_json_schema(engine, function):
    schema = engine().tool_schema(function)
    expected = get_json_schema(function)
    assert schema == expected
    assert json.dumps(schema) == json.dumps(expected)  # key order too: the template writes it with tojson


def test_tool_schema_refuses_what_it_cannot_describe(engine):
    q = engine()

    def undocumented(x: int):
        return x

    def untyped(x):
        """Do something.

        Args:
            x: a thing
        """

    def undescribed(x: int, y: int):
        """Do something.

        Args:
            x: a thing
        """

    def custom(x: torch.device):
        """Do something.

        Args:
            x: a device
        """
    for function, message in [(undocumented, "'undocumented' has no docstring"),
                              (untyped, "'untyped': argument 'x' has no type hint"),
                              (undescribed, "'undescribed': the docstring has no description for argument 'y'"),
                              (custom, "'custom', argument 'x': cannot describe the type")]:
        with pytest.raises((ValueError, TypeError), match=message):
            q.tool_schema(function)
        with pytest.raises((ValueError, TypeError), match=message):
            q.render_chat([{"role": "user", "content": "hi"}], tools=[function])


def test_tool_schema_refuses_arguments_a_call_cannot_name(engine):
    """A tool is called as f(**arguments): *args, **kwargs and positional-only arguments cannot be named."""
    q = engine()
    doc = "Do something.\n\nArgs:\n    x: a thing\n    rest: more\n"
    def star(x: int, *rest: int): ...
    def double_star(x: int, **rest: int): ...
    def positional(x: int, rest: int, /): ...
    for function, shown in [(star, r"\*rest: int"), (double_star, r"\*\*rest: int"), (positional, "x: int")]:
        function.__doc__ = doc
        with pytest.raises(ValueError, match=f"{shown}: a tool's arguments are named, as f\\(\\*\\*arguments\\)"):
            q.tool_schema(function)
    for bad in ("get_weather", 3, None):
        with pytest.raises(TypeError, match="tool_schema takes a Python function"):
            q.tool_schema(bad)


WEATHER_SCHEMA = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}
CALL_DICT = {"type": "function", "function": {"name": "get_current_temperature",
                                              "arguments": {"location": "Paris, France", "unit": "celsius"}}}
CALL_STRING = {"type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
USER = {"role": "user", "content": "What is the temperature in Paris, and what is 2 + 3?"}
CONVERSATIONS = {
    "question": [USER],
    "with_system": [{"role": "system", "content": "You are a helpful assistant."}, USER],
    "dict_arguments": [USER, {"role": "assistant", "content": "", "tool_calls": [CALL_DICT]}],
    "string_arguments_and_text": [USER, {"role": "assistant", "content": "Let me add.", "tool_calls": [CALL_STRING]}],
    "consecutive_tool_responses": [
        USER, {"role": "assistant", "content": "<think>\nTwo tools.\n</think>\n\n", "tool_calls": [CALL_DICT, CALL_STRING]},
        {"role": "tool", "content": "22.0"}, {"role": "tool", "content": "5"}],
    "multi_step": [
        {"role": "system", "content": "Be brief."}, USER,
        {"role": "assistant", "content": "<think>\nFirst the weather.\n</think>\n\n", "tool_calls": [CALL_DICT]},
        {"role": "tool", "content": "22.0"},
        {"role": "assistant", "content": "<think>\nNow the sum.\n</think>\n\n", "tool_calls": [CALL_STRING]},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "<think>\nDone.\n</think>\n\nIt is 22 °C in Paris, and 2 + 3 = 5."},
        {"role": "user", "content": "Thanks!"}],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("tools", ["functions", "dicts"])
def test_render_chat_with_tools_equals_transformers(engine, checkpoints, name, thinking, tools):
    q = engine()
    tok = PreTrainedTokenizerFast(tokenizer_file=str(checkpoints("tiny") / "tokenizer.json"),
                                  chat_template=q.chat_template)
    tool_list = ([get_current_temperature, add, everything] if tools == "functions"
                 else [WEATHER_SCHEMA, get_json_schema(add)])
    ours = q.render_chat(CONVERSATIONS[name], enable_thinking=thinking, tools=tool_list)
    theirs = tok.apply_chat_template(CONVERSATIONS[name], tools=tool_list, tokenize=False,
                                     add_generation_prompt=True, enable_thinking=thinking)
    assert ours == theirs
    assert "<tools>" in ours and "</tools>" in ours


def test_render_chat_refuses_malformed_tool_calls(engine):
    q = engine()
    with pytest.raises(TypeError, match="message 1: each tool call needs a 'name' and 'arguments'"):
        q.render_chat([USER, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]}])
    with pytest.raises(TypeError, match="tools should be a list"):
        q.render_chat([USER], tools=add)
    # OpenAI's API sends content None with tool calls: rendered as the empty content transformers needs
    none = [USER, {"role": "assistant", "content": None, "tool_calls": [CALL_DICT]}]
    assert q.render_chat(none) == q.render_chat(CONVERSATIONS["dict_arguments"])


REPLY = ('<think>\nI need two tools. A draft: <tool_call>\n{"name": "not_this"}\n</tool_call>\n</think>\n\n'
         '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "Paris, France"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>')


def test_parse_tool_calls(engine):
    q = engine()
    assert q.parse_tool_calls(REPLY) == [{"name": "get_current_temperature", "arguments": {"location": "Paris, France"}},
                                         {"name": "add", "arguments": {"a": 2, "b": 3}}]
    assert q.parse_tool_calls("No calls here.") == []
    assert q.parse_tool_calls('<tool_call>\n{"name": "no_arguments"}\n</tool_call>') == [
        {"name": "no_arguments", "arguments": {}}]
    with pytest.raises(ValueError, match=r"<tool_call> block '\{\"name\": \"add\", \"arguments\": \{' is not valid JSON"):
        q.parse_tool_calls('<tool_call>\n{"name": "add", "arguments": {\n</tool_call>')
    with pytest.raises(ValueError, match="has no \"name\""):
        q.parse_tool_calls('<tool_call>\n{"arguments": {}}\n</tool_call>')
    with pytest.raises(ValueError, match="\"arguments\" should be a JSON object"):
        q.parse_tool_calls('<tool_call>\n{"name": "add", "arguments": [1, 2]}\n</tool_call>')
    # what a model may write: nesting deeper than Python's JSON reader goes, an integer of 5,000 digits
    for arguments in ["[" * 100_000 + "]" * 100_000, "1" * 5000]:
        reply = f'<tool_call>\n{{"name": "add", "arguments": {{"a": {arguments}}}}}\n</tool_call>'
        with pytest.raises(ValueError, match="is not valid JSON"):
            q.parse_tool_calls(reply)
        messages = q.run_tool_calls(reply, {"add": lambda a: a})  # in a chat: an error for the model to read
        assert messages[1]["role"] == "tool" and "is not valid JSON" in messages[1]["content"]
    for bad in (None, ["<tool_call>"], b"<tool_call>"):
        with pytest.raises(TypeError, match=r"parse_tool_calls takes the reply's text \(a str\)"):
            q.parse_tool_calls(bad)


class Recorder:
    """Wraps render_chat to keep every prompt the loop renders, and counts the calls of a tool."""

    def __init__(self, q, monkeypatch, replies):
        self.prompts, self.calls, self.reply = [], [], -1
        script = [q.encode(text) + [q.tokenizer.token_to_id("<|im_end|>")] for text in replies]
        render, step = q.render_chat, [0]

        def recording_render(*args, **kwargs):
            self.prompts.append(render(*args, **kwargs))
            self.reply, step[0] = self.reply + 1, 0
            return self.prompts[-1]

        def fake_sample(logits, *args, **kwargs):
            token = script[self.reply][min(step[0], len(script[self.reply]) - 1)]
            step[0] += 1
            return torch.full((logits.shape[0],), token, device=logits.device)
        monkeypatch.setitem(q._module.__dict__, "render_chat", recording_render)
        monkeypatch.setitem(q._module.__dict__, "sample", fake_sample)


def test_tool_loop_calls_the_function_and_answers(long_engine, monkeypatch, capsys):
    q = long_engine
    calls = []

    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first number
            b: the second number
        """
        calls.append((a, b))
        return a + b
    first = '<think>\nI should add.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    rec = Recorder(q, monkeypatch, [first, "<think>\nIt said 5.\n</think>\n\n2 + 3 = 5."])
    session = q.ChatSession(tools=[add])
    assert session.ask("What is 2 + 3?", max_new_tokens=200) == "2 + 3 = 5."
    assert calls == [(2, 3)]
    assert len(rec.prompts) == 2
    assert rec.prompts[1].endswith("<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
                                   "<|im_start|>assistant\n")
    assert rec.prompts[1].startswith(rec.prompts[0])  # the round's prompt continues the first one
    assert "[tool] add({\"a\": 2, \"b\": 3}) -> 5" in capsys.readouterr().out  # streamed
    # the history the template sees: the call in tool_calls, not twice in content
    user, call, result, final = session.messages
    assert call == {"role": "assistant", "content": "<think>\nI should add.\n</think>",
                    "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]}
    assert result == {"role": "tool", "name": "add", "content": "5"}
    assert final["content"].endswith("2 + 3 = 5.")
    assert session.prefilled[1] < len(q.encode(rec.prompts[1])) - len(q.encode(rec.prompts[0]))  # cache reused


def test_tool_errors_go_back_to_the_model(long_engine, monkeypatch, capsys):
    q = long_engine

    def divide(a: float, b: float) -> float:
        """Divide a by b.

        Args:
            a: numerator
            b: denominator
        """
        return a / b
    first = ('<tool_call>\n{"name": "divide", "arguments": {"a": 1, "b": 0}}\n</tool_call>\n'
             '<tool_call>\n{"name": "multiply", "arguments": {"a": 1}}\n</tool_call>\n'
             '<tool_call>\n{"name": "divide", "arguments": {"a": 1\n</tool_call>')
    rec = Recorder(q, monkeypatch, [first, "Sorry."])
    assert q.chat("1/0?", tools=[divide], enable_thinking=False, max_new_tokens=300) == "Sorry."
    second = rec.prompts[1]
    assert "<tool_response>\nerror: divide({\"a\": 1, \"b\": 0}) raised ZeroDivisionError" in second
    assert "<tool_response>\nerror: there is no tool named 'multiply'; the tools are ['divide']" in second
    assert "<tool_response>\nerror: <tool_call> block" in second and "is not valid JSON" in second


def test_tool_rounds_run_out_and_cut_off_calls(long_engine, monkeypatch, capsys):
    q = long_engine
    calls = []

    def ping() -> str:
        """Ping."""
        calls.append(1)
        return "pong"
    again = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
    rec = Recorder(q, monkeypatch, [again] * 4)
    q.chat("ping", tools=[ping], max_tool_rounds=2, enable_thinking=False, max_new_tokens=100)
    assert len(calls) == 2 and len(rec.prompts) == 3
    assert "max_tool_rounds=2 reached" in capsys.readouterr().out
    calls.clear()
    rec = Recorder(q, monkeypatch, [again])
    q.chat("ping", tools=[ping], enable_thinking=False, max_new_tokens=5)  # stopped inside the <tool_call>
    assert calls == [] and len(rec.prompts) == 1
    assert "cut off by max_new_tokens=5 inside a <tool_call>: not called" in capsys.readouterr().out


def test_tools_are_checked_up_front(engine):
    q = engine()
    with pytest.raises(TypeError, match="tools should be a list"):
        q.ChatSession(tools=add)
    with pytest.raises(ValueError, match="'untyped': argument 'x' has no type hint"):
        def untyped(x):
            """Nothing.

            Args:
                x: a thing
            """
        q.chat("hi", tools=[untyped])
    with pytest.raises(ValueError, match="max_tool_rounds must be an int >= 0"):
        q.ChatSession(tools=[add], max_tool_rounds=-1)

"""Bad input gets a clear error that names what is wrong; afterwards the engine still works."""

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import edit_config
from notebook_engine import load_engine


@pytest.fixture
def broken(checkpoints, tmp_path):
    """A copy of the tiny checkpoint to damage."""
    path = tmp_path / "ckpt"
    shutil.copytree(checkpoints("tiny"), path)
    return path


def edit_tensors(path, fn):
    tensors = load_file(path / "model.safetensors")
    fn(tensors)
    save_file(tensors, path / "model.safetensors")


def test_missing_checkpoint_says_how_to_download(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"hf download Qwen/Qwen3-0\.6B --local-dir .*nowhere"):
        load_engine(tmp_path / "nowhere")


@pytest.mark.parametrize("change, error, message", [
    (dict(num_hidden_layers=None), ValueError, r"config\.json: required key 'num_hidden_layers' is missing"),
    (dict(hidden_size="64"), TypeError, r"'hidden_size' should be int, got '64'"),
    (dict(rope_theta=None), ValueError, r"'rope_theta' is missing"),
    (dict(num_key_value_heads=3), ValueError, r"multiple of num_key_value_heads"),
    (dict(eos_token_id="x"), TypeError, r"'eos_token_id' should be int or list"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 4.0}), ValueError, r"RoPE scaling of type 'dynamic'"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": "4"}), ValueError, r"YaRN's 'factor' should be a positive number"),
    (dict(head_dim=16), ValueError, r"model\.layers\.0\.self_attn\.\w+\.weight has shape \(\d+,.*config\.json implies"),
    (dict(rope_theta=0), ValueError, r"rope_theta should be a number > 0 and rms_norm_eps one in \[0, 1\)"),  # ran: NaN
    (dict(rope_theta=float("nan")), ValueError, r"rope_theta should be a number > 0"),
    (dict(rms_norm_eps=-1.0), ValueError, r"rms_norm_eps one in \[0, 1\).*got 1000000\S* and -1\.0"),
    (dict(num_hidden_layers=1), ValueError, r"holds model\.layers\.1\.input_layernorm\.weight, past config\.json's "
                                            r"num_hidden_layers=1: correct it"),  # it ran 1 of 3 layers
])
def test_bad_config(broken, change, error, message):
    edit_config(broken, **change)
    with pytest.raises(error, match=message):
        load_engine(broken)


def test_invalid_json(broken):
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_engine(broken)


def test_missing_tensor_is_named(broken):
    edit_tensors(broken, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(KeyError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_engine(broken)


def test_untied_config_needs_lm_head(broken):
    edit_config(broken, tie_word_embeddings=False)
    edit_tensors(broken, lambda t: t.pop("lm_head.weight"))
    with pytest.raises(KeyError, match=r"tensor lm_head\.weight missing; config\.json says tie_word_embeddings=false"):
        load_engine(broken)


def test_missing_weights_file(broken):
    (broken / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="neither model.safetensors nor model.safetensors.index.json"):
        load_engine(broken)


@pytest.mark.parametrize("setting, value, allowed", [
    ("QWEN3_DTYPE", "float64", "auto, bfloat16, float32"),
    ("QWEN3_QUANT", "int2", "none, int8, int4"),
])
def test_bad_setting_names_the_allowed_values(checkpoints, setting, value, allowed):
    with pytest.raises(ValueError, match=f"{setting}='{value}' is not a valid setting: use one of {allowed}"):
        load_engine(checkpoints("tiny"), **{setting: value})


def test_bad_settings(checkpoints):
    with pytest.raises(ValueError, match="QWEN3_DEVICE='gpu' is not a device"):
        load_engine(checkpoints("tiny"), device="gpu")
    with pytest.raises(ValueError, match="QWEN3_DEVICE='cuda:abc' is not a device: use auto, cuda, cuda:N"):
        load_engine(checkpoints("tiny"), device="cuda:abc")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA build of torch"):
            load_engine(checkpoints("tiny"), device="cuda")


def test_a_misspelt_setting_is_named_not_ignored(checkpoints, capsys):
    load_engine(checkpoints("tiny"), before="# Part 2", QWEN3_QAUNT="int8")  # the settings cells alone
    out = capsys.readouterr().out
    assert "QWEN3_QAUNT is not a setting of this notebook" in out and "QWEN3_QUANT" in out, out
    load_engine(checkpoints("tiny"), before="# Part 2")
    assert "is not a setting" not in capsys.readouterr().out


BAD_CALLS = [
    (dict(prompt_ids=[]), ValueError, "empty batch"),
    (dict(prompt_ids=[[1, 2], []]), ValueError, "prompt 1 is empty"),
    (dict(prompt_ids=[1, 2, 3]), TypeError, r"list of token-id lists, such as \[ids\]"),
    (dict(prompt_ids="hello"), TypeError, "list of token-id lists"),
    (dict(prompt_ids=[[1, 2.5]]), TypeError, "non-integer ids, e.g. 2.5"),
    (dict(prompt_ids=[[1, 640]]), ValueError, r"id 640 is outside the vocabulary 0\.\.639"),
    (dict(prompt_ids=[[-1]]), ValueError, "outside the vocabulary"),
    (dict(max_new_tokens=0), ValueError, "max_new_tokens must be an int >= 1"),
    (dict(max_new_tokens=500), ValueError, r"exceeds the context of 512 tokens"),
    (dict(temperature=-0.1), ValueError, r"temperature must be 0 \(greedy\) or a number >= 1e-4"),
    (dict(temperature=1e-37), ValueError, r"temperature must be 0 \(greedy\) or a number >= 1e-4"),
    (dict(temperature=True), ValueError, "temperature must be"),
    (dict(top_p=0.0), ValueError, r"top_p must be in \(0, 1\]"),
    (dict(top_p=1.5), ValueError, r"top_p must be in \(0, 1\]"),
    (dict(top_k=-1), ValueError, "top_k must be an int >= 0"),
    (dict(top_k=2.5), ValueError, "top_k must be an int >= 0"),
    (dict(seed="x"), ValueError, r"seed must be None or an int in 0\.\.2\*\*63-1"),
    (dict(seed=2**70), ValueError, r"seed must be None or an int"),
    (dict(stream="yes"), TypeError, "stream must be False, True or a callable"),
]


@pytest.mark.parametrize("kwargs, error, message", BAD_CALLS)
def test_bad_generate_arguments(engine, kwargs, error, message):
    q = engine()
    args = {"prompt_ids": [list(range(1, 20))], "max_new_tokens": 4, **kwargs}
    with pytest.raises(error, match=message):
        q.generate(**args)
    good = q.generate([[5, 6, 7]], 6)
    assert good.tokens == q.generate([[5, 6, 7]], 6).tokens and len(good.tokens[0]) >= 1


def test_bad_forward_and_cache_arguments(engine):
    q = engine()
    with pytest.raises(ValueError, match=r"\(B, T\) integer tensor"):
        q.forward([1, 2, 3])
    with pytest.raises(ValueError, match="outside|must lie in"):
        q.forward([[1, 9999]])
    with pytest.raises(ValueError, match="needs the cache"):
        q.forward([[1, 2]], start_pos=3)
    cache = q.make_cache(1, 4)
    with pytest.raises(ValueError, match="overflows the cache"):
        q.forward([[1, 2]], cache)
        q.forward([[1, 2, 3]], cache, start_pos=2)
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError, match=r"start_pos must be an int in 0\.\.2"):
            q.forward([[4]], cache, start_pos=bad)
    with pytest.raises(ValueError, match="cannot leave a gap"):
        q.forward([[4]], cache, start_pos=3)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        q.make_cache(True, 4)
    with pytest.raises(ValueError, match="over the context of 512"):
        q.forward([[1] * 513])
    with pytest.raises(ValueError, match="max_len must be an int in 1..512"):
        q.make_cache(1, 100000)
    with pytest.raises(TypeError, match="list of dicts"):
        q.render_chat("hello")
    with pytest.raises(TypeError, match=r"message 0 needs a 'role' \(system, user, assistant or tool\) and a 'content' string"):
        q.render_chat([{"role": "user"}])
    with pytest.raises(TypeError, match=r"message 0 needs a 'role' \(system, user, assistant or tool\) and a 'content' string"):
        q.ChatSession().ask(None)
    with pytest.raises(TypeError, match="unknown argument"):
        q.chat("hi", temprature=0.5)


def test_prompts_may_be_tensors(engine):
    q = engine()
    assert q.generate([torch.tensor([5, 6, 7])], 4).tokens == q.generate([[5, 6, 7]], 4).tokens


# --- damaged downloads: a plain ValueError that names the file and says to download again ---

DAMAGED = r"is damaged or incomplete .*download the checkpoint again"


def truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def assert_damaged(model_dir, damaged_file):
    with pytest.raises(ValueError, match=DAMAGED) as info:
        load_engine(model_dir)
    assert type(info.value) is ValueError, type(info.value)   # not safetensors' SafetensorError
    assert re.search(re.escape(str(damaged_file)), str(info.value)), str(info.value)


@pytest.mark.parametrize("cut", ["header", "data"])
def test_safetensors_cut_short(broken, cut):
    path = broken / "model.safetensors"
    truncate(path, 20 if cut == "header" else path.stat().st_size - 100)
    assert_damaged(broken, path)


@pytest.fixture
def broken_sharded(checkpoints, tmp_path):
    """A copy of the sharded checkpoint to damage."""
    path = tmp_path / "sharded"
    shutil.copytree(checkpoints("sharded"), path)
    return path


def shards(path):
    weight_map = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    names = sorted(set(weight_map.values()))
    assert len(names) == 3 and not (path / "model.safetensors").exists()
    return [path / n for n in names]


@pytest.mark.parametrize("cut", ["header", "data"])
def test_shard_cut_short(broken_sharded, cut):
    shard = shards(broken_sharded)[1]
    truncate(shard, 20 if cut == "header" else shard.stat().st_size - 100)
    assert_damaged(broken_sharded, shard)


def test_shard_listed_in_index_but_missing(broken_sharded):
    shard = shards(broken_sharded)[2]
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=r"listed in .*model\.safetensors\.index\.json but missing") as info:
        load_engine(broken_sharded)
    assert re.search(re.escape(str(shard)), str(info.value)), str(info.value)


@pytest.mark.parametrize("name, message", [
    ("tokenizer.json", r"does not parse as a tokenizer.*download the checkpoint again"),
    ("tokenizer_config.json", "not valid JSON"),
])
def test_tokenizer_file_does_not_parse(broken, name, message):
    path = broken / name
    path.write_text("{not json")
    with pytest.raises(ValueError, match=message) as info:
        load_engine(broken)
    assert re.search(re.escape(str(path)), str(info.value)), str(info.value)


# --- a model this notebook does not implement is refused by name ---

@pytest.mark.parametrize("model_type", ["qwen3_next", "qwen3_5_moe", "mistral"])
def test_unsupported_model_type(broken, model_type):
    edit_config(broken, model_type=model_type)
    with pytest.raises(ValueError, match=f"has '{model_type}'") as info:
        load_engine(broken)
    message = str(info.value)
    assert "'qwen3'" in message and "'qwen3_moe'" in message, message
    assert re.search(re.escape(str(broken / "config.json")), message), message


def test_config_without_model_type(broken):
    edit_config(broken, model_type=None)
    with pytest.raises(ValueError, match="has no model_type") as info:
        load_engine(broken)
    assert "'qwen3'" in str(info.value) and "'qwen3_moe'" in str(info.value)


def test_decode_takes_id_lists_and_tensors_and_refuses_the_rest(engine):
    q = engine()
    ids = q.encode("Hello there")
    assert q.decode(torch.tensor(ids)) == q.decode(ids) == q.decode(tuple(ids)) == "Hello there"
    assert q.decode(q.greedy([ids], 3)[0]) == q.decode(q.greedy([ids], 3)[0].tolist())  # greedy's rows, as they are
    for bad in (5, None, "abc", [1.5], torch.tensor([0.5])):
        with pytest.raises(TypeError, match="decode takes a list of token ids"):
            q.decode(bad)
    for bad in ([-1], [q.config.vocab_size], [2**40]):
        with pytest.raises(ValueError, match=f"outside the vocabulary 0..{q.config.vocab_size - 1}"):
            q.decode(bad)


def test_malformed_calls_of_the_user_facing_functions_say_what_to_pass(engine):
    """Each of these ended in an error from inside torch, jinja2 or Python's JSON reader (or, for unknown
    roles, in a prompt that silently left the message out)."""
    q = engine()
    for bad in ([[1, 2], [3]], "abc", None, [["a", "b"]]):  # ragged, a string, nothing, strings
        with pytest.raises(ValueError, match=r"token_ids must be a non-empty \(B, T\) integer tensor"):
            q.forward(bad)
    with pytest.raises(ValueError, match=r"cache must be make_cache\(1, max_len\)"):
        q.forward([[1, 2]], {})
    with pytest.raises(ValueError, match=r"cache must be make_cache\(2, max_len\)"):
        q.forward([[1, 2], [3, 4]], q.make_cache(1, 8))
    with pytest.raises(ValueError, match="a start_pos other than 0 needs the cache"):
        q.forward([[1, 2]], start_pos=-1)
    context = q.config.max_position_embeddings
    for bad in (0, -1, 2.0, None, context - 2):
        with pytest.raises(ValueError, match=rf"max_new_tokens must be an int in 1\.\.{context - 3} \(the "
                                             r"context less the prompt's 3 tokens; below 1, shorten the prompt\)"):
            q.greedy([[1, 2, 3]], bad)
    assert q.greedy([[1, 2, 3]], 1).shape == (1, 1)
    with pytest.raises(ValueError, match=r"in 1\.\.-1 \(.*below 1, shorten the prompt"):  # the prompt fills it
        q.greedy([[1] * (context + 1)], 1)
    for bad in ([], None, (m for m in [{"role": "user", "content": "hi"}]), {"role": "user", "content": "hi"}):
        with pytest.raises(TypeError, match="messages should be a non-empty list of dicts"):
            q.render_chat(bad)
    with pytest.raises(TypeError, match="messages should be a non-empty list of dicts"):
        q.chat([])
    with pytest.raises(TypeError, match=r"message 1 needs a 'role' \(system, user, assistant or tool\)"):
        q.render_chat([{"role": "user", "content": "hi"}, {"role": "developer", "content": "be brief"}])
    for context in ("4096", 0, 2.5):
        with pytest.raises(ValueError, match=r"context \(the cache's first length in tokens; it grows\) an int"):
            q.ChatSession(context=context)



def test_caches_tokens_and_records_refuse_what_they_cannot_hold(engine):
    """These ended in torch's own errors (a stream of the wrong width), the tokenizer's, or in no error at
    all: padding past the cache or fractional padding ran the model on the wrong slots."""
    q = engine()
    cache = q.make_cache(2, 16)
    for bad in ([20, 0], [1], [1.5, 0], [-1, 0], [0, True]):
        with pytest.raises(ValueError, match=r"set_padding takes 2 ints \(one per row\) in 0\.\.15"):
            cache.set_padding(bad)
    cache.set_padding([1, 0])  # row 0's first slot is padding: row 0 computes as its tokens alone do
    torch.testing.assert_close(q.forward([[0, 5, 6], [4, 5, 6]], cache)[0, 1:], q.forward([[5, 6]])[0],
                               atol=1e-4, rtol=1e-4)
    D = q.config.hidden_size
    for bad in (torch.zeros(3, D + 1), [0.0] * D, None):
        with pytest.raises(ValueError, match=rf"logit_lens takes a residual stream \(\.\.\., {D}\)"):
            q.logit_lens(bad)
    assert q.logit_lens(torch.zeros(3, D)).shape == (3, q.config.vocab_size)
    for bad in (None, 5, ["a"]):
        with pytest.raises(TypeError, match="encode takes a str"):
            q.encode(bad)

def test_yarn_factor_past_any_context_is_a_bad_setting(checkpoints):
    with pytest.raises(ValueError, match=r"QWEN3_YARN_FACTOR='1e308' is not a valid setting: .* \(1, 1024\]"):
        load_engine(checkpoints("tiny"), device="cpu", dtype="float32", QWEN3_YARN_FACTOR="1e308")


def test_bad_input_that_ended_deep_in_a_library_or_in_a_wrong_result(engine, tmp_path):
    """Each of these ended in an error from inside torch, json or Python (choices not written as JSON, in
    json's decoder), or in a wrong number (trace_bytes(-1, 5) < 0)."""
    q = engine()
    for bad in (1, None):
        with pytest.raises(ValueError, match=r"set_padding takes 2 ints \(one per row\)"):
            q.make_cache(2, 8).set_padding(bad)
    for B, T in ((-1, 5), (2.5, 3), ("2", 3), (1, None)):
        with pytest.raises(ValueError, match="trace_bytes takes B prompts and T tokens, ints >= 1"):
            q.trace_bytes(B, T)
    with pytest.raises(TypeError, match="messages should be a non-empty list of dicts.*got None"):
        q.ChatSession().respond(None, 4, stream=False)
    for choices in ("celsius, fahrenheit", "5", '{"a": 1}'):
        def get_temperature(unit: str):
            return unit
        get_temperature.__doc__ = f"Get the temperature.\n\nArgs:\n    unit: the unit (choices: {choices})"
        with pytest.raises(ValueError, match=r"argument 'unit': write its choices as a JSON list, as in \(choices: \["):
            q.tool_schema(get_temperature)


@pytest.mark.parametrize("template", ["{% if %}", 5])
def test_chat_template_that_does_not_parse(broken, template):
    config = json.loads((broken / "tokenizer_config.json").read_text())
    (broken / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    with pytest.raises(ValueError, match="its chat template does not parse .*: fix it or download it"):
        load_engine(broken)

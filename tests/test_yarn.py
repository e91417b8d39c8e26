"""YaRN: the notebook's logits equal transformers' on a checkpoint trained (say) for 64 positions and stretched
x4, in both config layouts and with YaRN's optional keys; generation runs past the original context."""

import pytest
import torch

from conftest import TEST_DEVICE, edited_copy, load_engine

ORIGINAL = 64  # the "trained" context of the stretched checkpoints

# name -> (config.json layout, the scaling as written in that layout, max_position_embeddings)
LAYOUTS = {
    # transformers 4.51, as Qwen3's model card says to write it (legacy "type" key); the limit: 4 x 64
    "rope_scaling": ("4.51", {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL}, ORIGINAL),
    # transformers 5: inside rope_parameters; no original_max_position_embeddings, so max_position_embeddings
    "rope_parameters": ("5", {"rope_type": "yarn", "factor": 4.0}, ORIGINAL),
    # YaRN's optional keys: attention factor from mscale / mscale_all_dim, other betas, no truncation
    "mscale_betas_truncate": ("5", {"rope_type": "yarn", "factor": 3.5, "original_max_position_embeddings": ORIGINAL,
                                    "mscale": 1.0, "mscale_all_dim": 0.5, "beta_fast": 16, "beta_slow": 2,
                                    "truncate": False}, int(3.5 * ORIGINAL)),
    "attention_factor": ("4.51", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL,
                                  "attention_factor": 1.25}, 4 * ORIGINAL),
}


def stretched(checkpoints, tmp_path_factory, name):
    layout, scaling, max_positions = LAYOUTS[name]
    def stretch(config):
        if layout == "4.51":
            config["rope_scaling"] = scaling
        else:
            config["rope_parameters"] = {**config["rope_parameters"], **scaling}
    source = checkpoints("tiny" if layout == "4.51" else "config_v5")
    return edited_copy(source, tmp_path_factory.mktemp("yarn") / name, stretch, max_position_embeddings=max_positions)


@pytest.fixture(scope="module")
def yarn(checkpoints, tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            from transformers import Qwen3ForCausalLM
            path = stretched(checkpoints, tmp_path_factory, name)
            ours = load_engine(path, device=TEST_DEVICE, dtype="float32")
            theirs = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                      attn_implementation="eager").to(TEST_DEVICE).eval()
            cache[name] = ours, theirs
        return cache[name]
    return get


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_yarn_logits_equal_transformers(yarn, name):
    q, reference = yarn(name)
    assert reference.model.rotary_emb.rope_type == "yarn" and q.config.rope_scaling is not None
    ids = torch.randint(0, 400, (2, 200), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        expected = reference(ids.to(TEST_DEVICE)).logits.float().cpu()
    ours = q.forward(ids.to(TEST_DEVICE)).cpu()
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)
    # YaRN changed the answer: the same weights without it give other logits past the trained context
    positions = torch.arange(200, device=q.device)
    cos, sin = q.rope_cos_sin(positions, q.rope_frequencies(q.config.head_dim, q.config.rope_theta))  # as trained
    assert not torch.allclose(cos, q.rope_cos_sin(positions, *q.config.rope)[0])  # the config brings YaRN's


def test_yarn_context_limit_and_generation_past_the_original_context(yarn):
    q, reference = yarn("rope_scaling")
    assert q.config.max_position_embeddings == 4 * ORIGINAL  # factor x original_max_position_embeddings
    prompt = torch.randint(0, 400, (1, 50), generator=torch.Generator().manual_seed(8))
    ours = q.generate(prompt.tolist(), 100)
    assert 50 + len(ours.tokens[0]) > 2 * ORIGINAL  # well past the trained context
    with torch.no_grad():
        theirs = reference.generate(prompt.to(TEST_DEVICE), max_new_tokens=100, do_sample=False,
                                    eos_token_id=list(q.config.stop_ids), pad_token_id=0)
    assert ours.tokens[0] == theirs[0, 50:].tolist()
    with pytest.raises(ValueError, match="exceeds the context of 256"):
        q.generate(prompt.tolist(), 256 - 50 + 1)


@pytest.mark.parametrize("kind", ["linear", "dynamic", "llama3", "longrope"])
def test_other_rope_scaling_is_refused_by_name(checkpoints, tmp_path, kind):
    path = edited_copy(checkpoints("tiny"), tmp_path / "tiny", rope_scaling={"rope_type": kind, "factor": 2.0})
    with pytest.raises(ValueError, match=f"RoPE scaling of type '{kind}' is not implemented here"):
        load_engine(path, device=TEST_DEVICE, dtype="float32")


def test_yarn_factor_setting(checkpoints):
    q = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32", QWEN3_YARN_FACTOR="4")
    assert q.config.rope_scaling == {"factor": 4.0, "original_max_position_embeddings": 32768}
    assert q.config.max_position_embeddings == 4 * 32768
    assert load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32",
                       QWEN3_YARN_FACTOR="1e1").config.rope_scaling["factor"] == 10.0  # any number float() reads
    for bad in ["four", "0.5", "inf", "nan", "1"]:
        with pytest.raises(ValueError, match=f"QWEN3_YARN_FACTOR='{bad}' is not a valid setting"):
            load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32", QWEN3_YARN_FACTOR=bad)

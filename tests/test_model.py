"""The whole model: logits, cache, continuation chunks and greedy generation equal transformers."""

import pytest
import torch

from conftest import DENSE_VARIANTS, TEST_DEVICE, random_ids


@pytest.mark.parametrize("variant", sorted(DENSE_VARIANTS))
def test_float32_logits_equal_reference(engine, reference, variant):
    q, model = engine(variant), reference(variant)
    ids = random_ids(3, 33, seed=7)
    ours = q.forward(ids)
    assert ours.dtype == torch.float32 and ours.shape == (3, 33, q.config.vocab_size)
    torch.testing.assert_close(ours, model(ids.to(model.device)).logits, atol=1e-4, rtol=0)


def test_checkpoint_layouts_are_read(engine):
    assert engine("tiny").weights.lm_head is engine("tiny").weights.embed_tokens          # stored but tied: one copy
    assert engine("tied_absent").weights.lm_head is engine("tied_absent").weights.embed_tokens
    untied = engine("untied").weights
    assert untied.lm_head is not untied.embed_tokens and not torch.equal(untied.lm_head, untied.embed_tokens)
    assert engine("config_v5").config.rope_theta == 1e6
    assert engine("base").config.stop_ids == (engine("base").tokenizer.token_to_id("<|endoftext|>"),)
    assert set(engine("tiny").config.stop_ids) == {engine("tiny").tokenizer.token_to_id(t)
                                                    for t in ("<|im_end|>", "<|endoftext|>")}


def test_bf16_logits_within_transformers_own_rounding(engine, reference):
    """bf16: we may differ from eager by no more than transformers' sdpa differs from its eager."""
    q = engine(dtype="bfloat16")
    eager, sdpa = reference(dtype=torch.bfloat16), reference(dtype=torch.bfloat16, attn="sdpa")
    for rows in (1, 16):  # batch-1 and batch-16 shapes (other forms are forced in tests/test_kernels.py)
        ids = random_ids(rows, 40, seed=rows)
        theirs = eager(ids.to(eager.device)).logits.float()
        budget = (sdpa(ids.to(sdpa.device)).logits.float() - theirs).abs()
        ours = (q.forward(ids) - theirs).abs()
        assert ours.max() <= budget.max() and ours.mean() <= budget.mean(), (ours.max(), budget.max())


def test_cached_decode_equals_full_recompute(engine):
    q = engine()
    ids = random_ids(2, 24, seed=3)
    full = q.forward(ids)
    cache = q.make_cache(2, 24)
    torch.testing.assert_close(q.forward(ids[:, :16], cache), full[:, :16], atol=1e-4, rtol=0)
    for pos in range(16, 24):  # one token at a time, reading earlier keys from the cache
        step = q.forward(ids[:, pos:pos + 1], cache, start_pos=pos)
        torch.testing.assert_close(step[:, 0], full[:, pos], atol=1e-4, rtol=0)


def test_continuation_chunk(engine):
    q = engine()
    ids = random_ids(1, 30, seed=4)
    full = q.forward(ids)
    cache = q.make_cache(1, 40)
    q.forward(ids[:, :11], cache)
    torch.testing.assert_close(q.forward(ids[:, 11:30], cache, start_pos=11), full[:, 11:], atol=1e-4, rtol=0)


def test_decode_really_reads_the_cache(engine):
    q = engine()
    ids = random_ids(1, 12, seed=5)
    cache = q.make_cache(1, 13)
    q.forward(ids, cache)
    nxt = torch.tensor([[7]])
    clean = q.forward(nxt, cache, start_pos=12)
    cache.k[1, :, :, 4] += 3.0  # corrupt one cached key of layer 1
    corrupted = q.forward(nxt, cache, start_pos=12)
    assert (clean - corrupted).abs().max() > 1e-2


def first_divergence_is_near_tie(model, prompt, ours, theirs):
    """True when ours and theirs agree, or split where the reference's top-2 margin is < 1e-4."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            logits = model(torch.tensor([prompt + theirs[:i]], device=model.device)).logits[0, -1]
            top2 = logits.topk(2).values
            margin = (top2[0] - top2[1]).item()
            print(f"divergence at new token {i}: reference top-2 margin {margin:.2e}")
            return margin < 1e-4
    return len(ours) == len(theirs)


def check_greedy_equals_reference(q, model, new_tokens=40):
    """The engine's greedy generate() against transformers' generate(), on a short chat prompt."""
    prompt = q.encode(q.render_chat([{"role": "user", "content": "Hello, who are you?"}]))
    ours = q.generate([prompt], new_tokens).tokens[0]
    out = model.generate(torch.tensor([prompt], device=model.device), max_new_tokens=new_tokens, do_sample=False)
    theirs = out[0, len(prompt):].tolist()
    assert len(set(theirs)) > 5, "the test checkpoint should produce varied text"
    assert first_divergence_is_near_tie(model, prompt, ours, theirs)


@pytest.mark.parametrize("variant", ["tiny", "untied"])
def test_greedy_generation_equals_transformers(engine, reference, variant):
    check_greedy_equals_reference(engine(variant), reference(variant))


def test_batched_generation_equals_transformers_and_single_runs(engine, reference, checkpoints):
    q, model = engine(), reference()
    texts = ["Hi", "What is the capital of France? Answer briefly.", "测试一下tokenizer的效果"]
    prompts = [q.encode(t) for t in texts]
    batch = q.generate(prompts, 24)
    longest = max(map(len, prompts))
    pad = q.tokenizer.token_to_id("<|endoftext|>")
    input_ids = torch.tensor([[pad] * (longest - len(p)) + p for p in prompts], device=model.device)
    attention_mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=24, do_sample=False,
                         pad_token_id=pad)
    for b, p in enumerate(prompts):
        ours = batch.tokens[b]
        theirs = out[b, longest:].tolist()
        if ours and ours[-1] in q.config.stop_ids:  # transformers pads finished rows after the stop id
            assert all(t == pad for t in theirs[len(ours):])
            theirs = theirs[:len(ours)]
        assert first_divergence_is_near_tie(model, p, ours, theirs), b
        alone = q.generate([p], 24).tokens[0]
        assert first_divergence_is_near_tie(model, p, alone, ours), b
        assert batch.text[b] == q.decode(ours)


def test_generation_reports_timings(engine):
    result = engine().generate([[1, 2, 3]], 5)
    assert result.prefill_seconds > 0 and result.peak_memory_bytes > 0
    assert result.decode_tokens_per_second > 0 or len(result.tokens[0]) < 2


def test_shards_that_hold_a_stacks_tensors_out_of_order(engine, reference, checkpoints, tmp_path):
    """Loading stacks q_proj, k_proj, v_proj (and gate, up) by name, whatever files hold them: here k_proj
    and up_proj of every layer lie in a file listed before the one with the rest (q, v and gate after)."""
    import json
    from safetensors.torch import load_file, save_file
    source = checkpoints("tiny")
    tensors = load_file(source / "model.safetensors")
    first = {n: t for n, t in tensors.items() if n.endswith(("k_proj.weight", "up_proj.weight"))}
    path = tmp_path / "out_of_order"
    path.mkdir()
    for f in source.iterdir():
        if f.name != "model.safetensors":
            (path / f.name).write_bytes(f.read_bytes())
    save_file(first, path / "model-00001-of-00002.safetensors", metadata={"format": "pt"})
    save_file({n: t for n, t in tensors.items() if n not in first}, path / "model-00002-of-00002.safetensors",
              metadata={"format": "pt"})
    weight_map = {n: f"model-0000{1 if n in first else 2}-of-00002.safetensors" for n in tensors}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    from notebook_engine import load_engine
    q = load_engine(path, device=TEST_DEVICE, dtype="float32", QWEN3_COMPILE="off")
    ids = random_ids(2, 17, seed=9)
    torch.testing.assert_close(q.forward(ids), reference()(ids.to(TEST_DEVICE)).logits, atol=1e-4, rtol=0)
    layer = q.weights.layers[0]
    assert torch.equal(layer.k_proj, tensors["model.layers.0.self_attn.k_proj.weight"].float().to(TEST_DEVICE))


def test_a_layer_names_its_checkpoint_tensors_and_nothing_else(engine):
    import copy
    layer = engine().weights.layers[0]
    assert layer.up_proj.shape == (engine().config.intermediate_size, engine().config.hidden_size)
    with pytest.raises(AttributeError, match="no_such_tensor"):
        layer.no_such_tensor  # a plain AttributeError (it used to recurse until RecursionError)
    assert torch.equal(copy.deepcopy(layer).qkv_proj, layer.qkv_proj)

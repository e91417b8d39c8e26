"""The exercise ladder (exercises/qwen3_exercises.ipynb, made by scripts/make_exercises.py, checked by
exercises/checks.py): the notebook's own functions pass every check; every catalogued mistake, written as
a learner would write it, fails its check and is named; an empty body is "not written yet"; the committed
notebook is what the generator makes; the whole notebook runs headless, and its own model talks."""

import ast
import contextlib
import io
import json
import linecache
import re
import sys
import textwrap

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "exercises"))
import checks  # noqa: E402
import make_exercises  # noqa: E402

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (requirements-dev.txt)")

# A learner's right answers, written their own way (not the notebook's code).
RIGHT = {
    "rms_norm": """
        def rms_norm(x, weight, eps=1e-6):
            x32 = x.float()
            normed = x32 / torch.sqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
            return (weight * normed.to(weight.dtype)).to(x.dtype)""",
    "rotate_half": """
        def rotate_half(x):
            d = x.shape[-1] // 2
            return torch.cat((-x[..., d:], x[..., :d]), dim=-1)""",
    "apply_rope": """
        def apply_rope(x, cos, sin):
            return x * cos + rotate_half(x) * sin""",
    "forward_hidden": """
        def forward_hidden(token_ids, cache, start_pos=0, L=None):
            B, T = token_ids.shape
            L = L or start_pos + T
            positions = (start_pos + torch.arange(T, device=device)[None, :] - cache.pad[:, None]).clamp(min=0)
            cos, sin = rope_cos_sin(positions[:, :, None], *config.rope)
            mask = attention_mask(cache.pad, start_pos, T, L)
            x = embed(token_ids)
            for i, layer in enumerate(weights.layers):
                x = decoder_layer(x, layer, i, cache, start_pos, cos, sin, mask)
            return rms_norm(x, weights.norm, config.rms_norm_eps)""",
    "lm_head": """
        def lm_head(hidden):
            return linear(hidden, weights.lm_head).float()""",
}

# Each catalogued mistake as a learner would write it: (exercise, function, words of its name) -> source.
MISTAKEN = {
    (1, "rms_norm", "epsilon outside"): """
        def rms_norm(x, weight, eps=1e-6):
            x32 = x.float()
            normed = x32 / (torch.sqrt(x32.pow(2).mean(dim=-1, keepdim=True)) + eps)
            return (weight * normed.to(weight.dtype)).to(x.dtype)""",
    (1, "rms_norm", "LayerNorm"): """
        def rms_norm(x, weight, eps=1e-6):
            x32 = x.float()
            x32 = x32 - x32.mean(dim=-1, keepdim=True)
            normed = x32 / torch.sqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
            return (weight * normed.to(weight.dtype)).to(x.dtype)""",
    (1, "rms_norm", "(1 + weight)"): """
        def rms_norm(x, weight, eps=1e-6):
            x32 = x.float()
            normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
            return ((1 + weight) * normed.to(weight.dtype)).to(x.dtype)""",
    (1, "rms_norm", "eps argument ignored"): """
        def rms_norm(x, weight, eps=1e-6):
            x32 = x.float()
            normed = x32 / torch.sqrt(x32.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
            return (weight * normed.to(weight.dtype)).to(x.dtype)""",
    (2, "rope_frequencies", "10000"): """
        def rope_frequencies(head_dim, theta):
            return 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))""",
    (2, "rope_frequencies", "per dimension"): """
        def rope_frequencies(head_dim, theta):
            return 1.0 / (theta ** (torch.arange(head_dim, device=device).float() / head_dim))""",
    (2, "rope_frequencies", "minus"): """
        def rope_frequencies(head_dim, theta):
            return theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)""",
    (2, "rope_frequencies", "model dtype"): """
        def rope_frequencies(head_dim, theta):
            return (1.0 / theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)).to(dtype)""",
    (3, "rope_cos_sin", "interleaved"): """
        def rope_cos_sin(positions, frequencies, scale=1.0):
            angles = (positions.float().unsqueeze(-1) * frequencies).repeat_interleave(2, dim=-1)
            return (torch.cos(angles) * scale).to(dtype), (torch.sin(angles) * scale).to(dtype)""",
    (3, "rope_cos_sin", "model dtype"): """
        def rope_cos_sin(positions, frequencies, scale=1.0):
            angles = positions.to(dtype).unsqueeze(-1) * frequencies.to(dtype)
            angles = torch.cat([angles, angles], dim=-1)
            return (torch.cos(angles) * scale).to(dtype), (torch.sin(angles) * scale).to(dtype)""",
    (3, "rope_cos_sin", "left in float32"): """
        def rope_cos_sin(positions, frequencies, scale=1.0):
            angles = positions.float().unsqueeze(-1) * frequencies
            angles = torch.cat([angles, angles], dim=-1)
            return torch.cos(angles) * scale, torch.sin(angles) * scale""",
    (3, "rope_cos_sin", "scale left out"): """
        def rope_cos_sin(positions, frequencies, scale=1.0):
            angles = positions.float().unsqueeze(-1) * frequencies
            angles = torch.cat([angles, angles], dim=-1)
            return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)""",
    (4, "rotate_half", "neighbours"): """
        def rotate_half(x):
            return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        """ + RIGHT["apply_rope"],
    (4, "rotate_half", "wrong way"): """
        def rotate_half(x):
            d = x.shape[-1] // 2
            return torch.cat((x[..., d:], -x[..., :d]), dim=-1)
        """ + RIGHT["apply_rope"],
    (4, "apply_rope", "neighbours"): RIGHT["rotate_half"] + """
        def apply_rope(x, cos, sin):
            return x * cos + torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2) * sin""",
    (4, "apply_rope", "wrong way"): RIGHT["rotate_half"] + """
        def apply_rope(x, cos, sin):
            return x * cos - rotate_half(x) * sin""",
    (4, "apply_rope", "cos and sin swapped"): RIGHT["rotate_half"] + """
        def apply_rope(x, cos, sin):
            return x * sin + rotate_half(x) * cos""",
    (5, "silu", "sigmoid alone"): """
        def silu(x):
            return (1 / (1 + torch.exp(-x.float()))).to(x.dtype)""",
    (5, "silu", "e^x / (1 + e^x)"): """
        def silu(x):
            e = torch.exp(x.float())
            return (x.float() * e / (1 + e)).to(x.dtype)""",
    (6, "mlp", "gate and up swapped"): """
        def mlp(x, layer):
            up, gate = linear(x, layer.gate_up_proj).chunk(2, dim=-1)
            return linear(silu(gate) * up, layer.down_proj)""",
    (6, "mlp", "SiLU of the product"): """
        def mlp(x, layer):
            F = layer.down_proj.shape[1]
            gate, up = linear(x, layer.gate_up_proj[:F]), linear(x, layer.gate_up_proj[F:])
            return linear(silu(gate * up), layer.down_proj)""",
    (6, "mlp", "no SiLU"): """
        def mlp(x, layer):
            F = layer.down_proj.shape[1]
            return linear(linear(x, layer.gate_up_proj[:F]) * linear(x, layer.gate_up_proj[F:]), layer.down_proj)""",
    (7, "softmax", "maximum not subtracted"): """
        def softmax(x):
            e = torch.exp(x.float())
            return e / e.sum(dim=-1, keepdim=True)""",
    (7, "softmax", "axis other than the last"): """
        def softmax(x):
            x = x.float()
            e = torch.exp(x - x.max(dim=0, keepdim=True).values)
            return e / e.sum(dim=0, keepdim=True)""",
    (7, "softmax", "whole tensor"): """
        def softmax(x):
            x = x.float()
            e = torch.exp(x - x.max())
            return e / e.sum(dim=-1, keepdim=True)""",
    (8, "attention_mask", "without the two head axes"): """
        def attention_mask(pad, start_pos, T, L):
            q = start_pos + torch.arange(T, device=pad.device)[:, None]
            k = torch.arange(L, device=pad.device)[None, :]
            return (k <= q) & (k >= pad[:, None, None]) | (k == q)""",
    (7, "softmax", "scores' dtype"): """
        def softmax(x):
            e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
            return e / e.sum(dim=-1, keepdim=True)""",
    (8, "attention_mask", "cannot see itself"): """
        def attention_mask(pad, start_pos, T, L):
            q = start_pos + torch.arange(T, device=pad.device)[:, None]
            k = torch.arange(L, device=pad.device)[None, :]
            return ((k < q) & (k >= pad[:, None, None]))[:, None, None]""",
    (8, "attention_mask", "next slot"): """
        def attention_mask(pad, start_pos, T, L):
            q = start_pos + torch.arange(T, device=pad.device)[:, None]
            k = torch.arange(L, device=pad.device)[None, :]
            return ((k <= q + 1) & (k >= pad[:, None, None]) | (k == q))[:, None, None]""",
    (8, "attention_mask", "start_pos left out"): """
        def attention_mask(pad, start_pos, T, L):
            q = torch.arange(T, device=pad.device)[:, None]
            k = torch.arange(L, device=pad.device)[None, :]
            return ((k <= q) & (k >= pad[:, None, None]) | (k == q))[:, None, None]""",
    (8, "attention_mask", "padding not masked"): """
        def attention_mask(pad, start_pos, T, L):
            q = start_pos + torch.arange(T, device=pad.device)[:, None]
            k = torch.arange(L, device=pad.device)[None, :]
            return (k <= q).expand(len(pad), T, L)[:, None, None]""",
    (8, "attention_mask", "padding query sees no key"): """
        def attention_mask(pad, start_pos, T, L):
            q = start_pos + torch.arange(T, device=pad.device)[:, None]
            k = torch.arange(L, device=pad.device)[None, :]
            return ((k <= q) & (k >= pad[:, None, None]))[:, None, None]""",
    **{(9, "attention", words): f"""
        def attention(q, k, v, mask):
            B, T, H, hd = q.shape
            n_rep = H // k.shape[1]
            k, v = k.{repeat}(n_rep, dim=1), v.{repeat}(n_rep, dim=1)
            scores = q.transpose(1, 2) @ k.transpose(-1, -2){scale}
            scores = {masked}
            out = softmax(scores).to(v.dtype) @ v
            return {output}""".replace("k.repeat(n_rep, dim=1)", "k.repeat(1, n_rep, 1, 1)").replace(
        "v.repeat(n_rep, dim=1)", "v.repeat(1, n_rep, 1, 1)")
       for words, repeat, scale, masked, output in [
           ("wrong order", "repeat", " / math.sqrt(hd)", "scores.masked_fill(~mask[:, 0], -math.inf)",
            "out.transpose(1, 2).reshape(B, T, H * hd)"),
           ("1 / hd", "repeat_interleave", " / hd", "scores.masked_fill(~mask[:, 0], -math.inf)",
            "out.transpose(1, 2).reshape(B, T, H * hd)"),
           ("not scaled", "repeat_interleave", "", "scores.masked_fill(~mask[:, 0], -math.inf)",
            "out.transpose(1, 2).reshape(B, T, H * hd)"),
           ("mask not applied", "repeat_interleave", " / math.sqrt(hd)", "scores",
            "out.transpose(1, 2).reshape(B, T, H * hd)"),
           ("heads and tokens mixed", "repeat_interleave", " / math.sqrt(hd)",
            "scores.masked_fill(~mask[:, 0], -math.inf)", "out.reshape(B, T, H * hd)")]},
    (10, "qk_norm_rope", "after RoPE"): """
        def qk_norm_rope(qk, qk_norm, cos, sin):
            qk = apply_rope(qk, cos, sin)
            return qk if qk_norm is None else rms_norm(qk, qk_norm, config.rms_norm_eps)""",
    (10, "qk_norm_rope", "QK-norm missing"): """
        def qk_norm_rope(qk, qk_norm, cos, sin):
            return apply_rope(qk, cos, sin)""",
    (10, "qk_norm_rope", "RoPE missing"): """
        def qk_norm_rope(qk, qk_norm, cos, sin):
            return qk if qk_norm is None else rms_norm(qk, qk_norm, config.rms_norm_eps)""",
    (10, "qk_norm_rope", "all the heads together"): """
        def qk_norm_rope(qk, qk_norm, cos, sin):
            if qk_norm is not None:
                B, T, n, hd = qk.shape
                qk = rms_norm(qk.reshape(B, T, n * hd), qk_norm.reshape(n * hd), config.rms_norm_eps).view(B, T, n, hd)
            return apply_rope(qk, cos, sin)""",
    (11, "self_attention", "keys cached before"): """
        def self_attention(x, layer, i, cache, start_pos, cos, sin, mask):
            B, T, _ = x.shape
            H, KV, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
            q, k, v = linear(x, layer.qkv_proj).view(B, T, H + 2 * KV, hd).split([H, KV, KV], dim=2)
            q = qk_norm_rope(q, layer.qk_norm[:H], cos, sin)
            keys, values = cache.store(i, k, v, start_pos, mask.shape[-1])
            return linear(attention(q, keys, values, mask), layer.o_proj)""",
    (11, "self_attention", "layer index ignored"): """
        def self_attention(x, layer, i, cache, start_pos, cos, sin, mask):
            B, T, _ = x.shape
            H, KV, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
            q, k, v = linear(x, layer.qkv_proj).view(B, T, H + 2 * KV, hd).split([H, KV, KV], dim=2)
            qk = qk_norm_rope(torch.cat([q, k], dim=2), layer.qk_norm, cos, sin)
            keys, values = cache.store(0, qk[:, :, H:], v, start_pos, mask.shape[-1])
            return linear(attention(qk[:, :, :H], keys, values, mask), layer.o_proj)""",
    (12, "decoder_layer", "post-norm"): """
        def decoder_layer(x, layer, i, cache, start_pos, cos, sin, mask):
            eps = config.rms_norm_eps
            h = rms_norm(x + layer.mixer(x, layer, i, cache, start_pos, cos, sin, mask), layer.input_layernorm, eps)
            return rms_norm(h + layer.feed_forward(h, layer), layer.post_attention_layernorm, eps)""",
    (12, "decoder_layer", "normed stream"): """
        def decoder_layer(x, layer, i, cache, start_pos, cos, sin, mask):
            eps = config.rms_norm_eps
            x = rms_norm(x, layer.input_layernorm, eps)
            h = x + layer.mixer(x, layer, i, cache, start_pos, cos, sin, mask)
            h = rms_norm(h, layer.post_attention_layernorm, eps)
            return h + layer.feed_forward(h, layer)""",
    (12, "decoder_layer", "reads x"): """
        def decoder_layer(x, layer, i, cache, start_pos, cos, sin, mask):
            eps = config.rms_norm_eps
            h = x + layer.mixer(rms_norm(x, layer.input_layernorm, eps), layer, i, cache, start_pos, cos, sin, mask)
            return h + layer.feed_forward(rms_norm(x, layer.post_attention_layernorm, eps), layer)""",
    (12, "decoder_layer", "norms swapped"): """
        def decoder_layer(x, layer, i, cache, start_pos, cos, sin, mask):
            eps = config.rms_norm_eps
            h = x + layer.mixer(rms_norm(x, layer.post_attention_layernorm, eps), layer, i, cache, start_pos, cos,
                                sin, mask)
            return h + layer.feed_forward(rms_norm(h, layer.input_layernorm, eps), layer)""",
    **{(13, "store", words): f"""
        def store(self, i, k, v, start_pos, L):
            T = k.shape[1]
            self.k[i, :, :, {slots}] = k.transpose(1, 2)
            self.v[i, :, :, {slots}] = v.transpose(1, 2)
            return {returned}"""
       for words, slots, returned in [
           ("slot 0", ":T", "self.k[i, :, :, :L], self.v[i, :, :, :L]"),
           ("one slot late", "start_pos + 1:start_pos + 1 + T", "self.k[i, :, :, :L], self.v[i, :, :, :L]"),
           ("whole cache", "start_pos:start_pos + T", "self.k[i], self.v[i]"),
           ("only the chunk", "start_pos:start_pos + T", "k.transpose(1, 2), v.transpose(1, 2)")]},
    (14, "forward_hidden", "ignore the left padding"): RIGHT["forward_hidden"].replace(
        "(start_pos + torch.arange(T, device=device)[None, :] - cache.pad[:, None]).clamp(min=0)",
        "(start_pos + torch.arange(T, device=device)).expand(B, T)") + RIGHT["lm_head"],
    (14, "forward_hidden", "restart at 0"): RIGHT["forward_hidden"].replace(
        "(start_pos + torch.arange", "(torch.arange") + RIGHT["lm_head"],
    (14, "forward_hidden", "final RMSNorm left out"): RIGHT["forward_hidden"].replace(
        "return rms_norm(x, weights.norm, config.rms_norm_eps)", "return x") + RIGHT["lm_head"],
    (14, "forward_hidden", "reads the embeddings"): RIGHT["forward_hidden"].replace(
        "x = decoder_layer(x,", "h = decoder_layer(x,").replace("return rms_norm(x,", "return rms_norm(h,")
    + RIGHT["lm_head"],
    (14, "lm_head", "untied"): RIGHT["forward_hidden"] + """
        def lm_head(hidden):
            return (hidden @ weights.embed_tokens.T).float()""",
    (14, "lm_head", "model dtype"): RIGHT["forward_hidden"] + """
        def lm_head(hidden):
            return hidden @ weights.lm_head.T""",
}


def greedy_source(prefill="[:, -1]", decode="forward(next_ids[:, None], cache, T + step)[:, -1]",
                  stop="if bool(done.all()) or step == max_new_tokens - 1:"):
    return f"""
        def greedy(prompt_ids, max_new_tokens):
            ids = torch.as_tensor(prompt_ids, device=device)
            B, T = ids.shape
            cache = make_cache(B, T + max_new_tokens)
            logits = forward(ids, cache){prefill}
            new, done = [], torch.zeros(B, dtype=torch.bool, device=device)
            stops = torch.tensor(config.stop_ids, dtype=torch.long, device=device)
            for step in range(max_new_tokens):
                next_ids = logits.argmax(dim=-1)
                new.append(next_ids)
                done |= torch.isin(next_ids, stops)
                {stop}
                    break
                logits = {decode}
            return torch.stack(new, dim=1)"""


MISTAKEN.update({
    (15, "greedy", "cache unused"): greedy_source(
        decode="forward(torch.cat([ids, torch.stack(new, dim=1)], dim=1))[:, -1]"),
    (15, "greedy", "first position"): greedy_source(prefill="[:, 0]", decode="forward(next_ids[:, None], cache, "
                                                   "T + step)[:, 0]"),
    (15, "greedy", "one slot early"): greedy_source(decode="forward(next_ids[:, None], cache, T + step - 1)[:, -1]"),
    (15, "greedy", "stop ids ignored"): greedy_source(stop="if step == max_new_tokens - 1:"),
    (15, "greedy", "any row"): greedy_source(stop="if bool(torch.isin(next_ids, stops).any()) or "
                                                  "step == max_new_tokens - 1:"),
})


def learner(sources, notebook=checks.NOTEBOOK):
    """A fresh exercise namespace (the setup cell's start()), with the learner's functions run in it as the
    exercise cells run them (marked @exercise)."""
    namespace = {"__name__": "__main__"}
    exercise, check, grade = checks.start(namespace, notebook)
    namespace.update(exercise=exercise, check=check, grade=grade)
    for source in sources:
        lines = textwrap.dedent(source).strip("\n").splitlines()
        for node in reversed(ast.parse("\n".join(lines)).body):  # each function marked, as its cell marks it
            if not node.decorator_list:
                lines.insert(node.lineno - 1, "@exercise")
        source = "\n".join(lines) + "\n"
        linecache.cache[f"<learner {id(source)}>"] = (len(source), None, source.splitlines(True), "")  # as Jupyter
        exec(compile(source, f"<learner {id(source)}>", "exec"), namespace)
    return exercise.__self__


def solutions(empty=False):
    """The exercise cells' sources: the notebook's own bodies, or (empty) the committed empty ones."""
    nb = make_exercises.notebook(solutions=not empty)
    return ["".join(c["source"]) for c in nb["cells"] if c["id"].endswith("-code")]


@pytest.fixture(scope="module")
def solved():
    namespace = {"__name__": "__main__"}
    exercise, check, grade = checks.start(namespace)
    namespace.update(exercise=exercise, check=check, grade=grade)
    for source in solutions():
        exec(compile(source, "<cell>", "exec"), namespace)
    return exercise.__self__


def test_the_notebooks_own_functions_pass_every_check(solved):
    for e in checks.EXERCISES[:-1]:
        result = solved.result(e.number)
        assert result.passed, str(result)
        assert str(result).count("\n") == 0 and "right on all" in str(result)  # one line


def test_a_right_answer_written_otherwise_passes():
    lab = learner([RIGHT[n] for n in ("rms_norm", "rotate_half", "apply_rope", "forward_hidden", "lm_head")])
    for number in (1, 4, 14):
        assert lab.result(number).passed, str(lab.result(number))


def test_the_catalogue_is_large_and_every_mistake_has_a_learners_version():
    catalogue = {(e.number, m.function, m.name) for e in checks.EXERCISES for m in e.mistakes}
    assert len({name for _, _, name in catalogue}) >= 15
    covered = [(n, f, name) for (n, f, name) in catalogue for (tn, tf, words) in MISTAKEN
               if (tn, tf) == (n, f) and words in name]
    assert sorted(covered) == sorted(catalogue), set(catalogue) - set(covered)  # each mistake exactly once


@pytest.mark.parametrize("key", list(MISTAKEN), ids=[f"{n}-{f}-{w}" for n, f, w in MISTAKEN])
def test_each_catalogued_mistake_fails_its_check_and_is_named(key):
    number, function, words = key
    lab = learner([MISTAKEN[key]])
    result = lab.result(number)
    assert result.status == "wrong" and result.function == function, str(result)
    assert result.mistake and words in result.mistake, str(result)
    text = str(result)
    assert "WRONG on" in text and "This is a known mistake" in text and "Fix:" in text


def test_an_uncatalogued_mistake_says_where_and_by_how_much():
    lab = learner(["""
        def rms_norm(x, weight, eps=1e-6):
            x32 = x.float()
            return (weight * (x32 / (x32.abs().mean(-1, keepdim=True) + eps)).to(weight.dtype)).to(x.dtype)"""])
    text = str(lab.result(1))
    assert text.startswith('exercise 1 · rms_norm: WRONG on "x (2, 5, 48)": largest difference')
    assert "allowed" in text and "yours" in text and "Not one of the 4 known mistakes of rms_norm" in text


def test_an_error_is_one_line_with_the_learners_line_not_a_traceback():
    lab = learner(["""
        def softmax(x):
            e = torch.exp(x - x.max(dim=-1, keepdim=True))
            return e / e.sum(dim=-1, keepdim=True)"""])
    text = str(lab.result(7))
    assert text.startswith('exercise 7 · softmax: ERROR on "scores (3, 7)": TypeError') and "Traceback" not in text
    assert "(your softmax, line 3 of its cell: `e = torch.exp(x - x.max(dim=-1, keepdim=True))`)" in text
    assert "Its inputs: x: a float32 tensor of shape (3, 7)." in text


def test_an_empty_body_says_not_written_yet(solved):
    lab = learner(solutions(empty=True))
    for e in checks.EXERCISES:
        result = lab.result(e.number)
        assert result.status == "not written" and "not written yet" in str(result) and not result.passed
    assert "not written yet" in str(learner([]).result(1))  # its cell never run
    half = learner([RIGHT["rotate_half"]])  # one of exercise 4's two functions
    assert str(half.result(4)) == ("exercise 4 · rotate_half, apply_rope: not written yet (write the body of "
                                   "apply_rope in the cell above, run that cell, then this one; rotate_half is right)")


def test_under_nbgraders_autograder_a_check_that_does_not_pass_raises(monkeypatch, capsys):
    lab = learner([RIGHT["rms_norm"]])
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    lab.check(1)
    with pytest.raises(AssertionError, match="not written yet"):
        lab.check(2)


def test_unwritten_pieces_are_the_notebooks_and_written_ones_the_learners():
    lab = learner(solutions(empty=True))  # every body empty: the notebook's functions answer
    g = lab.g
    ids = torch.randint(0, g["config"].vocab_size, (2, 5), generator=torch.Generator().manual_seed(0))
    before = g["forward"](ids)
    g["calls"] = calls = []
    exec("@exercise\ndef softmax(x):\n    calls.append(x.shape)\n    x = x.float()\n"
         "    e = torch.exp(x - x.amax(-1, keepdim=True))\n    return e / e.sum(-1, keepdim=True)", g)
    assert torch.allclose(g["forward"](ids), before, atol=1e-5) and calls  # the learner's softmax in attention


def test_a_tensor_made_on_the_cpu_fails_on_another_device():
    lab = learner(["""
        def rope_frequencies(head_dim, theta):
            return 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)""", """
        def attention_mask(pad, start_pos, T, L):
            q, k = start_pos + torch.arange(T)[:, None], torch.arange(L)[None, :]
            return ((k <= q) & (k >= pad[:, None, None]) | (k == q))[:, None, None]"""])
    for number in (2, 8):
        text = str(lab.result(number))
        assert 'on "new tensors on `device`"' in text and "Make new tensors on `device`" in text, text


def test_the_payoff_says_which_exercise_breaks_the_model(checkpoints, monkeypatch):
    for key, value in dict(QWEN3_MODEL_DIR=str(checkpoints("tiny")), QWEN3_DEVICE="cpu", QWEN3_DTYPE="float32").items():
        monkeypatch.setenv(key, value)
    lab, threads = learner([MISTAKEN[(8, "attention_mask", "next slot")]]), torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads would only wait for each other
    try:
        result = lab.result(checks.PAYOFF)
    finally:
        torch.set_num_threads(threads)
    text = str(result)
    assert result.status == "wrong" and "leaves the notebook's greedy tokens at token" in text, text
    assert "your functions that fail their checks: exercise 8 (attention_mask): mistake: off by one" in text
    assert lab.g["config"].vocab_size == 640  # the loaded model stays: the learner's functions run it


def test_the_payoff_is_not_checked_without_a_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("QWEN3_MODEL_DIR", str(tmp_path / "nothing"))
    monkeypatch.setenv("QWEN3_DEVICE", "cpu")
    result = learner([RIGHT["rms_norm"]]).result(checks.PAYOFF)
    text = str(result)
    assert result.status == "not checked"
    assert text.startswith("exercise 16 · your model talks: NOT CHECKED: No checkpoint")
    assert "scripts/make_checkpoint.py" in text and "then this cell again" in text


def test_the_checks_say_not_checked_without_the_notebook(tmp_path, capsys):
    lab = checks.start({}, tmp_path / "qwen3_from_scratch.ipynb")
    lab[1](1)
    assert "NOT CHECKED" in capsys.readouterr().out


def test_the_committed_notebook_is_what_the_generator_makes():
    committed = make_exercises.OUT.read_text(encoding="utf-8")
    assert committed == make_exercises.text(make_exercises.notebook()), \
        "exercises/qwen3_exercises.ipynb is out of date: python3 scripts/make_exercises.py"
    nb = nbformat.reads(committed, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    functions = [c for c in code if c.id.endswith("-code")]
    assert len(functions) >= 12 and all("raise NotImplementedError()" in c.source for c in functions)
    assert all(c.metadata["nbgrader"]["solution"] for c in functions)
    assert all("### BEGIN SOLUTION" in s for s in solutions())


def test_the_generator_finds_the_functions_by_name_wherever_the_cells_are(tmp_path):
    """Cells added around Part 2 and Part 2's cells split differently: the same exercises."""
    nb = json.loads(checks.NOTEBOOK.read_text(encoding="utf-8"))
    part2 = next(i for i, c in enumerate(nb["cells"]) if "".join(c["source"]).startswith("# Part 2"))
    split = next(i for i, c in enumerate(nb["cells"]) if "def rope_frequencies" in "".join(c["source"]))
    source = "".join(nb["cells"][split]["source"])
    at = source.index("def rotate_half")
    nb["cells"][split:split + 1] = [{**nb["cells"][split], "source": [source[:at]]},
                                    {**nb["cells"][split], "id": "moved", "source": [source[at:]]}]
    extra = {"cell_type": "code", "execution_count": None, "id": "extra", "metadata": {}, "outputs": [],
             "source": ["def rms_norm_elsewhere(x):\n", "    return x\n"]}
    nb["cells"][part2:part2] = [extra, {**extra, "id": "extra2"}]  # Part 1 grows
    nb["cells"].insert(-3, {**extra, "id": "extra3"})  # so does a later part
    copy = tmp_path / checks.NOTEBOOK.name
    copy.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for solutions in (False, True):
        assert make_exercises.notebook(solutions, source=copy) == make_exercises.notebook(solutions)


def test_its_links_lead_to_the_main_notebooks_sections():
    nb = json.loads(make_exercises.OUT.read_text(encoding="utf-8"))
    main = json.loads(checks.NOTEBOOK.read_text(encoding="utf-8"))
    headings = {line.lstrip("#").strip().replace(" ", "-") for c in main["cells"] if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("#")}
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    links = re.findall(r"\]\(([^()#\s]+)(?:#([^()\s]*))?\)", text)
    assert links and all((make_exercises.OUT.parent / path).exists() for path, _ in links if "://" not in path)
    assert {anchor for path, anchor in links if path.endswith("qwen3_from_scratch.ipynb") and anchor} <= headings


def run_headless(nb, checkpoint, monkeypatch):
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (requirements-dev.txt)")
    for key, value in dict(QWEN3_MODEL_DIR=str(checkpoint), QWEN3_DEVICE="cpu", QWEN3_DTYPE="float32",
                           OMP_NUM_THREADS="1").items():  # a tiny model: threads would only wait for each other
        monkeypatch.setenv(key, value)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "exercises")}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    return {c.id: "".join(o.get("text", "") for o in c.outputs) for c in code}


def test_the_notebook_runs_headless_with_the_solutions_and_its_model_talks(checkpoints, monkeypatch):
    nb = nbformat.reads(make_exercises.text(make_exercises.notebook(solutions=True)), as_version=4)
    out = run_headless(nb, checkpoints("tiny"), monkeypatch)
    checked = [out[f"ex{e.number:02d}-check"] for e in checks.EXERCISES]
    assert all(": right" in text for text in checked), checked
    assert "the notebook's, token for token" in checked[-1] or "a near tie" in checked[-1], checked[-1]
    assert out["grade"].rstrip().endswith(f"passed {checks.PAYOFF} of {checks.PAYOFF}")


def test_a_first_run_prints_what_the_first_cell_says():
    nb, namespace, out = nbformat.read(make_exercises.OUT, as_version=4), {"__name__": "__main__"}, {}
    for cell in (c for c in nb.cells if c.cell_type == "code"):  # run as Jupyter runs them, in order
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            exec(compile(cell.source, cell.id, "exec"), namespace)
        out[cell.id] = printed.getvalue()
    setup, first, payoff = make_exercises.first_run()
    assert all(line in nb.cells[0].source for line in (setup, first, payoff))
    assert out["setup"].strip() == setup and out["ex01-check"].strip() == first
    assert out[f"ex{checks.PAYOFF:02d}-check"].strip() == payoff
    table = out["grade"].strip().splitlines()
    assert all(row.endswith("not written yet") for row in table[1:-1]) and table[-1] == f"passed 0 of {checks.PAYOFF}"

"""The checks of the exercise ladder, exercises/qwen3_exercises.ipynb.

A check runs the learner's function and the notebook's own (Part 2 of qwen3_from_scratch.ipynb, read when
the check runs: one solution, never a copy) on the same cases, the awkward ones included (one token, left
padding, a chunk after a cached prefix, bf16, large scores). Right: one line. Wrong: the case, by how much
and, when the learner's results equal a known mistake's on every case, that mistake and its fix. A mistake
is a function that makes it, run on the same cases: it is recognised by what it computes, never by reading
the learner's code. Most mistakes are the notebook's own functions given a wrong argument or a wrong piece,
as Part 7 makes them (some are Part 7's own functions).

A check runs the learner's function alone: every other name is the notebook's, so one exercise's mistake
never shows in another's check. Outside the checks, a learner's function that calls an earlier piece gets
the learner's own where it is written, else the notebook's.

Tolerances come from the notebook's own spread: a float32 case allows 1e-5 of the result's scale; a bf16
case allows 4 times the distance of the notebook's bf16 result from the same inputs computed in float32,
plus 2^-6 of the result's scale (a few bf16 roundings), so a right answer computed in another order passes.

    from checks import start
    exercise, check, grade = start(globals())  # the notebook's Part 2 in this namespace, and a toy model
"""

import ast
import contextlib
import dataclasses
import functools
import inspect
import io
import json
import linecache
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "qwen3_from_scratch.ipynb"
REPOSITORY = "https://github.com/qwen3-from-scratch/qwen3-from-scratch"
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_engine import engine_cells, load_engine  # noqa: E402

# What Part 2's cells take from Part 1: the imports, the device and the dtype (checks run on the CPU).
PRELUDE = """\
import dataclasses, functools, itertools, json, math, os, re, sys, time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
import torch
torch.set_grad_enabled(False)
device, dtype = torch.device("cpu"), torch.float32
"""
# Part 7's mistaken functions the catalogue runs (cells tagged `mistakes`).
PART7 = ("rotate_interleaved", "rope_cos_sin_interleaved", "rope_cos_sin_in_model_dtype",
         "rope_cos_sin_left_in_float32", "qk_norm_after_rope")
METHODS = {"store": "KVCache"}  # exercise functions that are methods in the notebook: name -> class
BF16, F32 = torch.bfloat16, torch.float32
PAYOFF = 16
PROMPT = "Give me a short introduction to large language models."
DEVICE_HINT = ("Make new tensors on `device` (or on an input's .device, as pad.device): a tensor made on the CPU by "
               "default fails on a GPU. This case runs on torch's meta device to show it on any machine.")
PAYOFF_NOT_WRITTEN = (f"not written yet: write any of exercises 1-{PAYOFF - 1} first; this cell then runs the real "
                      "model on your functions (the notebook's for the rest)")


class NotChecked(Exception):
    """A check that cannot run; its message says what would make it checkable."""


class Recorded(Exception):
    """Ends a forward pass once the call a case is made of has been recorded."""


class Names:
    """A namespace dict read as attributes: ref.rms_norm is ref["rms_norm"]."""

    def __init__(self, namespace):
        self.__dict__["ns"] = namespace

    def __getattr__(self, name):
        try:
            return self.ns[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name):
        return self.ns[name]


# ---------------------------------------------------------------- the notebook's own functions

def part2_sources(notebook=NOTEBOOK):
    """The source of each engine cell of Part 2 (between `# Part 2` and `# Part 3`), in order."""
    if not Path(notebook).is_file():
        raise NotChecked(f"{notebook} is missing, and every check compares with it: run this notebook "
                         f"inside the repository (git clone {REPOSITORY})")
    try:
        above_part3 = engine_cells(notebook, before="# Part 3")
        return above_part3[len(engine_cells(notebook, before="# Part 2")):]
    except StopIteration:
        raise NotChecked(f"{Path(notebook).name} has no `# Part 2` or `# Part 3` heading any more: "
                         "update part2_sources in exercises/checks.py") from None


def notebook_part2(notebook=NOTEBOOK, namespace=None):
    """Run the prelude and Part 2's engine cells in `namespace` (a new dict unless given); return it."""
    ns = {"__name__": "qwen3_part2"} if namespace is None else namespace
    exec(PRELUDE, ns)
    for source in part2_sources(notebook):
        exec(compile(source, str(notebook), "exec"), ns)
    return ns


def part7_functions(ns, notebook=NOTEBOOK, names=PART7):
    """Define Part 7's functions `names` (and the aliases they read, `x = y`) in ns; -> the names found."""
    found = set()
    for cell in json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code" and "mistakes" in cell.get("metadata", {}).get("tags", []):
            for node in ast.parse("".join(cell["source"])).body:
                alias = isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                if alias or isinstance(node, ast.FunctionDef) and node.name in names:
                    exec(compile(ast.Module([node], []), str(notebook), "exec"), ns)
                    found |= set() if alias else {node.name}
    return found


# ---------------------------------------------------------------- values: copies, casts, comparisons

def transform(obj, on_tensor, memo=None):
    """obj with every tensor inside it (tuples, lists, dicts, dataclasses) replaced by on_tensor(tensor);
    a tensor met twice (tied embeddings) stays one tensor."""
    memo = {} if memo is None else memo
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        new = on_tensor(obj)
    elif isinstance(obj, (list, tuple)):
        new = type(obj)(transform(o, on_tensor, memo) for o in obj)
    elif isinstance(obj, dict):
        new = {k: transform(v, on_tensor, memo) for k, v in obj.items()}
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = dataclasses.replace(obj, **{f.name: transform(getattr(obj, f.name), on_tensor, memo)
                                          for f in dataclasses.fields(obj) if f.init})
    else:
        new = obj
    memo[id(obj)] = new
    return new


def fresh(obj):
    """A copy with tensors of its own (the function under check may write into a cache)."""
    return transform(obj, lambda t: t.clone())


def upcast(obj):
    """bf16 tensors as float32, the same values: the notebook's spread is measured on them."""
    return transform(obj, lambda t: t.float() if t.dtype == BF16 else t)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def leaves(out, label="result"):
    """[(label, value)]: what a result is compared by, its tuples and dicts opened."""
    if isinstance(out, dict):
        return [leaf for k, v in out.items() for leaf in leaves(v, k)]
    if isinstance(out, tuple):
        return [leaf for i, v in enumerate(out) for leaf in leaves(v, f"{label}[{i}]")]
    return [(label, out)]


def describe(value):
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype)[6:]} tensor of shape {tuple(value.shape)}"
    return "None" if value is None else f"a {type(value).__name__}"


def mismatch(mine, theirs):
    """What makes two values incomparable (type, shape, dtype, device), or None."""
    if isinstance(theirs, torch.Tensor):
        if not isinstance(mine, torch.Tensor):
            return f"returns {describe(mine)}, the notebook's {describe(theirs)}"
        for what, a, b in [("shape", tuple(mine.shape), tuple(theirs.shape)),
                           ("dtype", str(mine.dtype)[6:], str(theirs.dtype)[6:]),
                           ("device", str(mine.device), str(theirs.device))]:
            if a != b:
                return f"its {what} is {a}, the notebook's {b}"
        return None
    return None if type(mine) is type(theirs) else f"returns {describe(mine)}, the notebook's {describe(theirs)}"


def differences(mine, theirs):
    """|mine - theirs| elementwise as float64 (NaN meeting NaN and inf meeting the same inf: 0; NaN meeting a
    number: inf); integers and booleans: 1 where they differ."""
    if not theirs.is_floating_point():
        return (mine != theirs).double()
    a, b = mine.double(), theirs.double()
    return (a - b).abs().masked_fill((a == b) | (a.isnan() & b.isnan()), 0).nan_to_num(nan=math.inf)


def gap(mine, theirs):
    """The largest difference of two comparable values (for integers and booleans: how many differ)."""
    if not isinstance(theirs, torch.Tensor):
        return 0.0 if mine == theirs else math.inf
    if theirs.is_meta:  # no values: only where it lives, its shape and dtype count
        return 0.0
    d = differences(mine, theirs)
    return (d.sum() if not theirs.is_floating_point() else d.max() if d.numel() else d.new_zeros(())).item()


def where(mine, theirs):
    """' at [i, j]: yours ..., the notebook's ...': where two tensors differ most."""
    if not isinstance(theirs, torch.Tensor) or mismatch(mine, theirs) or theirs.numel() == 0 or theirs.is_meta:
        return ""
    d = differences(mine, theirs)
    flat, at = int(d.argmax()), []
    for size in reversed(d.shape):  # the flat index as (i, j, ...)
        flat, i = divmod(flat, size)
        at.insert(0, i)
    at = tuple(at)
    show = lambda t: f"{t[at].item():.4g}" if t.is_floating_point() else str(t[at].item())
    return f" at {list(at)}: yours {show(mine)}, the notebook's {show(theirs)}"


def rounding(value):
    """What a right answer may differ by at least: 1e-5 of the scale in float32, 2^-6 in bf16."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() == 0 or value.is_meta:
        return 0.0
    scale = 1 + value.double().nan_to_num(nan=0, posinf=0, neginf=0).abs().max().item()
    return scale * (2 ** -6 if value.dtype in (torch.bfloat16, torch.float16) else 1e-5)


# ---------------------------------------------------------------- cases, mistakes, exercises

@dataclass
class Call:
    args: tuple
    names: dict = field(default_factory=dict)  # module-level names it runs under (config, weights)


@dataclass
class Case:
    name: str
    function: str              # the exercise's function it calls
    build: Callable            # (lab, dtype) -> Call
    dtype: torch.dtype = F32   # the model dtype; in bf16 the tolerance is measured (the notebook's spread)
    output: Callable = None    # (result, args after the call, tokens per forward pass) -> what is compared
    device: str = "cpu"        # "meta": a device without values, where a tensor made on the CPU shows


@dataclass
class Mistake:
    name: str       # what the mistaken function does
    fix: str        # what to do instead
    function: str   # the exercise's function it stands in for
    make: Callable  # lab -> the mistaken function (the right one's signature)


@dataclass
class Exercise:
    number: int
    title: str
    functions: tuple  # what the learner writes, in the cell's order
    minutes: int      # about how long a learner takes
    section: str      # the main notebook's section to read first
    cases: Callable = None  # lab -> [Case]
    mistakes: tuple = ()


def toy_config(ref, **changes):
    """A toy Qwen3 with the real one's quirks (grouped-query attention, heads * head_dim != hidden)."""
    return ref.Config(**{**dict(vocab_size=101, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                                rope_theta=1e6, max_position_embeddings=64, tie_word_embeddings=True,
                                stop_ids=(), sampling={}), **changes})


def toy_weights(cfg, layer_class, weights_class, dtype=F32, seed=0):
    """Random weights of cfg's shapes. Norm weights near 1 but not 1 (a missing or misplaced norm shows);
    q_norm shared by the query heads and k_norm by the key heads, as in a checkpoint."""
    gen = torch.Generator().manual_seed(seed)
    w = lambda *shape: torch.randn(*shape, generator=gen) * shape[-1] ** -0.5
    norm = lambda *shape: 1 + 0.2 * torch.randn(*shape, generator=gen)
    D, F, V, hd = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.head_dim
    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
    layers = [layer_class(input_layernorm=norm(D), qkv_proj=w((H + 2 * KV) * hd, D),
                          qk_norm=torch.cat([norm(hd).expand(H, hd), norm(hd).expand(KV, hd)]),
                          o_proj=w(D, H * hd), post_attention_layernorm=norm(D), gate_up_proj=w(2 * F, D),
                          down_proj=w(D, F)) for _ in range(cfg.num_hidden_layers)]
    embed_tokens = torch.randn(V, D, generator=gen)
    lm_head = embed_tokens if cfg.tie_word_embeddings else 4 * w(V, D)
    weights = weights_class(embed_tokens=embed_tokens, layers=layers, norm=norm(D), lm_head=lm_head)
    return transform(weights, lambda t: t.to(dtype).contiguous())


# The forward passes the model-level cases are recorded from: padding per row, tokens cached before, chunk.
SCENARIOS = {
    "prefill": ((0, 0), 0, 6),
    "left padding": ((0, 2), 0, 6),
    "a chunk after a cached prefix": ((0, 2), 5, 3),
    "one token, decoding": ((0, 2), 7, 1),
}
PREFIX = "a chunk after a cached prefix"
ON_DEVICE = "new tensors on `device`"


def recorded(target, scenario, layer=1, change=None):
    """A case builder: the arguments the notebook's forward_hidden passes to `target` for layer `layer` (to
    forward_hidden itself: the chunk, the cache, start_pos) in the scenario's last chunk, on the toy model;
    change(*args) -> args edits them."""
    def build(lab, dtype):
        args, names = lab.record(target, scenario, dtype, layer)
        return Call(change(*args) if change else args, names)
    return build


def recorded_cases(target, output=None, layer=1, bf16=PREFIX):
    return [*(Case(name, target, recorded(target, name, layer), F32, output) for name in SCENARIOS),
            Case(f"bf16, {bf16}", target, recorded(target, bf16, layer), BF16, output)]


def with_cache(cache_at, layer_at=None):
    """A result and what the function left in the cache (layer layer_at's, or all)."""
    def output(result, args, steps):
        cache = args[cache_at]
        i = args[layer_at] if layer_at is not None else slice(None)
        return {"result": result, "cache keys": cache.k[i], "cache values": cache.v[i]}
    return output


def real_tokens(hidden, args, steps):
    """forward_hidden's result at real tokens only (what left padding's slots hold, nothing reads)."""
    ids, cache, start_pos = args[:3]
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3 or hidden.shape[:2] != ids.shape:
        return hidden
    slot = start_pos + torch.arange(ids.shape[1], device=hidden.device)
    return hidden.masked_fill((slot < cache.pad[:, None])[..., None], 0)


def tokens_and_cache_use(tokens, args, steps):
    return {"tokens": tokens, "decode steps of one token each (the cache used)": all(t == 1 for t in steps[1:])}


# ---------------------------------------------------------------- the mistakes, as functions that make them

def rms_eps_outside_root(lab, x, weight, eps=1e-6):
    x32 = x.float()
    x32 = x32 / (x32.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    return (weight * x32.to(weight.dtype)).to(x.dtype)


def rope_angles_in_bf16(lab, positions, frequencies, scale=1.0):
    return tuple((t * scale).to(lab.ref.dtype) for t in lab.ref.rope_cos_sin_in_model_dtype(positions, frequencies))


def silu_of_product(lab, x, layer):
    gate, up = lab.ref.linear(x, layer.gate_up_proj).chunk(2, dim=-1)
    return lab.ref.linear(lab.ref.silu(gate * up), layer.down_proj)


def mask_from(rule):
    """A mask made by `rule(query slot (T, 1), key slot (L,), pad (B, 1, 1))` -> (B, T, L)."""
    def attention_mask(pad, start_pos, T, L):
        slot = functools.partial(torch.arange, device=pad.device)
        return rule(start_pos + slot(T)[:, None], slot(L), pad[:, None, None])[:, None, None]
    return attention_mask


def attention_kv_repeated(lab, q, k, v, mask):  # KV head h % KV for query head h, as .repeat makes them
    n_rep = q.shape[2] // k.shape[1]
    return lab.ref.attention(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1), mask)


def attention_heads_mixed(lab, q, k, v, mask):  # (B, H, T, hd) reshaped to (B, T, H * hd) as it lies
    out = lab.ref.attention(q, k, v, mask)
    B, T, H, hd = q.shape
    return out.view(B, T, H, hd).transpose(1, 2).reshape(B, T, H * hd)


def qk_norm_all_heads(lab, qk, qk_norm, cos, sin):  # one RMSNorm over every head's dimensions together
    if qk_norm is not None:
        qk = lab.ref.rms_norm(qk.flatten(-2), qk_norm.flatten(), lab.ref.config.rms_norm_eps).view_as(qk)
    return lab.ref.apply_rope(qk, cos, sin)


def qk_norm_without_rope(lab, qk, qk_norm, cos, sin):
    return qk if qk_norm is None else lab.ref.rms_norm(qk, qk_norm, lab.ref.config.rms_norm_eps)


def keys_cached_raw(lab, *args):  # QK-norm and RoPE on the queries only: keys stored and used raw
    H, right = lab.ref.config.num_attention_heads, lab.ref.qk_norm_rope

    def queries_only(qk, qk_norm, cos, sin):
        q = right(qk[:, :, :H], None if qk_norm is None else qk_norm[:H], cos, sin)
        return torch.cat([q, qk[:, :, H:]], dim=2)
    return lab.call_with(lab.ref.self_attention, args, qk_norm_rope=queries_only)


def post_norm_layer(lab, x, layer, i, cache, start_pos, cos, sin, mask):  # the 2017 Transformer's order
    eps, norm = lab.ref.config.rms_norm_eps, lab.ref.rms_norm
    h = norm(x + layer.mixer(x, layer, i, cache, start_pos, cos, sin, mask), layer.input_layernorm, eps)
    return norm(h + layer.feed_forward(h, layer), layer.post_attention_layernorm, eps)


def residual_from_normed(lab, x, layer, i, cache, start_pos, cos, sin, mask):
    eps, norm = lab.ref.config.rms_norm_eps, lab.ref.rms_norm
    xn = norm(x, layer.input_layernorm, eps)
    h = xn + layer.mixer(xn, layer, i, cache, start_pos, cos, sin, mask)
    hn = norm(h, layer.post_attention_layernorm, eps)
    return hn + layer.feed_forward(hn, layer)


def feed_forward_reads_x(lab, x, layer, i, cache, start_pos, cos, sin, mask):
    eps, norm = lab.ref.config.rms_norm_eps, lab.ref.rms_norm
    h = x + layer.mixer(norm(x, layer.input_layernorm, eps), layer, i, cache, start_pos, cos, sin, mask)
    return h + layer.feed_forward(norm(x, layer.post_attention_layernorm, eps), layer)


def norms_swapped(lab, x, layer, *args):
    swapped = dataclasses.replace(layer, input_layernorm=layer.post_attention_layernorm,
                                  post_attention_layernorm=layer.input_layernorm)
    return lab.ref.decoder_layer(x, swapped, *args)


def store_then(returned):
    """The notebook's store, then return returned(cache, i, k, v, start_pos, L) instead of its slots."""
    def store(lab, cache, i, k, v, start_pos, L):
        lab.reference("store")(cache, i, k, v, start_pos, L)
        return returned(cache, i, k, v, start_pos, L)
    return store


def store_at(slot, layer=None):
    """The notebook's store into slot(start_pos) (and layer `layer`, when given)."""
    def store(lab, cache, i, k, v, start_pos, L):
        return lab.reference("store")(cache, i if layer is None else layer, k, v, slot(start_pos), L)
    return store


def positions_as(rule):
    """forward_hidden with RoPE's positions rule(start_pos, T, pad) (B, T) instead of the right ones."""
    def forward_hidden(lab, token_ids, cache, start_pos=0, L=None):
        right = lab.ref.rope_cos_sin
        B, T = token_ids.shape
        positions = rule(start_pos, T, cache.pad[:, None]).expand(B, T)
        wrong = lambda p, frequencies, scale=1.0: right(positions[:, :, None], frequencies, scale)
        return lab.call_with(lab.ref.forward_hidden, (token_ids, cache, start_pos, L), rope_cos_sin=wrong)
    return forward_hidden


def without_final_norm(lab, token_ids, cache, start_pos=0, L=None):
    layers = []
    lab.call_with(lab.ref.forward_hidden, (token_ids, cache, start_pos, L),
                  observe=lambda what, value: layers.append(value) if what == "layer" else None)
    return layers[-1]


def layers_read_embeddings(lab, token_ids, *args):
    right, embedded = lab.ref.decoder_layer, []

    def decoder_layer(x, *rest):
        embedded.append(embedded[0] if embedded else x)
        return right(embedded[0], *rest)
    return lab.call_with(lab.ref.forward_hidden, (token_ids, *args), decoder_layer=decoder_layer)


def greedy_with_forward(wrap):
    """The notebook's greedy, its forward replaced by wrap(the notebook's forward)."""
    def greedy(lab, prompt_ids, max_new_tokens):
        return lab.call_with(lab.ref.greedy, (prompt_ids, max_new_tokens), forward=wrap(lab.ref.forward))
    return greedy


def forward_ignoring_cache(forward):  # each call runs the whole sequence so far; the cache's slots unused
    sequences = {}

    def recompute(token_ids, cache=None, start_pos=0):
        ids = torch.as_tensor(token_ids)
        seq = torch.cat([sequences.get(id(cache), ids[:, :0])[:, :start_pos], ids], dim=1)
        sequences[id(cache)] = seq
        return forward(seq)[:, -ids.shape[1]:]
    return recompute


def forward_one_slot_early(forward):  # decode steps at T + step - 1: each token overwrites the last slot
    prompt = {}

    def early(token_ids, cache=None, start_pos=0):
        T = prompt.setdefault(id(cache), torch.as_tensor(token_ids).shape[1])
        return forward(token_ids, cache, start_pos - 1 if start_pos >= T else start_pos)
    return early


def greedy_ignoring_stops(lab, prompt_ids, max_new_tokens):
    never = dataclasses.replace(lab.ref.config, stop_ids=())
    return lab.call_with(lab.ref.greedy, (prompt_ids, max_new_tokens), config=never)


def greedy_stopping_at_any_row(lab, prompt_ids, max_new_tokens):
    tokens = lab.ref.greedy(prompt_ids, max_new_tokens)
    stopped = torch.isin(tokens, torch.tensor(lab.ref.config.stop_ids, dtype=torch.long)).any(dim=0)
    return tokens[:, :int(stopped.nonzero()[0]) + 1] if stopped.any() else tokens


# ---------------------------------------------------------------- the cases' inputs

def rms_case(shape, weight_shape, scale=3.0, eps=1e-6, seed=0):
    return lambda lab, dtype: Call(((randn(*shape, seed=seed) * scale).to(dtype),
                                    (1 + 0.2 * randn(*weight_shape, seed=seed + 1)).to(dtype), eps))


def positions(*rows):
    return torch.tensor(rows)[:, :, None]  # (B, T, 1), as forward_hidden passes them


def rope_case(pos, head_dim=16, theta=1e6, scale=1.0):
    return lambda lab, dtype: Call((pos, lab.ref.rope_frequencies(head_dim, theta), scale))


def tensor_case(*shape, scale=1.0, seed=0, shift=0.0):
    return lambda lab, dtype: Call(((randn(*shape, seed=seed) * scale + shift).to(dtype),))


def apply_rope_case(pos, heads=6, seed=0):
    def build(lab, dtype):
        cos, sin = lab.ref.rope_cos_sin(pos, lab.ref.rope_frequencies(16, 1e6))
        return Call((randn(*pos.shape[:2], heads, 16, seed=seed).to(dtype), cos, sin))
    return build


def mlp_case(T, seed):
    def build(lab, dtype):
        return Call((randn(2, T, 48, seed=seed).to(dtype), lab.toy(dtype)[1].layers[0]))
    return build


def mask_case(pad, start_pos, T, L):
    return lambda lab, dtype: Call((torch.tensor(pad), start_pos, T, L))


def lm_head_case(T, tied=True, seed=0):
    def build(lab, dtype):
        cfg, weights = lab.toy(dtype, tie_word_embeddings=tied)
        return Call((randn(2, T, 48, seed=seed).to(dtype),), dict(config=cfg, weights=weights))
    return build


def greedy_case(rows, prompt_len, new, seed, stop_row=None):
    """greedy on the toy model. stop_row: the 3rd or a later token of this row that no other row produces
    becomes the config's one stop id: the loop stops once every row has produced it (or runs to the end)."""
    def build(lab, dtype):
        cfg, weights = lab.toy(dtype, tie_word_embeddings=False)  # tied, a toy model repeats its last token
        prompts = torch.randint(0, cfg.vocab_size, (rows, prompt_len), generator=torch.Generator().manual_seed(seed))
        if stop_row is not None:
            with lab.swapped(config=cfg, weights=weights, dtype=dtype):
                free = lab.ref.greedy(prompts, new)
            others = set(free[[r for r in range(rows) if r != stop_row]].flatten().tolist())
            row = free[stop_row].tolist()
            step = next(s for s in range(2, new - 1) if row[s] not in {*row[:s], *others})
            cfg = dataclasses.replace(cfg, stop_ids=(row[step],))
        return Call((prompts, new), dict(config=cfg, weights=weights))
    return build


# ---------------------------------------------------------------- the ladder

def made_by(fn):
    """A mistake's make: fn(lab, *args), a mistaken function written here."""
    return lambda lab: functools.partial(fn, lab)


def ladder():
    """The exercises in order, each with its cases and the mistakes its check recognises."""
    ref_fn = lambda body: lambda lab: functools.partial(body, lab.ref)  # a mistake made of the notebook's own
    halves = "Qwen3 pairs dimension i with i + d/2: rotate_half(x) = (-x[..., d/2:], x[..., :d/2])"
    neighbours = "neighbours paired, (x0, x1), (x2, x3), ... (the complex-number form), not dimension i with i + d/2"
    wrong_way = "the minus on the other half, (x[d/2:], -x[:d/2]): every pair turns the wrong way"
    return [
        Exercise(1, "RMSNorm", ("rms_norm",), 10, "RMSNorm", lambda lab: [
            Case("x (2, 5, 48)", "rms_norm", rms_case((2, 5, 48), (48,))),
            Case("one token", "rms_norm", rms_case((1, 1, 48), (48,), seed=2)),
            Case("tiny x, where eps counts", "rms_norm", rms_case((2, 5, 48), (48,), scale=1e-3, seed=3)),
            Case("eps 0.1", "rms_norm", rms_case((2, 5, 48), (48,), eps=0.1, seed=4)),
            Case("per-head weights (6, 16)", "rms_norm", rms_case((2, 3, 6, 16), (6, 16), seed=5)),
            Case("bf16", "rms_norm", rms_case((2, 5, 48), (48,), seed=6), BF16),
        ], (
            Mistake("epsilon outside the square root: x / (sqrt(mean(x^2)) + eps)",
                    "eps goes under the root: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)", "rms_norm",
                    made_by(rms_eps_outside_root)),
            Mistake("the mean subtracted first: that is LayerNorm, not RMSNorm",
                    "RMSNorm only divides by the root mean square; it subtracts nothing", "rms_norm",
                    ref_fn(lambda ref, x, weight, eps=1e-6: ref.rms_norm(
                        x.float() - x.float().mean(-1, keepdim=True), weight, eps).to(x.dtype))),
            Mistake("the weight applied as (1 + weight), as Gemma's norms (and Qwen3.5's own) do",
                    "Qwen3 multiplies by the weight itself", "rms_norm",
                    ref_fn(lambda ref, x, weight, eps=1e-6: ref.rms_norm(x, 1 + weight, eps))),
            Mistake("the eps argument ignored (a fixed 1e-6, or the config's)",
                    "use the eps passed in: the model passes its config's rms_norm_eps (SmolLM2's is 1e-5)",
                    "rms_norm", ref_fn(lambda ref, x, weight, eps=1e-6: ref.rms_norm(x, weight, 1e-6))),
        )),
        Exercise(2, "RoPE's frequencies", ("rope_frequencies",), 5, "RoPE, rotary position embeddings",
                 lambda lab: [
            Case("head_dim 16, theta 1e6", "rope_frequencies", lambda lab, dtype: Call((16, 1e6))),
            Case("Qwen3's: 128, 1e6", "rope_frequencies", lambda lab, dtype: Call((128, 1e6))),
            Case("head_dim 64, theta 10000", "rope_frequencies", lambda lab, dtype: Call((64, 10000.0))),
            Case("a bf16 model (still float32)", "rope_frequencies", lambda lab, dtype: Call((32, 5e5)), BF16),
            Case(ON_DEVICE, "rope_frequencies", lambda lab, dtype: Call((16, 1e6)), device="meta"),
        ], (
            Mistake("rope_theta fixed at 10000 (older models') instead of the theta passed in",
                    "use theta: Qwen3's config says rope_theta = 1e6", "rope_frequencies",
                    ref_fn(lambda ref, head_dim, theta: ref.rope_frequencies(head_dim, 10000.0))),
            Mistake("one frequency per dimension, arange(head_dim), not one per pair",
                    "head_dim / 2 of them: torch.arange(0, head_dim, 2) / head_dim", "rope_frequencies",
                    ref_fn(lambda ref, head_dim, theta: ref.rope_frequencies(2 * head_dim, theta))),
            Mistake("theta^(+2i/d), the minus (or the 1 / ...) missing: the angles grow with i",
                    "theta_i = 1 / theta^(2i/d): pair 0 turns fastest, 1 radian per position", "rope_frequencies",
                    ref_fn(lambda ref, head_dim, theta: 1 / ref.rope_frequencies(head_dim, theta))),
            Mistake("the frequencies cast to the model dtype",
                    "keep them float32: in bf16 the angles are far off at long positions", "rope_frequencies",
                    ref_fn(lambda ref, head_dim, theta: ref.rope_frequencies(head_dim, theta).to(ref.dtype))),
        )),
        Exercise(3, "cos and sin of RoPE's angles", ("rope_cos_sin",), 10, "RoPE, rotary position embeddings",
                 lambda lab: [
            Case("positions (2, 5, 1)", "rope_cos_sin", rope_case(positions(range(5), [0, 0, 0, 1, 2]))),
            Case("one position", "rope_cos_sin", rope_case(positions([7]))),
            Case("YaRN's scale 1.25", "rope_cos_sin", rope_case(positions(range(4)), scale=1.25)),
            Case("head_dim 128 at 30000..", "rope_cos_sin", rope_case(positions(range(30000, 30004)), 128)),
            Case("bf16", "rope_cos_sin", rope_case(positions(range(5), [0, 0, 0, 1, 2])), BF16),
            Case("bf16 at 30000..", "rope_cos_sin", rope_case(positions(range(30000, 30004)), 128, scale=1.25),
                 BF16),
        ], (
            Mistake("angles interleaved (0, 0, 1, 1, ...), not two halves (0, 1, ..., 0, 1, ...)",
                    "torch.cat([angles, angles], dim=-1): dimensions i and i + d/2 share an angle", "rope_cos_sin",
                    lambda lab: lab.ref.rope_cos_sin_interleaved),
            Mistake("angles computed in the model dtype (bf16): far off at long positions",
                    "positions[..., None].float() * frequencies; cast only cos and sin", "rope_cos_sin",
                    made_by(rope_angles_in_bf16)),
            Mistake("cos and sin left in float32: q and k silently become float32",
                    "return them .to(dtype), the model dtype", "rope_cos_sin",
                    lambda lab: lab.ref.rope_cos_sin_left_in_float32),
            Mistake("the scale left out", "multiply cos and sin by scale (YaRN's attention factor; 1.0 without YaRN)",
                    "rope_cos_sin", ref_fn(lambda ref, positions, frequencies, scale=1.0: ref.rope_cos_sin(
                        positions, frequencies))),
        )),
        Exercise(4, "Applying RoPE", ("rotate_half", "apply_rope"), 10, "RoPE, rotary position embeddings",
                 lambda lab: [
            Case("rotate_half (2, 3, 4, 16)", "rotate_half", tensor_case(2, 3, 4, 16)),
            Case("rotate_half, bf16", "rotate_half", tensor_case(1, 1, 2, 8, seed=1), BF16),
            Case("q (2, 5, 6, 16)", "apply_rope", apply_rope_case(positions(range(5), [0, 0, 0, 1, 2]))),
            Case("one token", "apply_rope", apply_rope_case(positions([9]), heads=2, seed=1)),
            Case("positions 200..", "apply_rope", apply_rope_case(positions(range(200, 203)), seed=2)),
            Case("bf16", "apply_rope", apply_rope_case(positions(range(5), range(5)), seed=3), BF16),
        ], (
            Mistake(neighbours, halves, "rotate_half", lambda lab: lab.ref.rotate_interleaved),
            Mistake(wrong_way, halves, "rotate_half", ref_fn(lambda ref, x: -ref.rotate_half(x))),
            Mistake(neighbours, halves, "apply_rope", lambda lab: lambda x, cos, sin: lab.call_with(
                      lab.ref.apply_rope, (x, cos, sin), rotate_half=lab.ref.rotate_interleaved)),
            Mistake(wrong_way, halves, "apply_rope", ref_fn(lambda ref, x, cos, sin: ref.apply_rope(x, cos, -sin))),
            Mistake("cos and sin swapped: x * sin + rotate_half(x) * cos", "x * cos + rotate_half(x) * sin",
                    "apply_rope", ref_fn(lambda ref, x, cos, sin: ref.apply_rope(x, sin, cos))),
        )),
        Exercise(5, "SiLU", ("silu",), 5, "SiLU and the SwiGLU MLP", lambda lab: [
            Case("x (3, 40)", "silu", tensor_case(3, 40, scale=4)),
            Case("large |x|: -300 .. 300", "silu", lambda lab, dtype: Call((torch.linspace(-300, 300, 61),))),
            Case("bf16", "silu", tensor_case(3, 40, scale=4, seed=1), BF16),
        ], (
            Mistake("the sigmoid alone, sigma(x), not x * sigma(x)", "SiLU(x) = x * sigma(x) = x / (1 + e^-x)", "silu",
                    lambda lab: lambda x: (1 / (1 + torch.exp(-x.float()))).to(x.dtype)),
            Mistake("sigma(x) as e^x / (1 + e^x): inf / inf = NaN for large x",
                    "x / (1 + torch.exp(-x)): e^-x overflows only where the result is 0 anyway", "silu",
                    lambda lab: lambda x: (x.float() * x.float().exp() / (1 + x.float().exp())).to(x.dtype)),
        )),
        Exercise(6, "The SwiGLU MLP", ("mlp",), 10, "SiLU and the SwiGLU MLP", lambda lab: [
            Case("x (2, 5, 48)", "mlp", mlp_case(5, 0)),
            Case("one token", "mlp", mlp_case(1, 1)),
            Case("bf16", "mlp", mlp_case(5, 2), BF16),
        ], (
            Mistake("gate and up swapped: SiLU on the up half",
                    "gate_up_proj stacks gate_proj, then up_proj: gate, up = linear(x, ...).chunk(2, dim=-1)", "mlp",
                    ref_fn(lambda ref, x, layer: ref.mlp(x, dataclasses.replace(
                        layer, gate_up_proj=torch.cat(layer.gate_up_proj.chunk(2)[::-1]))))),
            Mistake("SiLU of the product, SiLU(gate * up)", "only the gate goes through SiLU: SiLU(gate) * up", "mlp",
                    made_by(silu_of_product)),
            Mistake("no SiLU at all: gate * up", "SiLU(gate) * up", "mlp",
                    lambda lab: lambda x, layer: lab.call_with(lab.ref.mlp, (x, layer), silu=lambda t: t)),
        )),
        Exercise(7, "A stable softmax", ("softmax",), 5, "Softmax", lambda lab: [
            Case("scores (3, 7)", "softmax", tensor_case(3, 7, scale=2)),
            Case("large scores, near 1000", "softmax", tensor_case(3, 7, scale=2, shift=1000, seed=1)),
            Case("masked (-inf) scores", "softmax", lambda lab, dtype: Call((randn(2, 6, seed=2).masked_fill(
                torch.tensor([[0, 1, 0, 0, 1, 1], [1, 1, 1, 1, 1, 0]], dtype=torch.bool), -math.inf),))),
            Case("(2, 3, 5): the last axis", "softmax", tensor_case(2, 3, 5, seed=3)),
            Case("rows far apart: 0 and 1000", "softmax", lambda lab, dtype: Call((
                randn(2, 5, seed=5) + torch.tensor([[0.0], [1000.0]]),))),
            Case("bf16 scores", "softmax", tensor_case(3, 7, scale=2, seed=4), BF16),
        ], (
            Mistake("the maximum not subtracted: e^1000 overflows, inf / inf = NaN",
                    "subtract x.amax(dim=-1, keepdim=True) before exp (the result is the same, and never overflows)",
                    "softmax", lambda lab: lambda x: x.float().exp() / x.float().exp().sum(-1, keepdim=True)),
            Mistake("along an axis other than the last", "dim=-1: each row of scores sums to 1", "softmax",
                    lambda lab: [lambda x: lab.ref.softmax(x.transpose(0, -1)).transpose(0, -1),
                                 lambda x: lab.ref.softmax(x.transpose(1, -1)).transpose(1, -1)]),
            Mistake("the maximum of the whole tensor subtracted, not each row's: a row far below it underflows, 0/0",
                    "x.amax(dim=-1, keepdim=True): each row's own maximum", "softmax",
                    lambda lab: lambda x: (x.float() - x.float().max()).exp()
                    / (x.float() - x.float().max()).exp().sum(-1, keepdim=True)),
            Mistake("left in the scores' dtype (bf16)", "compute and return float32: x = x.float() first", "softmax",
                    lambda lab: lambda x: lab.ref.softmax(x).to(x.dtype)),
        )),
        Exercise(8, "The causal and padding mask", ("attention_mask",), 15, "Masks and grouped-query attention",
                 lambda lab: [
            Case("prefill, 5 tokens", "attention_mask", mask_case([0, 0], 0, 5, 5)),
            Case("left padding [0, 2]", "attention_mask", mask_case([0, 2], 0, 5, 5)),
            Case("a chunk after a cached prefix", "attention_mask", mask_case([0, 2], 4, 3, 7)),
            Case("one token, decoding", "attention_mask", mask_case([1, 0], 6, 1, 7)),
            Case("keys past the chunk (L > start_pos + T)", "attention_mask", mask_case([0, 3], 2, 2, 6)),
            Case(ON_DEVICE, "attention_mask", mask_case([0, 2], 4, 3, 7), device="meta"),
        ], (
            Mistake("off by one: a query cannot see itself (j < t, not j <= t)",
                    "key slot <= query slot: a token attends to itself too", "attention_mask",
                    lambda lab: mask_from(lambda q, k, pad: (k < q) & (k >= pad))),
            Mistake("off by one: a query sees the next slot (j <= t + 1)", "key slot <= query slot", "attention_mask",
                    lambda lab: mask_from(lambda q, k, pad: (k <= q + 1) & (k >= pad) | (k == q))),
            Mistake("start_pos left out: query t taken to sit in slot t",
                    "query t of the chunk sits in slot start_pos + t", "attention_mask",
                    ref_fn(lambda ref, pad, start_pos, T, L: ref.attention_mask(pad, 0, T, L))),
            Mistake("the left padding not masked", "hide key slots j < pad[b] from row b", "attention_mask",
                    ref_fn(lambda ref, pad, start_pos, T, L: ref.attention_mask(
                        torch.zeros_like(pad), start_pos, T, L))),
            Mistake("returned as (B, T, L), without the two head axes",
                    "allowed[:, None, None]: (B, 1, 1, T, L), the 1s broadcast over the KV heads and their groups",
                    "attention_mask", ref_fn(lambda ref, *args: ref.attention_mask(*args)[:, 0, 0])),
            Mistake("a padding query sees no key: its scores are all -inf, 0/0 = NaN",
                    "let every query see its own slot too: ... | (key_slot == query_slot)", "attention_mask",
                    lambda lab: mask_from(lambda q, k, pad: (k <= q) & (k >= pad))),
        )),
        Exercise(9, "Grouped-query attention", ("attention",), 25, "Masks and grouped-query attention",
                 lambda lab: [
            *recorded_cases("attention"),
            Case("large scores (q x 30)", "attention",
                 recorded("attention", "left padding", change=lambda q, k, v, mask: (q * 30, k, v, mask))),
        ], (
            Mistake("key-value heads repeated in the wrong order: .repeat, not .repeat_interleave",
                    "query head h uses KV head h // n_rep: k.repeat_interleave(n_rep, dim=1)", "attention",
                    made_by(attention_kv_repeated)),
            Mistake("scores scaled by 1 / hd, not 1 / sqrt(hd)", "multiply q k^T by hd ** -0.5", "attention",
                    ref_fn(lambda ref, q, k, v, mask: ref.attention(q * q.shape[-1] ** -0.5, k, v, mask))),
            Mistake("scores not scaled", "multiply q k^T by hd ** -0.5", "attention",
                    ref_fn(lambda ref, q, k, v, mask: ref.attention(q * q.shape[-1] ** 0.5, k, v, mask))),
            Mistake("the mask not applied", "scores.masked_fill(~mask, -inf) before the softmax", "attention",
                    ref_fn(lambda ref, q, k, v, mask: ref.attention(q, k, v, torch.ones_like(mask)))),
            Mistake("heads and tokens mixed up: (B, H, T, hd) reshaped to (B, T, H * hd) without the transpose",
                    "transpose(1, 2) to (B, T, H, hd) first, then reshape", "attention",
                    made_by(attention_heads_mixed)),
        )),
        Exercise(10, "QK-norm", ("qk_norm_rope",), 10, "The attention layer", lambda lab: [
            *recorded_cases("qk_norm_rope"),
            Case("a Llama: qk_norm None", "qk_norm_rope", recorded(
                "qk_norm_rope", "left padding", change=lambda qk, qk_norm, cos, sin: (qk, None, cos, sin))),
        ], (
            Mistake("QK-norm after RoPE, not before",
                          "norm first, then rotate: apply_rope(rms_norm(qk, ...), cos, sin)",
                    "qk_norm_rope", lambda lab: lab.ref.qk_norm_after_rope),
            Mistake("QK-norm missing: RoPE only",
                          "rms_norm(qk, qk_norm, config.rms_norm_eps) before RoPE (when not None)",
                    "qk_norm_rope", ref_fn(lambda ref, qk, qk_norm, cos, sin: ref.apply_rope(qk, cos, sin))),
            Mistake("RoPE missing: the norm only", "apply_rope(normed, cos, sin) after the norm", "qk_norm_rope",
                    made_by(qk_norm_without_rope)),
            Mistake("one RMSNorm over all the heads together, not one per head",
                    "norm over the last axis (hd) of qk (B, T, heads, hd), weight qk_norm (heads, hd)", "qk_norm_rope",
                    made_by(qk_norm_all_heads)),
        )),
        Exercise(11, "The attention layer", ("self_attention",), 20, "The attention layer", lambda lab: [
            *recorded_cases("self_attention", with_cache(3, 2)),
        ], (
            Mistake("keys cached before QK-norm and RoPE (only the queries normed and rotated)",
                    "qk_norm_rope on queries and keys together, then store those keys", "self_attention",
                    made_by(keys_cached_raw)),
            Mistake("the layer index ignored: every layer's keys and values written to layer 0",
                    "cache.store(i, ...): layer i's slots", "self_attention",
                    lambda lab: lambda x, layer, i, *rest: lab.ref.self_attention(x, layer, 0, *rest)),
        )),
        Exercise(12, "The decoder layer", ("decoder_layer",), 10,
                 "The decoder layer, the KV cache and the forward pass", lambda lab: [
            *recorded_cases("decoder_layer"),
        ], (
            Mistake("post-norm: RMSNorm after adding the residual (the 2017 Transformer's order)",
                    "pre-norm: norm the sublayer's input, add its output to the stream as it was", "decoder_layer",
                    made_by(post_norm_layer)),
            Mistake("the residual taken from the normed stream: h = norm(x) + mixer(norm(x))",
                    "h = x + mixer(norm(x)): the stream itself is never normed", "decoder_layer",
                    made_by(residual_from_normed)),
            Mistake("the feed-forward reads x, not h", "feed_forward(rms_norm(h, layer.post_attention_layernorm))",
                    "decoder_layer", made_by(feed_forward_reads_x)),
            Mistake("the two norms swapped", "input_layernorm before the mixer, post_attention_layernorm before the "
                    "feed-forward", "decoder_layer", made_by(norms_swapped)),
        )),
        Exercise(13, "Writing the KV cache", ("store",), 10, "The decoder layer, the KV cache and the forward pass",
                 lambda lab: [*recorded_cases("store", with_cache(0))], (
            Mistake("written at slot 0, not start_pos: each chunk overwrites the first slots",
                    "slots start_pos .. start_pos + T - 1", "store", made_by(store_at(lambda s: 0))),
            Mistake("written one slot late (start_pos + 1)", "the chunk's first token goes to slot start_pos", "store",
                    made_by(store_at(lambda s: s + 1))),
            Mistake("the whole cache returned, not its first L slots",
                          "return self.k[i][:, :, :L], self.v[i][:, :, :L]",
                    "store", made_by(store_then(lambda cache, i, k, v, s, L: (cache.k[i], cache.v[i])))),
            Mistake("only the chunk returned: the cached prefix is lost",
                    "return the first L slots of the cache: the prefix and the chunk", "store",
                    made_by(store_then(lambda cache, i, k, v, s, L: (k.transpose(1, 2), v.transpose(1, 2))))),
        )),
        Exercise(14, "The forward pass", ("forward_hidden", "lm_head"), 20,
                 "The decoder layer, the KV cache and the forward pass", lambda lab: [
            *recorded_cases("forward_hidden", real_tokens),
            Case(ON_DEVICE, "forward_hidden", recorded("forward_hidden", PREFIX), output=real_tokens, device="meta"),
            Case("logits (2, 5, V)", "lm_head", lm_head_case(5)),
            Case("untied lm_head", "lm_head", lm_head_case(3, tied=False, seed=1)),
            Case("bf16: float32 logits", "lm_head", lm_head_case(1, seed=2), BF16),
        ], (
            Mistake("RoPE's positions ignore the left padding",
                          "positions = start_pos + t - cache.pad[b], clamped at 0",
                    "forward_hidden", made_by(positions_as(lambda s, T, pad: s + torch.arange(T, device=pad.device)))),
            Mistake("RoPE's positions restart at 0 in each chunk (start_pos left out)",
                    "positions = start_pos + t - cache.pad[b], clamped at 0", "forward_hidden",
                    made_by(positions_as(lambda s, T, pad: (torch.arange(T, device=pad.device) - pad).clamp(min=0)))),
            Mistake("the final RMSNorm left out", "rms_norm(x, weights.norm, config.rms_norm_eps) after the last layer",
                    "forward_hidden", made_by(without_final_norm)),
            Mistake("every layer reads the embeddings, not the previous layer's output",
                    "x = decoder_layer(x, ...): each layer's output is the next one's input", "forward_hidden",
                    made_by(layers_read_embeddings)),
            Mistake("the embedding matrix used as lm_head where the config says untied",
                    "linear(hidden, weights.lm_head): its own matrix when config.tie_word_embeddings is False",
                    "lm_head",
                    ref_fn(lambda ref, hidden: ref.linear(hidden, ref.weights.embed_tokens).float())),
            Mistake("logits left in the model dtype", "return them .float(): sampling and comparisons want float32",
                    "lm_head", ref_fn(lambda ref, hidden: ref.lm_head(hidden).to(hidden.dtype))),
        )),
        Exercise(15, "The greedy loop with the cache", ("greedy",), 15, "A minimal greedy loop", lambda lab: [
            Case("2 prompts of 6, 8 new", "greedy", greedy_case(2, 6, 8, seed=0), output=tokens_and_cache_use),
            Case("a one-token prompt", "greedy", greedy_case(1, 1, 6, seed=1), output=tokens_and_cache_use),
            Case("it stops at a stop id", "greedy", greedy_case(1, 4, 10, seed=4, stop_row=0),
                 output=tokens_and_cache_use),
            Case("a stop id in one row of two", "greedy", greedy_case(2, 4, 10, seed=2, stop_row=0),
                 output=tokens_and_cache_use),
            Case("bf16", "greedy", greedy_case(2, 5, 6, seed=3), BF16, output=tokens_and_cache_use),
        ], (
            Mistake("the cache unused: every step runs the whole sequence again",
                    "after the prompt, feed only the new token: forward(next[:, None], cache, T + step)", "greedy",
                    made_by(greedy_with_forward(forward_ignoring_cache))),
            Mistake("the first position's logits, not the last", "logits[:, -1]: the prediction after the last token",
                    "greedy", made_by(greedy_with_forward(lambda forward: lambda *a, **k: forward(*a, **k)[:, :1]))),
            Mistake("decode steps one slot early (start_pos T + step - 1): each token overwrites the one before",
                    "the token generated at step s goes to slot T + s", "greedy",
                    made_by(greedy_with_forward(forward_one_slot_early))),
            Mistake("the stop ids ignored", "stop once every row has produced one of config.stop_ids", "greedy",
                    made_by(greedy_ignoring_stops)),
            Mistake("stops as soon as any row has produced a stop id", "stop once every row has (done.all())",
                    "greedy", made_by(greedy_stopping_at_any_row)),
        )),
        Exercise(PAYOFF, "Your model talks", (), 5, "Part 5 · Running it"),
    ]


EXERCISES = ladder()
FUNCTIONS = {name: e.number for e in EXERCISES for name in e.functions}


# ---------------------------------------------------------------- results

@dataclass
class Result:
    number: int
    function: str
    status: str                     # right, wrong, error, not written, not checked
    headline: str                   # after "exercise N · function: "
    lines: list = field(default_factory=list)  # printed under it
    mistake: str = None             # the known mistake it matches

    @property
    def passed(self):
        return self.status == "right"

    def summary(self):
        if self.status == "wrong":
            return f"mistake: {self.mistake}" if self.mistake else "wrong (not a known mistake)"
        return {"right": "passed", "not written": "not written yet", "not checked": "NOT CHECKED",
                "error": "error " + self.headline.removeprefix("ERROR ")[:70]}[self.status]

    def __str__(self):
        return "\n".join([f"exercise {self.number} · {self.function}: {self.headline}",
                          *(f"    {line}" for line in self.lines)])


def unwritten(error, fn):
    """Whether `error` is the NotImplementedError of fn's own empty body (not of something it called)."""
    tb = error.__traceback__
    while tb.tb_next:
        tb = tb.tb_next
    return isinstance(error, NotImplementedError) and tb.tb_frame.f_code is getattr(fn, "__code__", None)


def your_line(error, namespace):
    """' (your rms_norm, line 3: `...`)': the deepest frame of the learner's own code, if any."""
    tb, found = error.__traceback__, None
    while tb:
        if tb.tb_frame.f_globals is namespace:
            found = tb
        tb = tb.tb_next
    if found is None:
        return ""
    code = found.tb_frame.f_code
    text = linecache.getline(code.co_filename, found.tb_lineno).strip()
    return f" (your {code.co_name}, line {found.tb_lineno} of its cell" + (f": `{text}`)" if text else ")")


def inputs(fn, args):
    """'x: a float32 tensor of shape (2, 5, 48), eps: 1e-06': what a case passes, by parameter name."""
    names = list(inspect.signature(fn).parameters)
    show = lambda v: describe(v) if isinstance(v, torch.Tensor) or v is None else (
        type(v).__name__ if dataclasses.is_dataclass(v) else repr(v))
    return ", ".join(f"{n}: {show(v)}" for n, v in zip(names, args))


def error_text(error):
    message = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {message[:160]}"


# ---------------------------------------------------------------- the lab: a learner's namespace and its checks

READ = {}  # (notebook, its modification time) -> its Part 2's namespace, names, the toy model and recorded cases


class Lab:
    """The learner's namespace (the exercise notebook's globals) with the notebook's Part 2 run in it, and the
    checks. A function the learner marks @exercise stands in for the notebook's wherever its name is looked
    up (a layer's mixer and feed_forward, the cache's store included) once its body is written; while the
    body is empty, the notebook's own answers."""

    def __init__(self, namespace, notebook=NOTEBOOK):
        self.g, self.notebook = namespace, Path(notebook)
        self._stamp, self.payoff_result = None, None
        g = notebook_part2(self.notebook, namespace)
        self.fallback = {name: g[name] for name in FUNCTIONS if name not in METHODS}
        self.fallback.update({name: getattr(g[cls], name) for name, cls in METHODS.items()})

        class KVCache(g["KVCache"]):
            def store(self, *args):  # the learner's store, once written
                return g["store"](self, *args)

        class LayerWeights(g["LayerWeights"]):  # a layer's parts: the learner's, once written
            mixer = staticmethod(lambda *args: g["self_attention"](*args))
            feed_forward = staticmethod(lambda *args: g["mlp"](*args))

        g.update(KVCache=KVCache, LayerWeights=LayerWeights, store=self.fallback["store"])
        g["config"] = toy_config(Names(g))
        g["weights"] = toy_weights(g["config"], LayerWeights, g["Weights"])

    @property
    def ref(self):
        """The notebook's own Part 2 (and Part 7's mistakes), read again whenever the notebook changes (shared
        by the labs of one process, with the cases recorded on it)."""
        stamp = self.notebook.stat().st_mtime_ns if self.notebook.is_file() else None
        if stamp is None or stamp != self._stamp:
            key = (str(self.notebook), stamp)
            if key not in READ:
                ns = notebook_part2(self.notebook)
                names = [k for k in ns if not k.startswith("__")]
                ns["config"] = toy_config(Names(ns))
                part7_functions(ns, self.notebook)

                class ToyLayer(ns["LayerWeights"]):  # its parts looked up when called, so they can be watched
                    mixer = staticmethod(lambda *args: ns["self_attention"](*args))
                    feed_forward = staticmethod(lambda *args: ns["mlp"](*args))
                ns["ToyLayer"] = ToyLayer
                READ.clear()
                READ[key] = Names(ns), names, {}
            self._ref, self.engine_names, self._memo = READ[key]
            self._stamp = stamp
        return self._ref

    def reference(self, name):
        """The notebook's own function `name` (a method, for the cache's store)."""
        ref = self.ref
        return getattr(ref[METHODS[name]], name) if name in METHODS else ref[name]

    # ------------------------------------------------------------ names, replaced for a while

    @contextmanager
    def swapped(self, everywhere=False, **names):
        """Set names in the notebook's namespace (everywhere: in the learner's too) for a while."""
        spaces, missing = [self.ref.ns, self.g] if everywhere else [self.ref.ns], object()
        saved = [(ns, {k: ns.get(k, missing) for k in names}) for ns in spaces]
        for ns in spaces:
            ns.update(names)
        try:
            yield
        finally:
            for ns, old in saved:
                for k, v in old.items():
                    ns.pop(k, None) if v is missing else ns.__setitem__(k, v)

    def call_with(self, fn, args, **names):
        """fn(*args) with some of the notebook's names replaced, as its swapped() does."""
        with self.swapped(**names):
            return fn(*args)

    @contextmanager
    def isolated(self, bindings):
        """The learner's namespace with every name of Part 2 the notebook's own, but for bindings."""
        names, missing = {**{k: self.ref[k] for k in self.engine_names}, **bindings}, object()
        saved = {k: self.g.get(k, missing) for k in [*names, "config", "weights"]}
        self.g.update(names)
        try:
            yield
        finally:
            for k, v in saved.items():
                self.g.pop(k, None) if v is missing else self.g.__setitem__(k, v)

    # ------------------------------------------------------------ the toy model, and cases recorded on it

    def toy(self, dtype, **changes):
        ref, key = self.ref, ("toy", dtype, tuple(sorted(changes.items())))  # self.ref: reads the notebook
        if key not in self._memo:
            cfg = toy_config(ref, **changes)
            self._memo[key] = cfg, toy_weights(cfg, ref.ToyLayer, ref.Weights, dtype)
        return self._memo[key]

    def record(self, target, scenario, dtype, layer=1):
        """The arguments `target` gets for layer `layer` in the scenario's last chunk (a fresh copy each time),
        and the names they run under."""
        key, _ = ("record", target, scenario, dtype, layer), self.ref
        if key not in self._memo:
            self._memo[key] = self._record(target, scenario, dtype, layer)
        args, names = self._memo[key]
        return fresh(args), names

    def _record(self, target, scenario, dtype, layer):
        ref, (pad, prefix, chunk) = self.ref, SCENARIOS[scenario]
        cfg, weights = self.toy(dtype)
        names = dict(config=cfg, weights=weights)
        ids = torch.randint(0, cfg.vocab_size, (2, prefix + chunk), generator=torch.Generator().manual_seed(7))
        captured = []

        def watch(real, layer_of):  # real, but the call for `layer` is kept and ends the forward pass
            def watching(*args):
                if layer_of(args) == layer:
                    captured.append(fresh(args))
                    raise Recorded
                return real(*args)
            return watching

        with self.swapped(dtype=dtype, **names):
            cache = ref.make_cache(2, prefix + chunk + 2)
            cache.set_padding(list(pad))
            if prefix:
                ref.forward_hidden(ids[:, :prefix], cache, 0)
            if target == "forward_hidden":
                return (ids[:, prefix:], fresh(cache), prefix), names
            swaps = {}
            if target in METHODS:  # watched on this cache; kept with the cache as the first argument
                watching = watch(getattr(type(cache), target), lambda args: args[1])
                setattr(cache, target, lambda *args: watching(cache, *args))
            else:
                calls = iter(range(1000))
                swaps[target] = watch(ref[target], lambda args: next(calls))
            try:
                with self.swapped(**swaps):
                    ref.forward_hidden(ids[:, prefix:], cache, prefix)
            except Recorded:
                return captured[-1], names
        raise RuntimeError(f"the notebook's forward_hidden never called {target} for layer {layer}")

    def run(self, fn, case, call, dtype=None):
        """What case compares of fn(*call.args), run under the case's names (a fresh copy of the arguments)."""
        args, steps = fresh(call.args), []
        names = dict(dtype=dtype or case.dtype, device=torch.device(case.device), **call.names)
        if case.output is tokens_and_cache_use:  # watch the chunk each forward pass gets
            inner = self.ref.forward_hidden
            names["forward_hidden"] = lambda ids, *rest: steps.append(ids.shape[1]) or inner(ids, *rest)
        with self.swapped(everywhere=True, **names):
            result = fn(*args)
        if isinstance(result, tuple) and len(result) == len(RESULT_NAMES.get(case.function, ())):
            result = dict(zip(RESULT_NAMES[case.function], result))
        return case.output(result, args, steps) if case.output else result

    # ------------------------------------------------------------ the learner's functions

    def exercise(self, fn):
        """@exercise: the decorated function answers for the notebook's of that name, once its body is
        written; while it is empty (raises NotImplementedError), the notebook's own answers."""
        name = fn.__name__
        if name not in FUNCTIONS:
            raise NameError(f"@exercise marks the ladder's functions ({', '.join(FUNCTIONS)}), not {name!r}: "
                            "keep the name the cell gives")
        fallback = self.fallback[name]

        @functools.wraps(fn)
        def answer(*args, **kwargs):
            if answer.written:
                try:
                    return fn(*args, **kwargs)
                except NotImplementedError as e:
                    if not unwritten(e, fn):
                        raise
                    answer.written = False
            return fallback(*args, **kwargs)
        answer.written, answer.learner = True, fn
        return answer

    def learner_function(self, name):
        """The learner's function `name` (None until its cell has run)."""
        fn = self.g.get(name)
        return None if fn is None or fn is self.fallback[name] else getattr(fn, "learner", fn)

    # ------------------------------------------------------------ checks

    def result(self, number, **options):
        """The Result of exercise `number` (a number or a function's name)."""
        number = FUNCTIONS.get(number, number)
        if number == PAYOFF:
            return self.payoff(**options)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the cases are tiny: more threads only wait for each other
        try:
            return self._result(number)
        finally:
            torch.set_num_threads(threads)

    def _result(self, number):
        ex = next((e for e in EXERCISES if e.number == number), None)
        if ex is None:
            raise ValueError(f"there is no exercise {number!r}: 1 to {PAYOFF}, or a function's name")
        label = ", ".join(ex.functions)
        try:
            missing = [n for n in ex.functions if n not in (self.ref[METHODS[n]].__dict__ if n in METHODS
                                                            else self.ref.ns)]
            if missing:
                raise NotChecked(f"{self.notebook.name}'s Part 2 defines no {missing[0]} any more: update the "
                                 "ladder (exercises/checks.py), then python3 scripts/make_exercises.py")
            learner = {n: self.learner_function(n) for n in ex.functions}
            if all(fn is None for fn in learner.values()):
                return Result(number, label, "not written", self.not_written(ex.functions))
            return self._check(ex, learner)
        except NotChecked as e:
            return Result(number, label, "not checked", f"NOT CHECKED: {e}")

    @staticmethod
    def not_written(names):
        return (f"not written yet (write the body of {' and '.join(names)} in the cell above, run that cell, "
                "then this one)")

    def _check(self, ex, learner):
        cases, right, label = ex.cases(self), [], ", ".join(ex.functions)
        bindings = {n: fn if fn is not None else self.reference(n) for n, fn in learner.items()}
        with self.isolated(bindings):
            for name, fn in learner.items():
                result = None if fn is None else self._check_function(
                    ex, name, fn, [c for c in cases if c.function == name])
                if result is None:  # not written: the notebook's own stands in for it
                    self.g[name] = self.reference(name)
                elif not result.passed:
                    return result
                else:
                    right.append(name)
        if unwritten_names := [n for n in ex.functions if n not in right]:
            done = f"; {' and '.join(right)} is right" if right else ""
            return Result(ex.number, label, "not written", self.not_written(unwritten_names)[:-1] + done + ")")
        return Result(ex.number, label, "right", f"right on all {len(cases)} cases: "
                      + " · ".join(c.name for c in cases))

    def _check_function(self, ex, name, fn, cases):
        """The learner's fn on every case against the notebook's; None when its body is empty."""
        right, rows = self.reference(name), []
        for case in cases:
            try:
                with self.swapped(dtype=case.dtype):
                    call = case.build(self, case.dtype)
                if case.device != "cpu":
                    call = transform(call, lambda t: t.to(case.device))
                expected = self.run(right, case, call)
                wide = self.run(right, case, upcast(call), F32) if case.dtype == BF16 else expected
            except Exception as e:  # noqa: BLE001 - the notebook changed under the ladder
                raise NotChecked(f'the notebook\'s own {name} fails on "{case.name}" ({error_text(e)}): update the '
                                 "ladder's cases (exercises/checks.py)") from None
            try:
                mine = self.run(fn, case, call)
            except Exception as e:  # noqa: BLE001 - any error of the learner's code is reported, never raised
                if unwritten(e, fn):
                    return None
                return Result(ex.number, name, "error", f'ERROR on "{case.name}": {error_text(e)}'
                              f"{your_line(e, self.g)}", [DEVICE_HINT] if case.device != "cpu" else
                              [f"Its inputs: {inputs(right, call.args)}."])
            tolerances = [rounding(e) + 4 * closeness(e, w) for (_, e), (_, w) in zip(leaves(expected), leaves(wide))]
            rows.append((case, call, mine, expected, tolerances))
        failures = [(case, why) for case, call, mine, expected, tol in rows if (why := verdict(mine, expected, tol))]
        if not failures:
            return Result(ex.number, name, "right", "right")
        case, why = failures[0]
        more = f" (and {len(failures) - 1} more of the {len(rows)} cases)" if len(failures) > 1 else ""
        mistake = self.identify(ex, name, rows)
        known = [m for m in ex.mistakes if m.function == name]
        lines = ([f"This is a known mistake: {mistake.name}.", f"Fix: {mistake.fix}."] if mistake else
                 [DEVICE_HINT] if case.device != "cpu" else
                 [f"Not one of the {len(known)} known mistakes of {name}: compare each step with the formula "
                  "and the shapes above."])
        return Result(ex.number, name, "wrong", f'WRONG on "{case.name}": {why}{more}', lines,
                      mistake.name if mistake else None)

    def identify(self, ex, name, rows):
        """The known mistake whose function gives the learner's results on every case (the closest), or None."""
        best = None
        for mistake in (m for m in ex.mistakes if m.function == name):
            try:
                variants = mistake.make(self)
            except (AttributeError, KeyError):  # a Part 7 function the notebook no longer has
                continue
            for variant in variants if isinstance(variants, list) else [variants]:
                total = 0.0
                for case, call, mine, expected, tolerances in rows:
                    try:
                        theirs = self.run(variant, case, call)
                    except Exception:  # noqa: BLE001 - a mistake that cannot run this case: not this one
                        break
                    distance = likeness(mine, theirs, expected, tolerances)
                    if distance is None:
                        break
                    total += distance
                else:
                    best = (total, mistake) if best is None or total < best[0] else best
        return best and best[1]

    def check(self, number, **options):
        """Print exercise `number`'s check: one line when right; the failed case, and the known mistake, when
        wrong. (Under nbgrader's autograder, a check that did not pass raises.)"""
        result = self.result(number, **options)
        if FUNCTIONS.get(number, number) == PAYOFF:
            self.payoff_result = result
        print(result)
        if os.environ.get("NBGRADER_EXECUTION") and not result.passed:
            raise AssertionError(str(result))

    def grade(self):
        """Every check at once: a table of exercise and result (passed, or the mistake it makes)."""
        rows = [self.result(n) for n in range(1, PAYOFF)]
        rows.append(self.payoff_result or Result(PAYOFF, "your model talks", "not checked",
                                                 "not run yet: run its cell (it loads the real model)"))
        titles = {e.number: e.title for e in EXERCISES}
        width = max(len(f"{titles[r.number]} ({r.function})") for r in rows) + 5
        print(f"{'exercise':{width}}result")
        for r in rows:
            name = f"{r.number:2d} {titles[r.number]}" + (f" ({r.function})" if r.number != PAYOFF else "")
            print(f"{name:{width}}{r.summary() if r is not rows[-1] or self.payoff_result else 'not run yet'}")
        print(f"passed {sum(r.passed for r in rows)} of {len(rows)}")

    # ------------------------------------------------------------ the payoff: a real checkpoint on them

    def payoff(self, prompt=PROMPT, max_new_tokens=24):
        label, results = "your model talks", [self.result(n) for n in range(1, PAYOFF)]
        if all(r.status in ("not written", "not checked") for r in results):
            return Result(PAYOFF, label, "not written", PAYOFF_NOT_WRITTEN)
        try:
            nb = self.load_model()
        except NotChecked as e:
            first, *rest = str(e).splitlines()
            return Result(PAYOFF, label, "not checked", f"NOT CHECKED: {first}", rest)
        g = self.g
        self.use_model(nb)
        ids = nb.encode(nb.render_chat([{"role": "user", "content": prompt}], enable_thinking=False))
        theirs = nb.greedy([ids], max_new_tokens)[0].tolist()
        wrong = [f"exercise {r.number} ({r.function}): {r.summary()}" for r in results
                 if r.status in ("wrong", "error")]
        hint = (["your functions that fail their checks: " + "; ".join(wrong)] if wrong else
                ["every check of yours passes, so roundings add up over the layers: compute the norms, SiLU and "
                 "softmax in float32, as the exercises say (QWEN3_DTYPE=float32 runs it all in float32)"])
        try:
            tokens = g["greedy"]([ids], max_new_tokens)
            if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
                raise TypeError(f"greedy returned {describe(tokens)}, not a (1, n) tensor of token ids")
            mine = tokens[0].tolist()
        except Exception as e:  # noqa: BLE001 - the learner's code: reported, never raised
            return Result(PAYOFF, label, "error", f"ERROR: your model raised {error_text(e)}{your_line(e, g)}",
                          hint[:1] if wrong else [])
        yours = [n for n in FUNCTIONS if self.learner_function(n) and getattr(g[n], "written", True)]
        model = f"{Path(nb.MODEL_DIR).name} ({str(nb.dtype)[6:]}, {nb.device})"
        said = [f"you:   {prompt}", f"yours: {nb.decode(mine)!r}"]
        if mine == theirs:
            return Result(PAYOFF, label, "right", f"right: {model} ran on {len(yours)} functions of yours (the "
                          f"notebook's for the rest): its {len(mine)} greedy tokens are the notebook's, token for "
                          "token", said)
        k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        said.append(f"the notebook's: {nb.decode(theirs)!r}")
        if k < min(len(mine), len(theirs)):
            logits = nb.forward([ids + theirs[:k]])[0, -1]
            margin = (logits[theirs[k]] - logits[mine[k]]).item()
            if margin <= (0.5 if nb.dtype == BF16 else 1e-3 * (1 + logits.abs().max().item())):
                return Result(PAYOFF, label, "right", f"right: {model} ran on {len(yours)} functions of yours; its "
                              f"tokens are the notebook's up to token {k}, where the notebook's two best differ by "
                              f"{margin:.3f} (a near tie: rounding, not a mistake)", said)
        return Result(PAYOFF, label, "wrong", f"WRONG: {model} on your functions leaves the notebook's greedy "
                      f"tokens at token {k} of {len(theirs)}", said + hint)

    def load_model(self):
        """The main notebook, run on the checkpoint it would load (QWEN3_MODEL, QWEN3_MODEL_DIR, README's routes)."""
        name = os.environ.get("QWEN3_MODEL", "Qwen3-0.6B")
        model_dir = Path(os.environ.get("QWEN3_MODEL_DIR") or ROOT / "models" / name)
        if not model_dir.is_absolute() and not model_dir.exists() and (ROOT / model_dir).exists():
            model_dir = ROOT / model_dir  # a path as README writes it, from the repository's root
        said = io.StringIO()  # the notebook's own report of what it loaded: its first line is enough here
        try:
            with contextlib.redirect_stdout(said):
                nb = load_engine(model_dir, device=os.environ.get("QWEN3_DEVICE", "auto"),
                                 dtype=os.environ.get("QWEN3_DTYPE", "auto"), QWEN3_COMPILE="off",
                                 QWEN3_YARN_FACTOR="")
            print(*[line for line in said.getvalue().splitlines() if line.startswith("model ")][:1], sep="\n")
        except FileNotFoundError as e:  # the notebook's message lists every route to a model
            raise NotChecked(f"{e}\n(run those commands in {ROOT}, then this cell again)") from None
        except MemoryError as e:
            raise NotChecked(str(e)) from None
        except Exception as e:  # noqa: BLE001 - whatever stops the notebook itself is reported as such
            raise NotChecked(f"the notebook could not load {model_dir}: {error_text(e)}") from None
        layers = nb.weights.layers
        if nb.config.layer_types or any(type(layer).mixer is not nb.self_attention
                                        or type(layer).feed_forward is not nb.mlp for layer in layers):
            raise NotChecked(f"{model_dir} is not a dense Qwen3 (its layers mix or feed forward otherwise), and "
                             "the ladder builds dense Qwen3: QWEN3_MODEL=Qwen3-0.6B (or SmolLM2-135M-Instruct, or "
                             "random weights, as README says) makes it checkable")
        frequencies, scale = nb.config.rope
        if scale != 1.0 or not torch.allclose(frequencies.float().cpu(), self.ref.rope_frequencies(
                nb.config.head_dim, nb.config.rope_theta)):
            raise NotChecked(f"{model_dir}'s config stretches RoPE (YaRN), which the ladder does not build: "
                             "a checkpoint without rope_scaling makes it checkable")
        return nb

    def use_model(self, nb):
        """The loaded model as the learner's config and weights (its own classes: the learner's parts)."""
        g, names = self.g, lambda cls: [f.name for f in dataclasses.fields(cls)]
        layers = [g["LayerWeights"](**{k: getattr(layer, k) for k in names(g["LayerWeights"])})
                  for layer in nb.weights.layers]
        g.update(config=g["Config"](**{k: getattr(nb.config, k) for k in names(g["Config"])}),
                 weights=g["Weights"](embed_tokens=nb.weights.embed_tokens, layers=layers, norm=nb.weights.norm,
                                      lm_head=nb.weights.lm_head), dtype=nb.dtype, device=nb.device)


# ---------------------------------------------------------------- comparing a result with the notebook's

RESULT_NAMES = {"rope_cos_sin": ("cos", "sin"), "store": ("keys", "values")}


def closeness(theirs, wide):
    """How far the notebook's own result is from itself computed in float32 (0 when not a float tensor)."""
    if not isinstance(theirs, torch.Tensor) or not theirs.is_floating_point() or theirs.shape != wide.shape \
            or theirs.is_meta:
        return 0.0
    return gap(theirs.double(), wide.double())


def structure(value):
    n = len(leaves(value))
    return describe(value) if n == 1 else f"{n} values"


def verdict(mine, theirs, tolerances):
    """None when mine is right; else what is wrong, where, by how much."""
    ml, tl = leaves(mine), leaves(theirs)
    if len(ml) != len(tl):
        return f"returns {structure(mine)}, the notebook's {structure(theirs)}"
    for (label, m), (_, t), tol in zip(ml, tl, tolerances):
        what = "" if len(tl) == 1 else f"{label}: "
        if why := mismatch(m, t):
            return what + why
        if (d := gap(m, t)) > tol:
            if not isinstance(t, torch.Tensor):
                return f"{what}yours {m}, the notebook's {t}"
            if not t.is_floating_point():
                return f"{what}{int(d)} of {t.numel()} entries differ{where(m, t)}"
            return f"{what}largest difference {d:.2g} (allowed {tol:.1g}){where(m, t)}"
    return None


def likeness(mine, theirs, expected, tolerances):
    """How close the learner's result is to a mistake's (in allowances), or None when they differ: the same
    structure, shapes and dtypes, and values within the case's tolerance or 1% of the learner's error."""
    ml, tl, el = leaves(mine), leaves(theirs), leaves(expected)
    if len(ml) != len(tl):
        return None
    total = 0.0
    for (_, m), (_, t), (_, e), tol in zip(ml, tl, el, tolerances):
        if mismatch(m, t):
            return None
        error = gap(m, e) if isinstance(e, torch.Tensor) and isinstance(m, torch.Tensor) and m.shape == e.shape \
            else math.inf
        allowed = max(tol, rounding(m), 0.01 * error if math.isfinite(error) else 0.0)
        if (d := gap(m, t)) > allowed:
            return None
        total += d / allowed if allowed else 0.0
    return total


def loaded_line(name):
    return (f"Part 2 of {name} is loaded: {len(FUNCTIONS)} functions to write in {PAYOFF - 1} exercises, each checked "
            f"against the notebook's own; config and weights are a toy model until exercise {PAYOFF}.")


def start(namespace, notebook=NOTEBOOK):
    """Run the notebook's Part 2 in the exercise notebook's namespace; -> (exercise, check, grade)."""
    try:
        lab = Lab(namespace, notebook)
    except NotChecked as e:
        why = f"NOT CHECKED: {e}"
        print(why)
        return (lambda fn: fn), (lambda *args, **options: print(why)), (lambda: print(why))
    print(loaded_line(Path(notebook).name))
    return lab.exercise, lab.check, lab.grade

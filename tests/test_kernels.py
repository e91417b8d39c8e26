"""Speed comes from torch, chosen by one rule at load (issue 45): each kind of weight brings its own product,
the dtype follows the device and the CPU's instructions, and after Part 6 torch's fused attention attends.
Nothing is timed at load, so every load makes the same choices and computes the same numbers."""

import time

import pytest
import torch

from conftest import BF16_PACKING, TEST_DEVICE, random_ids
from notebook_engine import engine_cells, load_engine


@pytest.fixture(scope="module")
def loaded(checkpoints):
    cache = {}

    def get(dtype, **env):
        key = (dtype, tuple(sorted(env.items())))
        if key not in cache:
            cache[key] = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype=dtype, **env)
        return cache[key]
    return get


def test_no_kernel_is_chosen_by_timing_at_load(checkpoints, monkeypatch):
    """A load reads the clock for its own report only (a tuner times every candidate, again and again), and
    the engine keeps no table of kernel choices."""
    source = "\n".join(engine_cells())
    assert "KERNELS" not in source and "timeit" not in source and "timed_rounds" not in source
    reads, real = [], time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: reads.append(1) or real())
    q = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="bfloat16", QWEN3_COMPILE="off")
    assert len(reads) <= 2, len(reads)  # "loaded ... in 0.1 s"
    monkeypatch.undo()
    again = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="bfloat16", QWEN3_COMPILE="off")
    ids = random_ids(2, 30, seed=40)
    assert torch.equal(q.forward(ids), again.forward(ids))  # bf16 too: no measurement between them


def test_each_kind_of_weight_is_chosen_by_the_rule(loaded):
    kinds = {q: type(loaded(*args, **env).weights.layers[0].qkv_proj).__name__ for q, args, env in [
        ("float32", ("float32",), {}), ("bfloat16", ("bfloat16",), {}),
        ("int8", ("float32",), {"QWEN3_QUANT": "int8"}), ("int4", ("float32",), {"QWEN3_QUANT": "int4"}),
        ("compiled bf16", ("bfloat16",), {"QWEN3_COMPILE": "on"})]}
    assert kinds["float32"] == "Tensor" and kinds["int8"] == "Int8Weight" and kinds["int4"] == "Int4Weight"
    assert kinds["bfloat16"] == ("PackedWeight" if BF16_PACKING else "Tensor")  # where oneDNN packs bf16
    assert kinds["compiled bf16"] == "Tensor"  # the compiler freezes and packs the weights itself
    import re
    source = "\n".join(engine_cells())
    assert source.count("def linear(") == 1 and not re.search(r"^linear = ", source, re.M)  # Part 2's, never rebound
    table = loaded("bfloat16").weights.embed_tokens
    assert not getattr(table, "w", table).is_mkldnn  # the lookup table stays plain (a TiedTable holds it plain)
    q4 = loaded("float32", QWEN3_QUANT="int4")
    fused = q4.has_kernel("aten::_weight_int4pack_mm_for_cpu", q4.device) if TEST_DEVICE == "cpu" else None
    assert q4.weights.layers[0].qkv_proj.layout == q4.int4_layout() == ("cpu" if fused else q4.int4_layout())


def test_packed_weights_compute_the_plain_products(loaded, reference):
    if not BF16_PACKING:
        pytest.skip("oneDNN packs no bf16 weights on this CPU (AVX-512 or AVX-NE-CONVERT needed)")
    q = loaded("bfloat16")
    layer = q.weights.layers[0]
    plain = layer.qkv_proj.dequantize(torch.bfloat16)
    x = torch.randn(5, q.config.hidden_size).to(torch.bfloat16)
    torch.testing.assert_close(q.linear(x, layer.qkv_proj).float(), (x @ plain.T).float(), atol=2e-2, rtol=2e-2)
    assert torch.equal(layer.k_proj, plain[q.config.num_attention_heads * q.config.head_dim:][:layer.k_proj.shape[0]])


def matmuls_with_onednn(seen):
    """A mode recording, at each `@`, whether oneDNN was switched on (False: aten's own kernel runs)."""
    from torch.overrides import TorchFunctionMode

    class OneDnnAtEachProduct(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("__matmul__", "matmul"):
                seen.append(torch.backends.mkldnn.enabled)
            return func(*args, **(kwargs or {}))
    return OneDnnAtEachProduct()


def test_the_tied_table_is_chosen_by_the_rule_with_each_answer_forced(loaded):
    """On any CPU, packs_weights() forced either way. Yes: a tied bf16 table becomes one TiedTable (still both
    embed_tokens and lm_head, the same plain tensor inside), laid out once however often the cell runs; it
    multiplies one row with oneDNN switched off (aten's own kernel), more rows with it on, and switches it
    back on; its products are the plain ones. No: the table stays the plain tensor, and so does an untied one."""
    q = loaded("bfloat16")
    plain = (torch.randn(64, q.config.hidden_size) * 0.1).bfloat16()
    tied = lambda: q.Weights(embed_tokens=plain, layers=[], norm=None, lm_head=plain)
    with q.swapped(packs_weights=lambda: False):
        w = q.lay_out_for_this_device(tied())
        assert w.lm_head is w.embed_tokens is plain
        untied = q.lay_out_for_this_device(q.Weights(embed_tokens=plain, layers=[], norm=None, lm_head=plain.clone()))
        assert isinstance(untied.lm_head, torch.Tensor) and untied.embed_tokens is plain
    with q.swapped(packs_weights=lambda: True):
        w = q.lay_out_for_this_device(tied())
        assert w.lm_head is w.embed_tokens and type(w.lm_head).__name__ == "TiedTable" and w.lm_head.w is plain
        assert q.lay_out_for_this_device(w).lm_head is w.lm_head
    ids = torch.tensor([[3, 0, 63]])
    assert torch.equal(w.embed_tokens[ids], plain[ids])  # the lookup: the table's rows
    seen = []
    for rows in (1, 2, 5):
        x = torch.randn(rows, q.config.hidden_size).bfloat16()
        with matmuls_with_onednn(seen):
            out = q.linear(x, w.lm_head)
        exact = x.float() @ plain.float().T
        torch.testing.assert_close(out.float(), exact, atol=1e-2 * exact.abs().max().item(), rtol=1e-2)
    assert seen == [False, True, True] and torch.backends.mkldnn.enabled  # and switched back on


def test_the_tied_table_where_onednn_packs_bf16(loaded, reference):
    """Where oneDNN packs bf16, the loaded tied table is a TiedTable (looked up, so plain): a decode step's
    lm_head runs aten's own kernel, which reads it at the memory's speed where oneDNN's reads it at half
    (docs/performance.md), and that step's logits stay within transformers' own bf16 rounding."""
    if not BF16_PACKING:
        pytest.skip("oneDNN packs no bf16 weights on this CPU (AVX-512 or AVX-NE-CONVERT needed)")
    q = loaded("bfloat16")
    w = q.weights
    assert w.lm_head is w.embed_tokens and type(w.lm_head).__name__ == "TiedTable"
    assert w.lm_head.w.dtype == torch.bfloat16 and not w.lm_head.w.is_mkldnn
    eager, sdpa = reference(dtype=torch.bfloat16), reference(dtype=torch.bfloat16, attn="sdpa")
    ids = random_ids(1, 40, seed=42)
    theirs = eager(ids).logits.float()
    budget = (sdpa(ids).logits.float() - theirs).abs().max()
    cache = q.make_cache(1, 40)
    q.forward(ids[:, :39], cache)
    seen = []
    with matmuls_with_onednn(seen):
        step = q.forward(ids[:, 39:], cache, start_pos=39)  # one row
    assert seen[-1] is False  # lm_head, the step's last product: aten's kernel
    assert (step[:, -1] - theirs[:, -1]).abs().max() <= budget


def test_auto_dtype_asks_the_device_and_the_cpu(loaded):
    """The rule for each answer a CPU or GPU gives: tests/test_cpu_kinds.py. Here: what this machine loaded."""
    q = loaded("auto")
    assert (q.dtype, q.weights_as) == q.pick_dtype("auto", q.device)[:2]
    assert (q.weights_as == "bf16") == (type(q.weights.layers[0].qkv_proj).__name__ == "Bf16Weight")


@pytest.mark.parametrize("machine, system, says, expected", [
    ("aarch64", "linux", "Features : fp asimd bf16 i8mm", True), ("aarch64", "linux", "Features : fp asimd", False),
    ("arm64", "darwin", "1", True), ("arm64", "darwin", "0", False)])
def test_the_cpu_question_is_asked_on_arm_and_macos_too(loaded, monkeypatch, machine, system, says, expected):
    import pathlib
    import platform
    import subprocess
    import sys
    q = loaded("float32")
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(sys, "platform", system)
    monkeypatch.setattr(pathlib.Path, "read_text", lambda self, **kw: says)
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: subprocess.CompletedProcess(a, 0, stdout=says + "\n"))
    assert q.cpu_multiplies_bf16() == expected


def test_removed_settings_and_calibrate_say_what_replaced_them(checkpoints, capsys):
    q = load_engine(checkpoints("tiny"), device=TEST_DEVICE, QWEN3_MATMUL="widen", QWEN3_KV_DTYPE="float32")
    out = capsys.readouterr().out
    assert "QWEN3_MATMUL was removed" in out and "QWEN3_KV_DTYPE was removed" in out
    assert "not a setting of this notebook" not in out  # named as removed, not as a typo
    q.calibrate()
    assert "calibrate() was removed" in capsys.readouterr().out


# torch's fused attention (Part 6): the same numbers as Part 2's, without the scores


MASKS = {"causal": ([0, 0], 0, 40), "left padding": ([0, 7], 0, 40), "a chunk after a cached prefix": ([0, 0], 32, 8)}


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_attention_equals_part_2s_on_the_notebooks_masks(loaded, mask, dtype):
    q = loaded(dtype)
    pad, start, T = MASKS[mask]
    H, KV, hd = q.config.num_attention_heads, q.config.num_key_value_heads, q.config.head_dim
    g = torch.Generator().manual_seed(3)
    qs, k, v = (torch.randn(2, *shape, generator=g).to(q.dtype).to(TEST_DEVICE)
                for shape in ((T, H, hd), (KV, start + T, hd), (KV, start + T, hd)))
    m = q.attention_mask(torch.tensor(pad, device=TEST_DEVICE), start, T, start + T)
    fused, written = q.fused_attention(qs, k, v, m).float(), q.written_out_attention(qs, k, v, m).float()
    assert q.attention is q.fused_attention  # the seam, as the whole engine leaves it
    torch.testing.assert_close(fused, written, atol=1e-5 if dtype == "float32" else 2e-2, rtol=1e-5 if dtype == "float32" else 2e-2)


class LargestOutput(torch.utils._python_dispatch.TorchDispatchMode):
    """The number of elements of the largest float tensor any operation returns inside it."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.largest = max(self.largest, t.numel())
        return out


def test_no_score_tensor_per_head_after_the_rebinding_and_trace_still_sees_them(loaded, reference):
    """After Part 6 a 300-token prompt makes no float tensor as large as its H x T x T scores (a chunk's boolean
    mask is not one), and its logits equal transformers'; trace() (the written-out form) makes them."""
    q, model = loaded("float32"), reference()
    H, T = q.config.num_attention_heads, 300
    ids = random_ids(1, T, seed=46)
    with LargestOutput() as seen:
        logits = q.forward(ids)
    assert seen.largest < H * T * T, (seen.largest, H * T * T)
    torch.testing.assert_close(logits, model(ids.to(model.device)).logits, atol=1e-4, rtol=0)
    with LargestOutput() as traced:
        record = q.trace(ids)
    assert traced.largest >= H * T * T and record.attention.shape[-1] == T


def test_running_the_fused_cells_again_keeps_part_2s_attention(checkpoints, reference):
    """A reader re-runs cells: defining fused_attention and rebinding the seam a second time must not take the
    seam's new value for Part 2's (fused_attention calling itself under trace)."""
    q = load_engine(checkpoints("tiny"), device=TEST_DEVICE, dtype="float32")
    part_2s = q.written_out_attention
    for cell in [c for c in engine_cells() if "def fused_attention(" in c or c.startswith("attention = ")]:
        exec(compile(cell, "rerun", "exec"), q._module.__dict__)
    assert q.written_out_attention is part_2s and q.attention is q.fused_attention
    ids = random_ids(1, 9, seed=5)
    traced = q.trace(ids)
    torch.testing.assert_close(traced.logits, reference()(ids.to(TEST_DEVICE)).logits, atol=1e-4, rtol=0)


def test_prefill_goes_in_chunks_and_decode_reads_the_filled_keys(loaded, monkeypatch):
    """A prompt is prefilled in PREFILL_CHUNK tokens, then the rest; a decode step attends to exactly the
    slots filled so far; the logits are those of running the whole sequence at once."""
    q = loaded("float32")
    seen, real = [], q.attention
    monkeypatch.setitem(q._module.__dict__, "attention", lambda qs, k, *a: seen.append(k.shape[2]) or real(qs, k, *a))
    chunks, real_forward = [], q.forward_hidden
    monkeypatch.setitem(q._module.__dict__, "forward_hidden", lambda ids, *a: chunks.append(ids.shape[1]) or real_forward(ids, *a))
    monkeypatch.setitem(q._module.__dict__, "PREFILL_CHUNK", 256)
    prompt = random_ids(1, 300, seed=43)[0].tolist()
    q.generate([prompt], 3)
    assert chunks == [256, 44, 1, 1]  # 300 = 256 + 44, then two decode steps
    layers = q.config.num_hidden_layers
    assert seen[-2 * layers:] == [301] * layers + [302] * layers  # decode at slots 300, 301
    monkeypatch.undo()
    cache = q.make_cache(1, 400)
    q.forward(torch.tensor([prompt]), cache)
    full = q.forward(torch.tensor([prompt + [5]]))
    torch.testing.assert_close(q.forward(torch.tensor([[5]]), cache, start_pos=300)[:, 0], full[:, -1], atol=1e-4, rtol=0)


def test_left_padded_long_prompts_equal_single_runs(loaded, reference):
    """A padded batch's long chunk: each row's logits equal the reference's with its padding masked, and its
    own single run's. Padding queries see only themselves (their output is never read)."""
    q, model = loaded("float32"), reference()
    long, short = random_ids(1, 300, seed=44)[0], random_ids(1, 170, seed=45)[0]
    ids = torch.stack([long, torch.cat([torch.zeros(130, dtype=long.dtype), short])])
    cache = q.make_cache(2, 300)
    cache.set_padding([0, 130])
    logits = q.forward(ids, cache)
    theirs = model(ids.to(model.device), attention_mask=(torch.arange(300) >= torch.tensor([[0], [130]])).long().to(model.device)).logits
    torch.testing.assert_close(logits[0], theirs[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1, 130:], theirs[1, 130:], atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1, 130:], q.forward(short[None])[0], atol=1e-4, rtol=0)
    assert torch.isfinite(logits).all()

"""The calibration decides on every candidate measured in every round, by medians of paired ratios:
one outlier round cannot disqualify a form or decide a choice. Made-up timings, no clocks."""

import json
import os
import platform
import re
import subprocess
import sys

import pytest
import torch

from conftest import BF16_PACKING, TEST_DEVICE
from notebook_engine import engine_cells, load_engine


@pytest.fixture(scope="module")
def q(engine):
    return engine("tiny", "bfloat16")


def rounds(*seconds):
    return [s * 1e-3 for s in seconds]


def test_one_slow_round_neither_disqualifies_nor_decides(q):
    native = rounds(6.4, 38.0, 6.5, 6.3, 6.4)  # one round hit by another process
    widen = rounds(13.0, 13.2, 12.9, 13.1, 13.0)
    assert q.fastest({"native": native, "widen": widen}, "native") == "native"
    slow_first = rounds(38.0, 6.4, 6.5, 6.3, 6.4)
    assert q.fastest({"native": slow_first, "widen": widen}, "native") == "native"
    widen_lucky_once = rounds(13.0, 3.0, 12.9, 13.1, 13.0)  # a fast fluke does not win either
    assert q.fastest({"native": rounds(6.4, 6.4, 6.5, 6.3, 6.4), "widen": widen_lucky_once}, "native") == "native"


def test_margin_holds_on_medians(q):
    native = rounds(10, 10, 10, 10, 10)
    assert q.fastest({"native": native, "widen": rounds(9.5, 9.5, 9.5, 9.5, 9.5)}, "native") == "native"  # 5%
    assert q.fastest({"native": native, "widen": rounds(8, 8, 30, 8, 8)}, "native") == "widen"  # 20%, one outlier
    drifting = {"native": rounds(10, 20, 40, 20, 10), "widen": rounds(8, 16, 32, 16, 8)}  # load comes and goes
    assert q.fastest(drifting, "native") == "widen"  # paired by round: 0.8 every time


def test_auto_packs_a_model_big_enough_to_time(checkpoints):
    """Packing is no measured choice (oneDNN's layout, the same products: 0-15% faster at 1 row on every CPU
    measured, never clearly slower): under auto a model the calibration times is packed, its packed forms
    chosen per number of rows; one too small to time keeps its plain weights."""
    if TEST_DEVICE != "cpu" or not torch.backends.mkldnn.is_available():
        pytest.skip("packing is a CPU form")
    q = load_engine(checkpoints("tiny"), device="cpu", dtype="bfloat16")
    assert q.KERNELS["weights"] == "plain" and not q.weights.layers[0].qkv_proj.is_mkldnn  # nothing timed
    q.calibrate(min_bytes=0)
    assert q.packing_possible() == BF16_PACKING  # oneDNN packs bf16 only with AVX-512 or AVX-NE-CONVERT
    if not BF16_PACKING:  # an AVX2 CPU: the plain forms are timed, the weights stay plain
        assert q.KERNELS["weights"] == "plain" and not q.weights.layers[0].qkv_proj.is_mkldnn
        assert set(q.KERNELS["plain"]) == set(q.TIMED_ROWS)
        return
    assert q.KERNELS["weights"] == "packed" and q.weights.layers[0].qkv_proj.is_mkldnn
    assert set(q.KERNELS["packed"]) == set(q.KERNELS["plain"]) == set(q.TIMED_ROWS)


def test_attention_choices(q):
    def times(decode, prefill):  # float32's seconds per round; the model dtype's are 10 ms every round
        ten = rounds(*[10] * 5)
        return {("decode", "model"): ten, ("decode", "float32"): rounds(*decode),
                ("prefill", "model"): ten, ("prefill", "float32"): rounds(*prefill)}
    same, slow_round = [10] * 5, [10, 10, 40, 10, 10]
    choose = q.attention_choices
    assert choose(times(same, [6, 6, 6, 30, 6])) == ("model", "float32")  # widen long chunks only
    assert choose(times([10.5, 11.2, 9.4, 10.8, 11.4], [6] * 5)) == ("model", "float32")
    assert choose(times([3, 3, 30, 3, 3], same)) == ("float32", "model")  # decoding clearly faster
    # decided apart: a float32 cache for decoding, long chunks in the model dtype (narrowed once per chunk)
    assert choose(times([3] * 5, [12] * 5)) == ("float32", "model")
    assert choose(times([3] * 5, [6] * 5)) == ("float32", "float32")
    assert choose(times(slow_round, slow_round)) == ("model", "model")
    assert choose(times([9.5, 9.5, 2, 2, 9.5], same)) == ("model", "model")  # 5% faster: not clearly


def test_every_candidate_runs_in_every_round_in_turns(q):
    calls = []
    candidates = {name: (lambda n=name: calls.append(n)) for name in "abc"}

    def broken():
        raise RuntimeError("this device lacks it")
    times = q.timed_rounds({**candidates, "broken": broken}, rounds=4)
    assert set(times) == set("abc") and all(len(t) == 4 for t in times.values())  # the failing one left out
    timed = calls[3:]  # after one warm-up call each
    assert [sorted(timed[i:i + 3]) for i in range(0, 12, 3)] == [list("abc")] * 4
    assert timed[:3] != timed[3:6]  # the order rotates


def test_kernels_table_is_the_choices_only(q):
    table = q.kernels_table()
    assert json.loads(json.dumps(table)) == table
    assert set(table) >= {"plain", "packed", "int8", "int4", "kv_cache", "attention", "weights"}
    assert all(isinstance(v, str) or all(isinstance(f, str) for f in v.values()) for v in table.values())


def test_attention_decided_on_decode_and_prefill_work(q, monkeypatch, capsys):
    if TEST_DEVICE != "cpu":
        pytest.skip("attention's choices are measured on CPUs")
    seen = []
    real = q.attention
    slice_of_longer = lambda k: k.stride(1) > k.shape[2] * k.stride(2)  # each head's keys lie apart, as in a cache
    monkeypatch.setitem(q._module.__dict__, "attention", lambda qs, k, v, mask: seen.append(
        (qs.shape[1], k.shape[2], k.dtype, slice_of_longer(k), slice_of_longer(v))) or real(qs, k, v, mask))
    cache, chunks = q.fastest_attention(decode_keys=1024, prefill_keys=2048)
    assert cache in ("model", "float32") and chunks in ("model", "float32")
    decode = {(1, 1024, t, True, True) for t in (torch.bfloat16, torch.float32)}
    assert decode | {(128, 2048, t, True, True) for t in (torch.bfloat16, torch.float32)} == set(seen)

    decoded = []  # and so the engine's decode step reads its cache
    monkeypatch.setitem(q._module.__dict__, "attention", lambda qs, k, v, mask: decoded.append(
        slice_of_longer(k) and slice_of_longer(v)) or real(qs, k, v, mask))
    q.generate([[1, 2, 3]], q.KEY_STEP + 2)  # a cache of 2 key steps: the first step's keys are half of it
    assert any(decoded)
    assert "median of 5 rounds" in capsys.readouterr().out


FAULTS_PER_PRODUCT = """
import ctypes, json, sys, torch
from contextlib import suppress  # the notebook imports it in Part 1
exec(sys.argv[1])  # the notebook's reuse_freed_memory
reuse_freed_memory(**json.loads(sys.argv[2]))
w, x, counts = torch.randn(1024, 1024), torch.randn(1024, 1024), []
(x @ w.T).sum()  # warm-up: the first block is new either way
for _ in range(6):
    before = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[7])  # minflt: pages the OS handed over
    (x @ w.T).sum()  # a 4 MB product, freed after the call
    counts.append(int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[7]) - before)
print(json.dumps(counts))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator (Linux) only")
def test_freed_memory_is_reused_not_faulted_in_again():
    """A prefill's products need MBs of new memory per call: with reuse_freed_memory() (run after loading)
    the allocator hands back the blocks just freed; with glibc's starting thresholds held, every call gets
    fresh pages from the OS. Each in a fresh process, with 2 MB pages as the notebook asks for them."""
    cell = next(c for c in engine_cells() if "def reuse_freed_memory(" in c)
    function = re.search(r"^def reuse_freed_memory\(.*?(?=^\S)", cell + "\n#", re.S | re.M).group(0)

    def faults_per_product(**thresholds):
        run = subprocess.run([sys.executable, "-c", FAULTS_PER_PRODUCT, function, json.dumps(thresholds)],
                             capture_output=True, text=True, env={**os.environ, "THP_MEM_ALLOC_ENABLE": "1"})
        assert run.returncode == 0, run.stderr[-2000:]
        return json.loads(run.stdout.strip().splitlines()[-1])
    glibc = faults_per_product(largest_block=128 * 2**10, keep_free=128 * 2**10)
    reused = faults_per_product()
    # glibc's thresholds: every call faults its pages in anew. Kept blocks: calls get freed blocks back (every
    # later call on the Xeons measured; on a 2-core AMD EPYC about every other one still faulted 2 MB in)
    assert min(glibc) > 100 and min(reused[1:]) < 10 and sum(reused) < sum(glibc), (glibc, reused)

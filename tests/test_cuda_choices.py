"""What the engine chooses for a CUDA GPU, checked on a CPU (issue 30's first items): no CPU-only form,
compiling only when asked for and where torch.compile can work, int4's fused kernel only where it runs
and agrees with dequantize(). A CPU cannot check what a real GPU lacks (kernels, speed): a device run does."""

import importlib.util

import pytest
import torch

from conftest import BF16_PACKING, TEST_DEVICE
from notebook_engine import load_engine


def decided_on_a_fake_gpu(q, monkeypatch, capability=(8, 0), setting="auto"):
    """The notebook's decode_step_compiled(), as it decides on a CUDA GPU of this capability: (compiled?, note)."""
    monkeypatch.setitem(q._module.__dict__, "device", torch.device("cuda"))
    monkeypatch.setitem(q._module.__dict__, "QWEN3_COMPILE", setting)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    return q.decode_step_compiled()


def test_auto_decodes_eagerly_on_cuda_and_says_how_to_compile(checkpoints, monkeypatch):
    q = load_engine(checkpoints("tiny"), device=TEST_DEVICE)  # the default setting, auto (the fixtures: off)
    assert q.QWEN3_COMPILE == "auto" and not q.COMPILE and "QWEN3_COMPILE=on compiles it" in q.compile_note
    compiled, why = decided_on_a_fake_gpu(q, monkeypatch)
    assert not compiled and "QWEN3_COMPILE=on compiles it" in why


@pytest.mark.parametrize("capability", [(8, 0), (6, 1)])
def test_on_compiles_only_where_triton_and_the_gpu_can(engine, monkeypatch, capability):
    can = importlib.util.find_spec("triton") is not None and capability >= (7, 0)
    compiled, why = decided_on_a_fake_gpu(engine(), monkeypatch, capability, "on")
    assert compiled == can and (why is not None and "torch.compile's GPU code needs Triton" in why) != can


def test_no_cpu_only_form_is_chosen_for_cuda(engine, monkeypatch):
    q = engine("tiny", "bfloat16")
    assert q.packing_possible() == BF16_PACKING  # a CPU form; in bf16, AVX-512 or AVX-NE-CONVERT
    monkeypatch.setitem(q._module.__dict__, "device", torch.device("cuda"))
    assert not q.packing_possible()  # a CUDA build reports mkldnn too: packing would crash on GPU tensors
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))  # a T4
    assert not q.fused_int4_runs()  # compiled out below 8.0 (and in bf16 it may return garbage)


def test_the_fused_int4_kernel_is_trusted_only_when_it_agrees_with_dequantize(engine, monkeypatch):
    q = engine("tiny", "bfloat16")
    real = q.matmul_int4
    assert q.fused_int4_runs() in (True, False)  # the trial itself never raises, whatever the kernel does
    monkeypatch.setitem(q._module.__dict__, "matmul_int4", lambda x, w: real(x, w) * 0 + 1)  # a wrong kernel
    assert not q.fused_int4_runs()

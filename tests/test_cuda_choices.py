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
    """The rule on a CUDA GPU: no oneDNN packing (a CUDA build reports mkldnn too); int4's fused kernel only at
    compute capability 8.0 and up, in bf16, where the build has it; else the plain layout (tiles)."""
    q = engine("tiny", "bfloat16")
    assert q.packs_weights() == BF16_PACKING  # a CPU form; in bf16, AVX-512 or AVX-NE-CONVERT
    monkeypatch.setitem(q._module.__dict__, "device", torch.device("cuda"))
    assert not q.packs_weights()
    monkeypatch.setitem(q._module.__dict__, "has_kernel", lambda op, device: True)  # a CUDA build's kernels
    for capability, dtype, layout in [((7, 5), torch.bfloat16, "plain"), ((8, 0), torch.bfloat16, "cuda"),
                                      ((8, 0), torch.float32, "plain")]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        monkeypatch.setitem(q._module.__dict__, "dtype", dtype)
        assert q.int4_layout() == layout, (capability, dtype)
    monkeypatch.setitem(q._module.__dict__, "has_kernel", lambda op, device: False)  # a build without it
    assert q.int4_layout() == "plain"

"""A CUDA dry run on a CPU (issue 30): the notebook's engine loads and runs its forward pass, up to lm_head, on
fake CUDA tensors (torch's FakeTensorMode: shapes, dtypes and devices, no numbers), for every weight kind and
every model kind. An op that has no CUDA kernel in its meta registry (oneDNN's packing), a tensor left on the
CPU, or a Python decision on a GPU value (`bool(...)`, `.tolist()`, `nonzero`) raises here as it would stall
or fail on a GPU.

What a dry run cannot catch: a CUDA kernel missing from a real build or below some compute capability (int4's
fused kernel below 8.0; test_cuda_choices.py checks that the engine never picks it there), numbers (garbage
from a kernel), and speed. benchmarks/device_check.sh checks those on a real GPU, when one is lent.

On a CPU-only torch, fake CUDA tensors need a CUDA device guard for Python's indexing and copies; a no-op one is
built here from three lines of C++ (about a second). The checkpoint's bytes are read for real (fake mode off),
the only values the dry run supplies besides MoE's expert counts (`by_expert`, read back once per layer)."""

import contextlib
import ctypes
import shutil
import subprocess
from unittest import mock

import pytest
import safetensors
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode

from notebook_engine import load_engine

GUARD = """#include <c10/core/impl/DeviceGuardImplInterface.h>
C10_REGISTER_GUARD_IMPL(CUDA, c10::impl::NoOpDeviceGuardImpl<c10::DeviceType::CUDA>);
"""


@pytest.fixture(scope="module")
def cuda_guard(tmp_path_factory):
    """Register a no-op CUDA device guard in this process (a CPU-only torch has none)."""
    if torch.cuda.is_available():
        pytest.skip("a real GPU is here: run the tests on it (QWEN3_TEST_DEVICE=cuda) instead")
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("the CUDA dry run needs a C++ compiler (g++) for its device guard")
    root = tmp_path_factory.mktemp("cuda_guard")
    (root / "guard.cpp").write_text(GUARD)
    torch_dir = torch.utils.cmake_prefix_path.rsplit("/share", 1)[0]
    subprocess.run([compiler, "-shared", "-fPIC", "-std=c++17", f"-I{torch_dir}/include", str(root / "guard.cpp"),
                    f"-L{torch_dir}/lib", "-lc10", f"-Wl,-rpath,{torch_dir}/lib", "-o", str(root / "guard.so")],
                   check=True, capture_output=True)
    ctypes.CDLL(str(root / "guard.so"), mode=ctypes.RTLD_GLOBAL)


class ReadForReal:
    """A safetensors file (or one tensor's slice) read with fake mode off, its tensors then made fake."""

    def __init__(self, handle, mode):
        self.handle, self.mode = handle, mode

    def _fake(self, value):
        return self.mode.from_tensor(value) if isinstance(value, torch.Tensor) else value

    def __getattr__(self, name):
        def call(*args, **kwargs):
            with unset_fake_temporarily():
                value = getattr(self.handle, name)(*args, **kwargs)
            return ReadForReal(value, self.mode) if name == "get_slice" else self._fake(value)
        return call

    def __getitem__(self, index):
        with unset_fake_temporarily():
            value = self.handle[index]
        return self._fake(value)


class CountOps(TorchDispatchMode):
    """Counts the aten ops dispatched (under the fake mode: what a GPU would launch)."""

    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def fake_gpu(capability=(8, 0)):
    """Fake mode, with torch.cuda saying a GPU of this capability is here."""
    real_open = safetensors.safe_open

    @contextlib.contextmanager
    def safe_open(path, framework, **kwargs):
        with unset_fake_temporarily():
            handle = real_open(path, framework, **kwargs)
            f = handle.__enter__()
        try:
            yield ReadForReal(f, mode)
        finally:
            with unset_fake_temporarily():
                handle.__exit__(None, None, None)

    # entered before torch.cuda says yes: factory functions then build on the CPU and move (torch's own rule)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode, contextlib.ExitStack() as patches:
        for name, value in dict(is_available=lambda: True, device_count=lambda: 1, current_device=lambda: 0,
                                get_device_capability=lambda device=None: capability,
                                get_device_name=lambda device=None: "a fake GPU", synchronize=lambda device=None: None,
                                mem_get_info=lambda device=None: (80 * 2**30, 80 * 2**30)).items():
            patches.enter_context(mock.patch.object(torch.cuda, name, value))
        patches.enter_context(mock.patch.object(torch.accelerator, "synchronize", lambda device=None: None))
        patches.enter_context(mock.patch.object(safetensors, "safe_open", safe_open))
        yield mode


def a_chunk_and_a_step(q):
    """Prefill a (2, 5) chunk, then decode one token, through forward_hidden and lm_head (forward() checks the
    ids' values: a user's list, on the CPU). -> the ops each dispatched, and the logits."""
    ids = torch.zeros(2, 5, dtype=torch.long, device=q.device)
    cache = q.make_cache(2, 8)
    prefill = q.lm_head(q.forward_hidden(ids, cache, 0))
    cache.filled = 5
    with CountOps() as ops:
        step = q.lm_head(q.forward_hidden(ids[:, :1], cache, 5))
    return ops.counts, prefill, step


def gpu_engine(path, quant, dtype="bfloat16", fused=True):
    """The engine on the fake GPU; fused: as a CUDA build of torch, which has aten's fused int8 and int4 kernels
    for CUDA (this CPU build has none: the rule then picks the tiles)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    with mock.patch.object(torch._C, "_dispatch_has_kernel_for_dispatch_key",
                           lambda op, key: fused and key == "CUDA" and "pack_mm" in op or has(op, key)):
        return load_engine(path, device="cuda", dtype=dtype, QWEN3_QUANT=quant, QWEN3_COMPILE="auto")


MODELS = {"dense": "tiny", "moe": "moe", "qwen3.5": "qwen35"}


def fake_by_expert(q):
    """MoE's one value read back, supplied: every choice to expert 0 (the shapes of any routing)."""
    return lambda experts: (experts.flatten().argsort(), [experts.numel()] + [0] * (q.config.num_experts - 1))


@pytest.mark.parametrize("quant", ["none", "int8", "int8_tiles", "int4_tiles"])
@pytest.mark.parametrize("model", MODELS)
def test_the_forward_pass_runs_on_fake_cuda_tensors(cuda_guard, checkpoints, model, quant):
    """int8: aten's fused kernel, which a CUDA build has; _tiles: the form for a build without the fused kernel
    (int4's fused kernel: the next test)."""
    variant = "int4_moe" if (model, quant) == ("moe", "int4_tiles") else MODELS[model]  # int4 experts: 64 wide
    path = checkpoints(variant)  # built for real
    with fake_gpu():
        q = gpu_engine(path, quant.removesuffix("_tiles"), fused=not quant.endswith("_tiles"))
        with q.swapped(by_expert=fake_by_expert(q)):
            ops, prefill, step = a_chunk_and_a_step(q)
        tensors = [t for t in q.stored_tensors()]
    V = q.config.vocab_size
    assert isinstance(step, FakeTensor) and prefill.shape == (2, 5, V) and step.shape == (2, 1, V)
    assert prefill.device.type == step.device.type == "cuda" and step.dtype == torch.float32
    assert all(t.device.type == "cuda" for t in tensors), "a weight left on the CPU"
    assert not q.packs_weights() and not any(isinstance(t, q.PackedWeight) for t in vars(q.weights.layers[0]).values())
    assert q.FUSED_INT8 == (not quant.endswith("_tiles")) and q.attention is q.fused_attention  # SDPA
    # a GPU launches per op: one product per matrix (a tile loop would launch one per 256 rows)
    products = sum(ops.get(op, 0) for op in ("mm", "bmm", "_weight_int8pack_mm", "_weight_int4pack_mm"))
    matrices = sum(1 for layer in q.weights.layers for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
                   if getattr(layer, name, None) is not None)
    if model == "dense":  # MoE: a product per expert chosen; Qwen3.5: the delta rule's own products too
        assert products <= matrices + 1 + 2 * q.config.num_hidden_layers, ops  # + lm_head; + scores and values


def test_float32_runs_on_fake_cuda_tensors(cuda_guard, checkpoints):
    """float32: a GPU without bf16 (Colab's T4) runs the model in it."""
    path = checkpoints("tiny")
    with fake_gpu(capability=(7, 5)):
        q = gpu_engine(path, "none", dtype="float32")
        _, prefill, step = a_chunk_and_a_step(q)
    assert step.device.type == "cuda" and q.weights.layers[0].qkv_proj.dtype == torch.float32


def test_int4s_fused_kernel_runs_on_fake_cuda_tensors(cuda_guard, checkpoints):
    """At compute capability 8.0, in bf16, a CUDA build's fused int4 kernel is the rule's choice, the weights
    laid out for it at load."""
    path = checkpoints("tiny")
    with fake_gpu():
        q = gpu_engine(path, "int4")
        ops, _, step = a_chunk_and_a_step(q)
    assert step.device.type == "cuda" and q.weights.layers[0].qkv_proj.layout == "cuda"
    assert ops.get("_weight_int4pack_mm", 0) == 4 * q.config.num_hidden_layers, ops


def test_the_dry_run_catches_a_cpu_only_op(cuda_guard, checkpoints, monkeypatch):
    """The negative control: issue 30's crash. Packing for oneDNN on CUDA weights (what a rule asking only
    torch.backends.mkldnn would do: a CUDA build reports it too) fails the dry run as it would fail on a GPU."""
    from torch._subclasses.fake_tensor import UnsupportedOperatorException
    path = checkpoints("tiny")
    with fake_gpu():
        q = gpu_engine(path, "none")
        with q.swapped(packs_weights=torch.backends.mkldnn.is_available), pytest.raises(
                UnsupportedOperatorException, match="mkldnn"):
            q.laid_out(q.weights.layers[0].qkv_proj)

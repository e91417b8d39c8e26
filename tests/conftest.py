"""Shared fixtures: tiny random Qwen3 checkpoints (made with transformers) and the notebook's
engine loaded on them. Nothing here computes the model: the notebook does, transformers checks."""

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import make_checkpoint  # noqa: E402
from notebook_engine import load_engine  # noqa: E402

os.environ["HF_HUB_OFFLINE"] = "1"  # tests never reach the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Where the engine (and the transformers reference it is compared with) runs: "cpu" unless told, e.g.
# QWEN3_TEST_DEVICE=cuda (benchmarks/device_check.sh). Inputs are made on the CPU, as before, then moved.
TEST_DEVICE = os.environ.get("QWEN3_TEST_DEVICE", "cpu")

# name -> build() options. "tiny" is laid out as Qwen3-0.6B is published.
VARIANTS = {
    "tiny": {},
    "tied_absent": dict(lm_head="absent", seed=1),            # as Qwen3-4B: no lm_head.weight
    "untied": dict(lm_head="untied", seed=2),                 # as Qwen3-8B
    "sharded": dict(lm_head="absent", shards=3, seed=3),      # 4B-style: tied, absent, sharded
    "config_v5": dict(config_layout="5", template_file=True, seed=4),  # transformers 5 layout
    "base": dict(base=True, seed=5),                          # a -Base model: stops on <|endoftext|>
}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    built = {}

    def get(name):
        if name not in built:
            path = root / name
            make_checkpoint.build(str(path), **VARIANTS[name])
            built[name] = path
        return built[name]
    return get


@pytest.fixture(scope="session")
def engine(checkpoints):
    """engine(variant="tiny", dtype="float32") -> the notebook's namespace on that checkpoint, on TEST_DEVICE."""
    cache = {}

    def get(variant="tiny", dtype="float32"):
        if (variant, dtype) not in cache:
            cache[variant, dtype] = load_engine(checkpoints(variant), device=TEST_DEVICE, dtype=dtype)
        return cache[variant, dtype]
    return get


@pytest.fixture(scope="session")
def reference(checkpoints):
    """reference(variant="tiny", dtype=torch.float32, attn="eager") -> transformers Qwen3ForCausalLM
    on TEST_DEVICE (pass it inputs there: `ids.to(model.device)`)."""
    from transformers import Qwen3ForCausalLM
    cache = {}

    def get(variant="tiny", dtype=torch.float32, attn="eager"):
        key = (variant, dtype, attn)
        if key not in cache:
            cache[key] = Qwen3ForCausalLM.from_pretrained(checkpoints(variant), dtype=dtype,
                                                          attn_implementation=attn).to(TEST_DEVICE).eval()
        return cache[key]
    return get


def random_ids(n_rows, n_tokens, high=426, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, (n_rows, n_tokens), generator=g)


def int8_stored(name, w):
    """Every weight matrix (not norms, not MoE routers) as q * s, computed as the scheme says:
    s = max|row| / 127 in float32, q = round(W / s) in [-127, 127]; float32, so exactly q * s."""
    if w.dim() != 2 or name.endswith("mlp.gate.weight"):
        return w
    w32 = w.float()
    s = w32.abs().amax(dim=1, keepdim=True) / 127
    return torch.round(w32 / torch.where(s == 0, 1.0, s)).clamp(-127, 127) * s


def stored_copy(src, dst, stored):
    """A copy of checkpoint src with every tensor replaced by stored(name, tensor): what a quantization
    scheme keeps of it, as plain numbers transformers can load."""
    import shutil
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    for path in dst.glob("*.safetensors"):
        save_file({name: stored(name, w) for name, w in load_file(path).items()}, path, metadata={"format": "pt"})
    return dst


def quantized_engines(root, checkpoints, quant, stored, moe_size, seed):
    """kind ("dense" or "moe") -> (the notebook with QWEN3_QUANT=quant, the notebook unquantized,
    transformers on the stored copy), all with float32 activations."""
    from transformers import AutoModelForCausalLM
    cache = {}

    def get(kind="dense"):
        if kind not in cache:
            src = checkpoints("tiny") if kind == "dense" else root / "moe"
            if kind == "moe":
                make_checkpoint.build(str(src), size=moe_size, seed=seed)
            copy = stored_copy(src, root / f"{kind}-stored", stored)
            reference = AutoModelForCausalLM.from_pretrained(copy, dtype=torch.float32, attn_implementation="eager")
            cache[kind] = (load_engine(src, device=TEST_DEVICE, dtype="float32", QWEN3_QUANT=quant),
                           load_engine(src, device=TEST_DEVICE, dtype="float32"),
                           reference.to(TEST_DEVICE).eval())
        return cache[kind]
    return get

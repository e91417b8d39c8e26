"""Shared fixtures: tiny random Qwen3 checkpoints (made with transformers) and the notebook's
engine loaded on them. Nothing here computes the model: the notebook does, transformers checks."""

import json
import os
import shutil
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


def _bf16_packing():  # oneDNN packs bf16 weights only on CPUs with AVX-512 or AVX-NE-CONVERT (AVX2 alone: no)
    try:
        return torch.ops.mkldnn._reorder_linear_weight(torch.ones(8, 8, dtype=torch.bfloat16)).is_mkldnn
    except (RuntimeError, AttributeError):
        return False


BF16_PACKING = TEST_DEVICE == "cpu" and torch.backends.mkldnn.is_available() and _bf16_packing()

# name -> make_checkpoint.build_checkpoint() options. "tiny" is laid out as Qwen3-0.6B is published.
DENSE_VARIANTS = {  # the dense Qwen3 layouts
    "tiny": {},
    "tied_absent": dict(lm_head="absent", seed=1),            # as Qwen3-4B: no lm_head.weight
    "untied": dict(lm_head="untied", seed=2),                 # as Qwen3-8B
    "sharded": dict(lm_head="absent", shards=3, seed=3),      # 4B-style: tied, absent, sharded
    "config_v5": dict(config_layout="5", template_file=True, seed=4),  # transformers 5 layout
    "base": dict(base=True, seed=5),                          # a -Base model: stops on <|endoftext|>
}
VARIANTS = {
    **DENSE_VARIANTS,
    # Qwen3-MoE, as Qwen3-30B-A3B is published (untied, one tensor per expert)
    "moe": dict(size="tiny-moe"),
    "moe_dense_layer_1": dict(size="tiny-moe", mlp_only_layers=[1], seed=1),    # a dense MLP between sparse layers
    "moe_sparse_step_2": dict(size="tiny-moe", decoder_sparse_step=2, seed=2),  # only layer 1 sparse: (i + 1) % 2 == 0
    "moe_no_topk_renorm": dict(size="tiny-moe", norm_topk_prob=False, seed=3),  # top-k softmax weights as they are
    "moe_transformers5_config": dict(size="tiny-moe", config_layout="5", shards=2, seed=4),  # "num_local_experts"
    # quantized against their stored copies (test_int8.py, test_int4.py: int4 wants experts 64 wide)
    "int8_moe": dict(size="tiny-moe", seed=6),
    "int4_moe": dict(size="tiny-moe-int4", seed=7),
    # Qwen3.5: the published vision-language layout (mtp.* tensors too), and a text-only one (qwen3_5_text)
    "qwen35": dict(size="tiny-qwen3.5", seed=0),
    "qwen35_text": dict(size="tiny-qwen3.5", text_only=True, seed=0),
    # Llama, as HuggingFaceTB/SmolLM2-135M-Instruct is published (tied, no head_dim, no QK-norm)
    "tiny_llama": dict(size="tiny-llama", seed=0),
}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    built = {}

    def get(name):
        if name not in built:
            path = root / name
            make_checkpoint.build_checkpoint(path, **VARIANTS[name])
            built[name] = path
        return built[name]
    return get


@pytest.fixture(scope="session")
def engine(checkpoints):
    """engine(variant="tiny", dtype="float32", **settings) -> the notebook's namespace on that checkpoint,
    on TEST_DEVICE, loaded with those QWEN3_* settings (QWEN3_COMPILE=off unless given: on a GPU too, where
    the recorder tests swap functions; test_cuda_choices.py runs the default, auto)."""
    cache = {}

    def get(variant="tiny", dtype="float32", **env):
        key = (variant, dtype, tuple(sorted(env.items())))
        if key not in cache:
            cache[key] = load_engine(checkpoints(variant), device=TEST_DEVICE, dtype=dtype,
                                     **{"QWEN3_COMPILE": "off", **env})  # eager unless a test asks
        return cache[key]
    return get


@pytest.fixture(scope="session")
def reference(checkpoints):
    """reference(variant="tiny", dtype=torch.float32, attn="eager") -> transformers' model for that
    checkpoint (Qwen3, Qwen3-MoE, Qwen3.5) on TEST_DEVICE (pass it inputs there: `ids.to(model.device)`)."""
    from transformers import AutoModelForCausalLM
    cache = {}

    def get(variant="tiny", dtype=torch.float32, attn="eager"):
        key = (variant, dtype, attn)
        if key not in cache:
            cache[key] = AutoModelForCausalLM.from_pretrained(checkpoints(variant), dtype=dtype,
                                                              attn_implementation=attn).to(TEST_DEVICE).eval()
        return cache[key]
    return get


def edited_copy(source, path, change=None, **config):
    """A copy of checkpoint `source` at `path`, with edit_config's changes."""
    shutil.copytree(source, path)
    return edit_config(path, change, **config)


def edit_config(path, change=None, **config):
    """Change the config.json of the checkpoint at `path`: keys set (None: removed), then change(config)."""
    cfg = json.loads((path / "config.json").read_text())
    for key, value in config.items():
        cfg.pop(key) if value is None else cfg.__setitem__(key, value)
    if change:
        change(cfg)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


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
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    for path in dst.glob("*.safetensors"):
        save_file({name: stored(name, w) for name, w in load_file(path).items()}, path, metadata={"format": "pt"})
    return dst


def quantized_engines(root, checkpoints, engine, quant, stored):
    """kind ("dense" or "moe") -> (the notebook with QWEN3_QUANT=quant, the notebook unquantized,
    transformers on the stored copy), all with float32 activations."""
    from transformers import AutoModelForCausalLM
    cache = {}

    def get(kind="dense"):
        if kind not in cache:
            variant = "tiny" if kind == "dense" else f"{quant}_moe"
            copy = stored_copy(checkpoints(variant), root / f"{kind}-stored", stored)
            reference = AutoModelForCausalLM.from_pretrained(copy, dtype=torch.float32, attn_implementation="eager")
            cache[kind] = engine(variant, QWEN3_QUANT=quant), engine(variant), reference.to(TEST_DEVICE).eval()
        return cache[kind]
    return get


def session_equals_fresh_generation(q, questions, new_tokens=16, context=4096, **ask):
    """A thinking-mode ChatSession, turn by turn against generate() on the whole rendered history (ask:
    more arguments of ChatSession.ask); returns the session and the history."""
    session = q.ChatSession(system="Be brief.", enable_thinking=True, context=context, temperature=0)
    history = [{"role": "system", "content": "Be brief."}]
    for question in questions:
        history.append({"role": "user", "content": question})
        fresh = q.generate([q.encode(q.render_chat(history))], new_tokens)
        session.ask(question, max_new_tokens=new_tokens, stream=False, **ask)
        assert session.last.tokens == fresh.tokens
        history.append({"role": "assistant", "content": fresh.text[0]})
        assert session.messages == history
    return session, history

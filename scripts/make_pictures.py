"""Draw the README's pictures that do not depend on trained weights, with the notebook's own plotting
functions: docs/rope.png, docs/yarn.png and docs/kv_cache_memory.png for the published Qwen3-0.6B config
(YaRN at the model card's setting: factor 4 over 32,768 trained positions).
(docs/benchmark.png comes from benchmarks/benchmark.py; attention maps only mean something with
the real weights, so they are drawn when a user runs the notebook, never committed.)

    python3 scripts/make_pictures.py
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("MPLBACKEND", "Agg")

import make_checkpoint  # noqa: E402
from notebook_engine import load_engine  # noqa: E402

# The published Qwen/Qwen3-0.6B config.json, the fields the pictures use.
QWEN3_0_6B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                  rope_theta=1e6, max_position_embeddings=40960, tie_word_embeddings=True,
                  stop_ids=(151643, 151645), sampling={})


def main():
    tiny = make_checkpoint.cached(ROOT / ".cache" / "qwen3-tiny-random")
    q = load_engine(tiny, tags=("plots",))  # any checkpoint will do: the plots take the config as an argument
    cfg = q.Config(**QWEN3_0_6B)
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    q.plot_rope(cfg.head_dim, cfg.rope_theta, path=docs / "rope.png")
    q.plot_yarn(cfg.head_dim, cfg.rope_theta, factor=4, original=32768, path=docs / "yarn.png")
    q.plot_kv_memory(cfg, bytes_per_value=2, path=docs / "kv_cache_memory.png")
    print(f"wrote {docs / 'rope.png'}, {docs / 'yarn.png'} and {docs / 'kv_cache_memory.png'}")


if __name__ == "__main__":
    main()

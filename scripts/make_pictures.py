"""Draw the README's pictures that do not depend on trained weights, with the notebook's own plotting
functions: docs/rope.png, docs/yarn.png and docs/kv_cache_memory.png for the published Qwen3-0.6B config
(YaRN at the model card's setting: factor 4 over 32,768 trained positions), and docs/qwen35_memory.png
(Qwen3.5-0.8B's cache against Qwen3-0.6B's, as the context grows).
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

def main():
    tiny = make_checkpoint.cached(ROOT / ".cache" / "qwen3-tiny-random")
    q = load_engine(tiny, tags=("plots",))  # any checkpoint will do: the plots take the config as an argument
    cfg = q.QWEN3_0_6B  # the published configs, as the notebook's Qwen3.5 section writes them
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    q.plot_rope(cfg.head_dim, cfg.rope_theta, path=docs / "rope.png")
    q.plot_yarn(cfg.head_dim, cfg.rope_theta, factor=4, original=32768, path=docs / "yarn.png")
    q.plot_kv_memory(cfg, bytes_per_value=2, path=docs / "kv_cache_memory.png")
    q.plot_memory_vs_context({"Qwen3-0.6B": cfg, "Qwen3.5-0.8B": q.QWEN3_5_0_8B}, path=docs / "qwen35_memory.png")
    print(f"wrote {docs / 'rope.png'}, {docs / 'yarn.png'}, {docs / 'kv_cache_memory.png'} and {docs / 'qwen35_memory.png'}")


if __name__ == "__main__":
    main()

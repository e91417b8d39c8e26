"""Draw the pictures the notebook's markdown embeds (its committed copy has no outputs, so these are what a
GitHub reader sees), with the notebook's own plotting functions:

- from the published configs (no weights needed): docs/rope.png, docs/yarn.png (the model card's YaRN: factor 4
  over 32,768 trained positions), docs/kv_cache_memory.png (Qwen3-0.6B), docs/qwen35_memory.png;
- from a trained model, SmolLM2-135M-Instruct (the offline model: scripts/convert_gguf.py, run here when
  models/SmolLM2-135M-Instruct is missing), on the notebook's demo question: docs/attention_layer0.png,
  docs/logit_lens.png, docs/heads.png, docs/sinks.png, docs/stream_size.png, docs/confidence.png,
  docs/routing.png (a random router over its embeddings: the mechanics of a mixture-of-experts layer);
- from docs/benchmark.json (benchmarks/benchmark.py's run, on a quiet machine): docs/step.png (a batch-1 decode
  step against the memory roofline, titled with the model, dtype, machine and date it was measured on).
docs/benchmark.png comes from benchmarks/benchmark.py.

    python3 scripts/make_pictures.py
"""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("MPLBACKEND", "Agg")

import make_checkpoint  # noqa: E402
import torch  # noqa: E402
from notebook_engine import load_engine  # noqa: E402

QUESTION = "What is the most played game on Steam right now?"  # the notebook's demo question, for an English model


def published(docs):
    tiny = make_checkpoint.cached(ROOT / ".cache" / "qwen3-tiny-random")
    q = load_engine(tiny, tags=("plots",))  # any checkpoint will do: the plots take the config as an argument
    cfg = q.QWEN3_0_6B  # the published configs, as the notebook writes them
    q.plot_rope(cfg.head_dim, cfg.rope_theta, path=docs / "rope.png")
    q.plot_yarn(cfg.head_dim, cfg.rope_theta, factor=4, original=32768, path=docs / "yarn.png")
    q.plot_kv_memory(cfg, bytes_per_value=2, path=docs / "kv_cache_memory.png")
    q.plot_memory_vs_context({"Qwen3-0.6B": cfg, "Qwen3.5-0.8B": q.QWEN3_5_0_8B}, path=docs / "qwen35_memory.png")
    return ["rope", "yarn", "kv_cache_memory", "qwen35_memory"]


def trained(docs):
    smol = ROOT / "models" / "SmolLM2-135M-Instruct"
    if not (smol / "config.json").exists():
        import convert_gguf
        convert_gguf.convert(smol)
    q = load_engine(smol, dtype="float32", tags=("plots",), QWEN3_COMPILE="off")
    prompt = q.encode(q.render_chat([{"role": "system", "content": "You are a helpful assistant."},
                                     {"role": "user", "content": QUESTION}], enable_thinking=False))
    looked = q.trace([prompt])
    labels = [q.token_label(i) for i in prompt]
    L = q.config.num_hidden_layers
    q.plot_attention(looked.attention[0, 0, 0], labels, "SmolLM2-135M-Instruct, layer 0, head 0: attention weights",
                     path=docs / "attention_layer0.png")
    p_final, top = q.lens_view(looked, last=16)
    q.plot_logit_lens(p_final, top, labels[-16:], path=docs / "logit_lens.png")
    q.plot_heads(looked.attention[L // 2, 0], L // 2, path=docs / "heads.png")
    q.plot_sinks(looked.attention[:, 0], path=docs / "sinks.png")
    q.plot_stream_size(looked.hidden[:, 0], labels, path=docs / "stream_size.png")
    reply = q.greedy([prompt], 48)[0].tolist()
    before_each = q.forward([prompt + reply])[0, len(prompt) - 1:-1]
    chosen = q.softmax(before_each).gather(-1, torch.tensor(reply)[:, None])[:, 0]
    q.plot_confidence([q.token_label(i, 10) for i in reply], chosen, path=docs / "confidence.png")
    router = torch.randn(8, q.config.hidden_size, generator=torch.Generator().manual_seed(0)) * q.config.hidden_size ** -0.5
    routed = q.dataclasses.replace(q.config, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True)
    with q.swapped(config=routed):
        gates, experts = q.route(q.rms_norm(q.embed(torch.tensor([prompt]))[0], torch.ones_like(q.weights.norm), q.config.rms_norm_eps), router)
    q.plot_routing(experts, gates, 8, labels, path=docs / "routing.png")
    return ["attention_layer0", "logit_lens", "heads", "sinks", "stream_size", "confidence", "routing"]


def measured(docs):
    tiny = make_checkpoint.cached(ROOT / ".cache" / "qwen3-tiny-random")
    q = load_engine(tiny, tags=("plots",), QWEN3_COMPILE="off")  # any checkpoint: the figures are the report's
    report = json.loads((docs / "benchmark.json").read_text())
    q.plot_step({"docs/benchmark.json": q.saved_step(report)}, path=docs / "step.png")
    return ["step"]


def main():
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    names = published(docs) + trained(docs) + (measured(docs) if "--no-measure" not in sys.argv else [])
    print("wrote " + ", ".join(f"docs/{n}.png" for n in names))


if __name__ == "__main__":
    main()

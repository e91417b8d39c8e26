"""The GPU half of benchmarks/device_check.sh: a few minutes of measurements on a random Qwen3-0.6B, each
written to OUT/gpu_check.jsonl the moment it is taken (a kill keeps what came before), then a summary.

    python3 benchmarks/gpu_check.py OUT_DIR [--new-tokens 64]

1. eager decoding (the default on CUDA) vs transformers: batch 1, batch 16, a 512-token prefill, peak memory;
2. QWEN3_COMPILE=on: how long the first compile takes, decoding at batch 1, and how many times the step
   compiles (dynamo's graphs, beyond the shapes it announced) and skips its CUDA graph (inductor's cudagraph_skips) while it
   decodes prompts of two lengths, a speculative reply and a three-turn ChatSession: one compile per
   (batch, cache length, slots read) it announces;
3. int8 and int4 weights: the kind of weight the rule made (fused kernel or tiles), and batch-1 decoding;
4. the compiled step at batch 16.
The checkpoint is a random one of Qwen3-0.6B's exact shapes, made on the GPU (seconds) unless QWEN3_MODEL_DIR
names one. Each step that fails is recorded with its error, and the next one runs.
"""

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import ROOT, checkpoint_dir, engine, hf_decode, measure, ours_decode, prompts, weights_kind  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--device", default="cuda", help="cpu: a smoke run of this script (with QWEN3_MODEL_DIR=models/tiny)")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "gpu_check.jsonl"
    log.write_text("")
    results, COMPILED = {}, []

    def step(name):
        def run(fn):
            t0 = time.perf_counter()
            try:
                value = fn()
                row = {"step": name, "ok": True, "seconds": round(time.perf_counter() - t0, 1), "value": value}
            except Exception as e:  # recorded, and the next step runs
                traceback.print_exc()
                row = {"step": name, "ok": False, "seconds": round(time.perf_counter() - t0, 1),
                       "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]}
            results[name] = row
            with log.open("a") as f:
                f.write(json.dumps(row, default=str) + "\n")
            print(f"== {name}: {json.dumps(row, default=str)[:400]}", flush=True)
            return row.get("value")
        return run

    if os.environ.get("QWEN3_MODEL_DIR") or a.device == "cpu":
        model_dir = checkpoint_dir("0.6B")
    else:
        import make_checkpoint
        model_dir = Path(make_checkpoint.cached(ROOT / ".cache" / "qwen3-0.6B-random-cuda", "0.6B", device="cuda"))
    n = a.new_tokens
    q = step("load bf16")(lambda: engine(model_dir, a.device))
    vocab = q.tokenizer.get_vocab_size() if q else 0

    def versus_transformers():
        from transformers import Qwen3ForCausalLM
        hf = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa")
        hf = hf.to(a.device).eval()
        ours = lambda rows, k: ours_decode(q, rows, k)
        theirs = lambda rows, k: hf_decode(hf, rows, k, q.device)
        for f in (ours, theirs):
            f(prompts(1, 32, vocab), 4)  # warm-up
        rows = {b: prompts(b, 32, vocab, seed=b) for b in (1, 16)}
        long = prompts(1, min(512, q.config.max_position_embeddings - 8), vocab, seed=512)  # tiny: 504
        peak = {"b1": q.generate(rows[1], n).peak_memory_bytes, "b16": q.generate(rows[16], n // 2).peak_memory_bytes}
        return {
            "peak_memory_bytes": peak,
            "decode_b1_tokens_per_s": measure("decode b1", {"notebook": lambda: ours(rows[1], n)[0],
                                                            "transformers": lambda: theirs(rows[1], n)[0]}, 2),
            "decode_b16_tokens_per_s": measure("decode b16", {"notebook": lambda: ours(rows[16], n // 2)[0],
                                                              "transformers": lambda: theirs(rows[16], n // 2)[0]}, 2),
            "prefill_512_seconds": measure("prefill 512", {"notebook": lambda: ours(long, 2)[1],
                                                           "transformers": lambda: theirs(long, 2)[1]}, 2)}
    if q:
        step("eager vs transformers")(versus_transformers)

    def compiled():
        from torch._dynamo.utils import counters
        counters.clear()
        qc = engine(model_dir, a.device, QWEN3_COMPILE="on")
        t0 = time.perf_counter()
        ours_decode(qc, prompts(1, 32, vocab), 8)
        first = time.perf_counter() - t0
        speed = measure("compiled decode b1", {"notebook": lambda: ours_decode(qc, prompts(1, 32, vocab), n)[0]}, 2)
        ours_decode(qc, prompts(1, 40, vocab), n)  # another prompt length, the same cache length
        qc.generate([prompts(1, 32, vocab)[0]], n, speculate=4)
        chat = qc.ChatSession(enable_thinking=False, context=128, temperature=0)  # grows once, to 256
        for question in ("Hello!", "And again, at more length, please?", "Once more?"):
            chat.ask(question, max_new_tokens=40, stream=False)
        COMPILED.append(qc)
        return {"first_generate_seconds": first, "decode_b1_tokens_per_s": speed["notebook"],
                "compile_seconds": {str(k): v for k, v in qc.COMPILED["seconds"].items()},
                "dynamo_stats": dict(counters["stats"]),  # graphs compiled beyond the announced shapes:
                "unannounced_graphs": counters["stats"]["unique_graphs"] - len(qc.COMPILED["seconds"]),
                "cudagraph_skips": dict(counters["inductor"]).get("cudagraph_skips", 0)}
    step("compiled")(compiled)

    def compiled_b16():
        rows = prompts(16, 32, vocab, seed=16)
        ours_decode(COMPILED[0], rows, 8)  # compiles batch 16 (announced)
        return measure("compiled decode b16", {"notebook": lambda: ours_decode(COMPILED[0], rows, n // 2)[0]}, 2)

    for quant in ("int8", "int4"):
        def quantized(quant=quant):
            qq = engine(model_dir, a.device, QWEN3_QUANT=quant)
            ours_decode(qq, prompts(1, 32, vocab), 4)
            speed = measure(f"{quant} decode b1", {"notebook": lambda: ours_decode(qq, prompts(1, 32, vocab), n)[0]}, 2)
            return {"weights": weights_kind(qq), "decode_b1_tokens_per_s": speed["notebook"]}
        step(f"{quant} eager")(quantized)

    if COMPILED:
        step("compiled b16")(compiled_b16)

    ok = sum(r["ok"] for r in results.values())
    print(f"gpu_check: {ok} of {len(results)} steps ran; {log}", flush=True)
    sys.exit(0 if ok == len(results) else 1)


if __name__ == "__main__":
    main()

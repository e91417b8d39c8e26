"""Eager against compiled decoding on this machine, one fresh process per row (peak memory is per process).

    python3 benchmarks/compiled_vs_eager.py [--quant none int8 int4] [--new-tokens 48] [--runs 3]
        [--modes eager compiled regional] [--cold]

On the random checkpoint of the exact Qwen3-0.6B shape (built once in .cache/, as benchmark.py builds it, before
the rows start: building it in a row's process would count in that row's peak memory), batch 1: tokens/s of each
run, the first call's seconds (the compile, for the compiled rows) and the process's peak resident memory.
docs/performance.md's compile tables come from it; compiled rows also print where the compile's seconds went
(torch._dynamo's own timers, the largest). --cold gives each row an empty inductor cache. Mode `regional`
(unquantized only) is the experiment issue 32 asked for: regional compilation, one compiled decoder layer
serving every layer with the weights as inputs, rather than the whole step with the weights frozen in. It wraps the notebook's own decoder_layer through
`swapped`, as a demo cell would."""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))


def regional(q):
    """A context in which generate's decode steps run one compiled decoder layer for every layer: each layer's
    cache buffers and weights are inputs of the same graph (prefill stays eager)."""
    import torch
    compiled, plain = torch.compile(q.decoder_layer, fullgraph=True, dynamic=False), q.decoder_layer

    def layer(x, weights, i, cache, start_pos, cos, sin, mask):
        if x.shape[1] != 1:
            return plain(x, weights, i, cache, start_pos, cos, sin, mask)
        one = q.KVCache(k=[cache.k[i]], v=[cache.v[i]], pad=cache.pad)  # layer i's buffers as "layer 0"
        return compiled(x, weights, 0, one, torch.tensor(start_pos), cos, sin, mask)  # a tensor: one graph
    return q.swapped(decoder_layer=layer, COMPILE=True)  # COMPILE: generate's cache holds a buffer per layer


def row(mode, quant, new_tokens, runs):
    import contextlib
    from benchmark import checkpoint_dir, engine, ours_decode, prompts, weights_kind
    env = {"QWEN3_QUANT": quant} | {"compiled": {"QWEN3_COMPILE": "on"}, }.get(mode, {})
    q = engine(checkpoint_dir("0.6B"), "auto", **env)
    vocab = q.tokenizer.get_vocab_size()
    with regional(q) if mode == "regional" else contextlib.nullcontext():
        t0 = time.perf_counter()
        ours_decode(q, prompts(1, 32, vocab), 8)
        first = time.perf_counter() - t0
        speeds = [ours_decode(q, prompts(1, 32, vocab, seed=s), new_tokens)[0] for s in range(1, runs + 1)]
    phases = {}
    if mode in ("compiled", "regional"):  # the rows that compile
        import torch._dynamo.utils
        names, values = torch._dynamo.utils.compile_times(repr="csv", aggregate=True)
        phases = dict(sorted(((n, float(v)) for n, v in zip(names, values)), key=lambda p: -p[1])[:8])
    return {"mode": mode, "quant": quant, "tokens_per_s": sorted(speeds), "first_call_s": first, "phases": phases,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "failed_compile": q.COMPILED.get("failed") if mode == "compiled" else None, "weights": weights_kind(q)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quant", nargs="+", default=["none", "int8", "int4"])
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--modes", nargs="+", default=["eager", "compiled"],
                   choices=["eager", "compiled", "regional"])
    p.add_argument("--cold", action="store_true", help="an empty inductor cache for each row")
    p.add_argument("--row", nargs=2, help=argparse.SUPPRESS)  # internal: one row, in this process
    a = p.parse_args()
    if a.row:
        print("ROW " + json.dumps(row(*a.row, a.new_tokens, a.runs)))
        return
    from benchmark import checkpoint_dir
    checkpoint_dir("0.6B")  # built here, if it must be, so that no row's peak memory counts the building
    for quant in a.quant:
        for mode in (m for m in a.modes if quant == "none" or m in ("eager", "compiled")):
            env = os.environ | ({"TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="inductor-")} if a.cold else {})
            out = subprocess.run([sys.executable, __file__, "--row", mode, quant, "--new-tokens", str(a.new_tokens),
                                  "--runs", str(a.runs)], capture_output=True, text=True, env=env).stdout
            r = json.loads(next(line[4:] for line in out.splitlines() if line.startswith("ROW ")))
            print(f"{quant:5s} {mode:12s} tokens/s {' '.join(f'{s:.1f}' for s in r['tokens_per_s'])}, first call "
                  f"{r['first_call_s']:.1f} s, peak RSS {r['peak_rss_gib']:.2f} GiB"
                  + (f", compile failed: {r['failed_compile']}" if r["failed_compile"] else ""), flush=True)
            if r["phases"]:
                print("      compile seconds: " + ", ".join(f"{n} {v:.1f}" for n, v in r["phases"].items()))


if __name__ == "__main__":
    main()

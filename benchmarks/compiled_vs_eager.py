"""Eager against compiled decoding on this machine, one fresh process per row (peak memory is per process).

    python3 benchmarks/compiled_vs_eager.py [--quant none int8 int4] [--new-tokens 48] [--runs 3]

On the random checkpoint of the exact Qwen3-0.6B shape (built once in .cache/, as benchmark.py builds it), batch
1: tokens/s of each run, the first call's seconds (the compile, for the compiled rows) and the process's peak
resident memory. README's "Compiling on a CPU" table comes from it."""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def row(mode, quant, new_tokens, runs):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchmark import checkpoint_dir, engine, ours_decode, prompts
    env = {"QWEN3_QUANT": quant} | ({"QWEN3_COMPILE": "on"} if mode == "compiled" else {})
    q = engine(checkpoint_dir("0.6B"), "auto", **env)
    vocab = q.tokenizer.get_vocab_size()
    t0 = time.perf_counter()
    ours_decode(q, prompts(1, 32, vocab), 8)
    first = time.perf_counter() - t0
    speeds = [ours_decode(q, prompts(1, 32, vocab, seed=s), new_tokens)[0] for s in range(1, runs + 1)]
    return {"mode": mode, "quant": quant, "tokens_per_s": sorted(speeds), "first_call_s": first,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "failed_compile": q.COMPILE_FAILED if mode == "compiled" else None}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quant", nargs="+", default=["none", "int8", "int4"])
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--row", nargs=2, help=argparse.SUPPRESS)  # internal: one row, in this process
    a = p.parse_args()
    if a.row:
        print("ROW " + json.dumps(row(*a.row, a.new_tokens, a.runs)))
        return
    for quant in a.quant:
        for mode in ("eager", "compiled"):
            out = subprocess.run([sys.executable, __file__, "--row", mode, quant, "--new-tokens", str(a.new_tokens),
                                  "--runs", str(a.runs)], capture_output=True, text=True).stdout
            r = json.loads(next(line[4:] for line in out.splitlines() if line.startswith("ROW ")))
            print(f"{quant:5s} {mode:8s} tokens/s {' '.join(f'{s:.1f}' for s in r['tokens_per_s'])}, first call "
                  f"{r['first_call_s']:.1f} s, peak RSS {r['peak_rss_gib']:.2f} GiB"
                  + (f", compile failed: {r['failed_compile']}" if r["failed_compile"] else ""), flush=True)


if __name__ == "__main__":
    main()

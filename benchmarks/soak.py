"""Memory under use: generate() called hundreds of times with random batch sizes, prompt lengths and sampling
settings, on the random checkpoint of the exact Qwen3-0.6B shape (built once in .cache/, as benchmark.py builds
it), as a reader loads it (QWEN3_DTYPE=auto unless --dtype). Prints the process's resident memory after the
10th call and every 50 calls after, and the ratio of the last to the 10th: issue 45 asks for at most 1.10 after
400 calls.

    python3 benchmarks/soak.py                  # 400 calls
    python3 benchmarks/soak.py --calls 100 --quant int8
"""

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import make_checkpoint  # noqa: E402
from notebook_engine import load_engine  # noqa: E402


def resident_mib():
    """This process's resident memory now (not its peak), from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--quant", choices=["none", "int8", "int4"], default="none")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    checkpoint = make_checkpoint.cached(ROOT / ".cache" / "qwen3-0.6B-random", "0.6B")
    q = load_engine(checkpoint, dtype=a.dtype, tags=("plots",), QWEN3_QUANT=a.quant, QWEN3_COMPILE="off")
    rng = random.Random(a.seed)
    print(f"{q.machine_name()}, dtype {q.dtype}, weights {a.quant}, {a.calls} calls",
          flush=True)
    t0, after = time.perf_counter(), {}
    for call in range(1, a.calls + 1):
        batch, prompt, new = rng.randint(1, 4), rng.randint(8, 128), rng.randint(4, 24)
        sampling = rng.choice([{}, {"temperature": 0.7, "top_k": 20, "top_p": 0.9},
                               {"temperature": 1.0, "top_p": 0.8}, {"temperature": 0.6, "top_k": 50}])
        rows = [[rng.randrange(q.config.vocab_size) for _ in range(rng.randint(max(1, prompt // 2), prompt))]
                for _ in range(batch)]
        q.generate(rows, new, seed=rng.randrange(2**31), **sampling)
        if call == 10 or call % 50 == 0 or call == a.calls:
            after[call] = resident_mib()
            print(f"after call {call:4d}: resident {after[call]:8.1f} MiB  ({time.perf_counter() - t0:6.0f} s)",
                  flush=True)
    print(f"resident after call {a.calls} / after call 10: {after[a.calls] / after[10]:.3f} "
          f"({after[10]:.0f} -> {after[a.calls]:.0f} MiB)")


if __name__ == "__main__":
    main()

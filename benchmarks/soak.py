"""Memory under use: generate() called hundreds of times with 1-4 prompts of 1-200 tokens, 1-30 new tokens,
greedy or sampled, on the random checkpoint of the exact Qwen3-0.6B shape (built once in .cache/, as
benchmark.py builds it), as a reader loads it (QWEN3_DTYPE=auto unless --dtype). Prints the process's resident
memory after the 10th call and every 50 calls after (--every), with what glibc's malloc holds (in use; freed
but kept, and of that what lies at the heap's top; mmapped blocks), and the ratio of the last to the 10th:
issue 51 asks for at most 1.10 after 400 calls.

    python3 benchmarks/soak.py                  # 400 calls
    python3 benchmarks/soak.py --calls 100 --quant int8
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python3 benchmarks/soak.py --dtype float32   # as an AVX2 CPU
"""

import argparse
import ctypes
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


class Mallinfo2(ctypes.Structure):  # glibc's mallinfo2(): every arena's totals, in bytes
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def malloc_mib():
    """(in use, freed but kept, of which at the heap's top, mmapped) by glibc's malloc, MiB; None where it
    is not glibc 2.33+."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Mallinfo2
    except (OSError, AttributeError):
        return None
    m = libc.mallinfo2()
    return m.uordblks / 2**20, m.fordblks / 2**20, m.keepcost / 2**20, m.hblkhd / 2**20


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--quant", choices=["none", "int8", "int4"], default="none")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=int, default=50, help="print resident memory every this many calls")
    p.add_argument("--model-dir", default=None, help="default: the random 0.6B, built once in .cache/")
    p.add_argument("--notebook", default=None, help="another copy of the notebook (an earlier commit's, say)")
    a = p.parse_args()
    checkpoint = a.model_dir or make_checkpoint.cached(ROOT / ".cache" / "qwen3-0.6B-random", "0.6B")
    q = load_engine(checkpoint, dtype=a.dtype, tags=("plots",), QWEN3_QUANT=a.quant, QWEN3_COMPILE="off",
                    **({"notebook": a.notebook} if a.notebook else {}))
    rng = random.Random(a.seed)
    print(f"{q.machine_name()}, dtype {q.dtype}, weights {a.quant}, {a.calls} calls",
          flush=True)
    t0, after = time.perf_counter(), {}
    for call in range(1, a.calls + 1):
        batch, prompt, new = rng.randint(1, 4), rng.randint(1, 200), rng.randint(1, 30)
        sampling = rng.choice([{}, {"temperature": 0.7, "top_k": 20, "top_p": 0.9},
                               {"temperature": 1.0, "top_p": 0.8}, {"temperature": 0.6, "top_k": 50}])
        rows = [[rng.randrange(q.config.vocab_size) for _ in range(rng.randint(max(1, prompt // 2), prompt))]
                for _ in range(batch)]
        q.generate(rows, new, seed=rng.randrange(2**31), **sampling)
        if call == 10 or call % a.every == 0 or call == a.calls:
            after[call], heap = resident_mib(), malloc_mib()
            heap = "" if heap is None else ("; malloc: {:.0f} in use, {:.0f} freed but kept ({:.0f} at the top), "
                                            "{:.0f} mmapped".format(*heap))
            seconds = time.perf_counter() - t0
            print(f"after call {call:4d}: resident {after[call]:8.1f} MiB{heap}  ({seconds:6.0f} s)",
                  flush=True)
    print(f"resident after call {a.calls} / after call 10: {after[a.calls] / after[10]:.3f} "
          f"({after[10]:.0f} -> {after[a.calls]:.0f} MiB)")


if __name__ == "__main__":
    main()

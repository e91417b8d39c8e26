"""Where bf16 products stop paying on a CPU without bf16 instructions: the measurement behind BF16_ROWS.

    OMP_NUM_THREADS=1 python3 benchmarks/bf16_rows.py --cpu-kind avx2     # as an AVX2-only CPU
    OMP_NUM_THREADS=1 python3 benchmarks/bf16_rows.py --cpu-kind avx512   # AVX-512 without bf16
    OMP_NUM_THREADS=1 python3 benchmarks/bf16_rows.py                     # this CPU as it is

The 28 weight matrices of 7 Qwen3-0.6B layers (qkv_proj 4096 x 1024, o_proj 1024 x 2048, gate_up_proj
6144 x 1024, down_proj 1024 x 3072; random, bf16), multiplied by x of 1 to 512 rows three ways: as a bf16
product (x rounded to bf16: what a Bf16Weight does up to BF16_ROWS rows), as float32 on the bf16 matrix widened
256 rows at a time (the notebook's matmul_tiles: what it does beyond), and as float32 on float32 weights (what
`auto` did before issue 51, and what QWEN3_DTYPE=float32 does). The products come from the notebook's own
engine (loaded on a tiny random checkpoint for them). Milliseconds of this process's CPU time, best of a few
rounds that take turns: with one thread (OMP_NUM_THREADS=1) that is the work itself, which other programs on
the same cores slow down far less than the clock."""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_kind  # noqa: E402

cpu_kind.apply()  # before torch
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import make_checkpoint  # noqa: E402
import torch  # noqa: E402
from notebook_engine import load_engine  # noqa: E402

SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072)]  # one Qwen3-0.6B layer's matrices


def cpu_ms(fn):
    t0 = time.process_time()
    fn()
    return 1000 * (time.process_time() - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="1,2,3,4,5,6,8,16,64,512")
    p.add_argument("--layers", type=int, default=7, help="layers of matrices (7: 205 MB of bf16, past any cache)")
    p.add_argument("--rounds", type=int, default=3)
    cpu_kind.add_argument(p)
    a = p.parse_args()
    torch.set_grad_enabled(False)
    tiny = make_checkpoint.cached(ROOT / ".cache" / "qwen3-tiny-random", "tiny")
    q = load_engine(tiny, dtype="float32", tags=("plots",))  # plots: machine_name()
    g = torch.Generator().manual_seed(0)
    mats = [(torch.randn(s, generator=g) * 0.02).bfloat16() for _ in range(a.layers) for s in SHAPES]
    wide = [m.float() for m in mats]
    ways = {"bf16 product": lambda x, i: (x.bfloat16() @ mats[i].T).float(),
            "float32, widened tiles": lambda x, i: q.matmul_tiles(x, q.Bf16Weight(mats[i])),
            "float32 weights": lambda x, i: x @ wide[i].T}
    print(f"{q.machine_name()}; CPU kind {cpu_kind.describe()}; torch {torch.__version__}; BF16_ROWS here: "
          f"{q.BF16_ROWS}; ms of CPU time for the {len(mats)} matrices, best of {a.rounds} rounds")
    print("| rows | " + " | ".join(ways) + " | bf16 / widened |")
    print("|---|" + "---|" * (len(ways) + 1))
    for rows in map(int, a.rows.split(",")):
        x = torch.randn(rows, max(s[1] for s in SHAPES), generator=g)
        inputs = [x[:, :m.shape[1]].contiguous() for m in mats]
        best = {name: float("inf") for name in ways}
        for _ in range(a.rounds):  # the ways take turns
            for name, f in ways.items():
                best[name] = min(best[name], cpu_ms(lambda: [f(inputs[i], i) for i in range(len(mats))]))
        ratio = best["bf16 product"] / best["float32, widened tiles"]
        print(f"| {rows} | " + " | ".join(f"{v:.0f}" for v in best.values()) + f" | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()

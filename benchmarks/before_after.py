"""Before and after a change of the notebook: two versions' engines, timed alternately.

    python3 benchmarks/before_after.py --before a5158ae             # bf16: decode b1 / b16, prefill 512 / 4,096
    python3 benchmarks/before_after.py --before a5158ae --quant int4 --runs 5   # batch-1 decode only
    python3 benchmarks/before_after.py --before 322f9db --separate --cpu-kind avx2 --no-long   # a process per run

benchmark.py compares the notebook with transformers and llama.cpp; this compares the notebook with itself
(the version at git revision --before against the working tree), on the random checkpoint of the exact
Qwen3-0.6B shape that benchmark.py builds (.cache/), both engines loaded as a reader's would be
(QWEN3_DTYPE=auto unless --dtype says otherwise, each version's own choices; eager decoding), stop ids disabled. It prints each measurement's
medians and the speed ratio after / before (above 1: the change is faster). --separate runs each engine's
every run in a fresh process of its own (before, after, after, before, ...), so that neither engine's
memory or oneDNN's caches affect the other's; each process warms up, then measures each row twice and keeps
the better. Each row is also given per CPU second of this process: with one thread (OMP_NUM_THREADS=1) that
is the work itself, which other programs sharing the cores slow down far less than the clock. --cpu-kind runs both as an AVX2-only CPU, or AVX-512 without bf16 (benchmarks/cpu_kind.py)."""

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_kind  # noqa: E402

cpu_kind.apply()  # before torch: the caps hold in this process and in every one it starts
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import make_checkpoint  # noqa: E402
import torch  # noqa: E402
from notebook_engine import NOTEBOOK, load_engine  # noqa: E402


def engine(notebook, checkpoint, quant, dtype):
    """The notebook's engine on the checkpoint, as a reader would load it; stop ids off (fixed lengths)."""
    q = load_engine(checkpoint, dtype=dtype, notebook=notebook, QWEN3_QUANT=quant, QWEN3_COMPILE="off")
    q.config = dataclasses.replace(q.config, stop_ids=())
    return q


def cpu_seconds(fn):
    """(fn(), the CPU seconds this process spent on it)."""
    t0 = time.process_time()
    return fn(), time.process_time() - t0


def decode_rates(q, rows, new):
    """(decode tokens/s by the clock, decode tokens per CPU second): the tokens after the first, all rows; CPU
    time less that of a generation of one token (the prefill), so that both count the decode steps alone."""
    r, cpu = cpu_seconds(lambda: q.generate(rows, new))
    cpu_prefill = cpu_seconds(lambda: q.generate(rows, 1))[1]
    return r.decode_tokens_per_second, len(rows) * (new - 1) / max(cpu - cpu_prefill, 1e-9)


def prefill_rates(q, rows):
    r, cpu = cpu_seconds(lambda: q.generate(rows, 1))
    return len(rows[0]) / r.prefill_seconds, len(rows[0]) / cpu


def work(quant, long=True):
    """{row: fn(engine) -> (tokens/s, tokens per CPU second)}: the measurements, on fixed random prompts."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 150000, (16, 512), generator=g).tolist()
    long_prompt = torch.randint(0, 150000, (1, 4096), generator=g).tolist()
    rows = {"decode tokens/s, batch 1": lambda q: decode_rates(q, [prompts[0][:32]], 48)}
    if quant == "none":
        rows["decode tokens/s, batch 16"] = lambda q: decode_rates(q, [r[:32] for r in prompts], 24)
        rows["prefill 512 tokens/s"] = lambda q: prefill_rates(q, [prompts[0]])
        if long:
            rows["prefill 4,096 tokens/s"] = lambda q: prefill_rates(q, long_prompt)
    return rows


def one_process(notebook, checkpoint, a):
    """--one: this process loads one engine, warms it up, measures each row twice; prints {row: best}."""
    q = engine(notebook, checkpoint, a.quant, a.dtype)
    q.generate([[1, 2, 3]], 4), q.generate([[1, 2, 3]] * 16, 4), q.generate([list(range(1, 513))], 1)  # warm-up
    best = {}
    for row, run in work(a.quant, not a.no_long).items():
        clock, cpu = zip(*(run(q) for _ in range(2)))
        best |= {row: max(clock), f"{row} per CPU second": max(cpu)}
    print(json.dumps({"dtype": str(q.dtype), "weights": type(q.weights.layers[0].qkv_proj).__name__} | best))


def report(results, a):
    print(f"CPU kind: {cpu_kind.describe()}; {a.quant} {a.dtype}; {a.runs} runs"
          + (", each in its own process" if a.separate else ", in one process"))
    for w in dict.fromkeys(w for w, _ in results):
        before, after = (statistics.median(results[w, e]) for e in ("before", "after"))
        spread = lambda e: f"[{min(results[w, e]):.2f}-{max(results[w, e]):.2f}]"
        print(f"{w}: before {before:.2f} {spread('before')}, after {after:.2f} {spread('after')}, "
              f"after / before {after / before:.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="git revision of the notebook to compare with")
    p.add_argument("--quant", choices=["none", "int8", "int4"], default="none")
    p.add_argument("--runs", type=int, default=3, help="alternating runs per measurement (medians)")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto",
                   help="QWEN3_DTYPE of both engines (auto: what each version picks for a reader)")
    p.add_argument("--separate", action="store_true", help="each engine's each run in a fresh process")
    p.add_argument("--no-long", action="store_true", help="without the 4,096-token prefill")
    p.add_argument("--checkpoint", help="a checkpoint directory (default: the random 0.6B one in .cache/)")
    p.add_argument("--one", metavar="NOTEBOOK", help=argparse.SUPPRESS)
    cpu_kind.add_argument(p)
    a = p.parse_args()
    checkpoint = a.checkpoint or make_checkpoint.cached(ROOT / ".cache" / "qwen3-0.6B-random", "0.6B")
    if a.one:
        return one_process(a.one, checkpoint, a)
    old = subprocess.run(["git", "show", f"{a.before}:qwen3_from_scratch.ipynb"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "before.ipynb").write_text(old, encoding="utf-8")
        notebooks = {"before": Path(tmp) / "before.ipynb", "after": NOTEBOOK}
        if a.separate:
            for r in range(a.runs):
                for e in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                    run = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one", str(notebooks[e])],
                                         capture_output=True, text=True)
                    if run.returncode:
                        sys.exit(f"{e} failed:\n{run.stderr[-3000:]}")
                    got = json.loads(run.stdout.strip().splitlines()[-1])
                    print(f"run {r + 1} {e}: {got}", flush=True)
                    for w, v in got.items():
                        if w not in ("dtype", "weights"):
                            results.setdefault((w, e), []).append(v)
        else:
            engines = {e: engine(nb, checkpoint, a.quant, a.dtype) for e, nb in notebooks.items()}
            print({name: str(q.dtype) for name, q in engines.items()})
            rows = work(a.quant, not a.no_long)
            for r in range(a.runs):
                for w, run in rows.items():
                    for e in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                        clock, cpu = run(engines[e])
                        results.setdefault((w, e), []).append(clock)
                        results.setdefault((f"{w} per CPU second", e), []).append(cpu)
    report(results, a)


if __name__ == "__main__":
    main()

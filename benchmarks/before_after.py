"""Before and after a change of the notebook: two versions' engines in one process, timed alternately.

    python3 benchmarks/before_after.py --before a5158ae             # bf16: decode b1 / b16, prefill 512 / 4,096
    python3 benchmarks/before_after.py --before a5158ae --quant int4 --runs 5   # batch-1 decode only

benchmark.py compares the notebook with transformers and llama.cpp; this compares the notebook with itself
(the version at git revision --before against the working tree), on the random checkpoint of the exact
Qwen3-0.6B shape that benchmark.py builds (.cache/), both engines loaded as a reader's would be
(QWEN3_DTYPE=auto unless --dtype says otherwise, each version's own choices; eager decoding), stop ids disabled. It prints each measurement's
medians and the speed ratio after / before (above 1: the change is faster)."""

import argparse
import dataclasses
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="git revision of the notebook to compare with")
    p.add_argument("--quant", choices=["none", "int8", "int4"], default="none")
    p.add_argument("--runs", type=int, default=3, help="alternating runs per measurement (medians)")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto",
                   help="QWEN3_DTYPE of both engines (auto: what each version picks for a reader)")
    a = p.parse_args()
    checkpoint = make_checkpoint.cached(ROOT / ".cache" / "qwen3-0.6B-random", "0.6B")
    old = subprocess.run(["git", "show", f"{a.before}:qwen3_from_scratch.ipynb"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "before.ipynb").write_text(old, encoding="utf-8")
        engines = {"before": engine(Path(tmp) / "before.ipynb", checkpoint, a.quant, a.dtype),
                   "after": engine(NOTEBOOK, checkpoint, a.quant, a.dtype)}
    print({name: str(q.dtype) for name, q in engines.items()})
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 150000, (16, 512), generator=g).tolist()
    long = torch.randint(0, 150000, (1, 4096), generator=g).tolist()
    work = {"decode tokens/s, batch 1": lambda q: q.generate([prompts[0][:32]], 48).decode_tokens_per_second}
    if a.quant == "none":
        work["decode tokens/s, batch 16"] = lambda q: q.generate([r[:32] for r in prompts],
                                                                  24).decode_tokens_per_second
        work["prefill 512 tokens/s"] = lambda q: 512 / q.generate([prompts[0]], 1).prefill_seconds
        work["prefill 4,096 tokens/s"] = lambda q: 4096 / q.generate(long, 1).prefill_seconds
    results = {(w, e): [] for w in work for e in engines}
    for r in range(a.runs):
        for w, run in work.items():
            for e in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                results[w, e].append(run(engines[e]))
    for w in work:
        before, after = (statistics.median(results[w, e]) for e in ("before", "after"))
        print(f"{a.quant} {a.dtype} {w}: before {before:.2f}, after {after:.2f}, after / before {after / before:.3f}")


if __name__ == "__main__":
    main()

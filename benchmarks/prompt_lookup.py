"""Prompt lookup (generate(..., speculate=4)) against plain greedy decoding on a trained model whose
replies copy the prompt: forward passes and speed, alternating runs in one process.

    python3 benchmarks/prompt_lookup.py [--model-dir models/SmolLM2-135M-Instruct] [--dtype bfloat16]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from notebook_engine import load_engine  # noqa: E402

CODE = "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n"
ASKS = {
    "repeat": "Repeat this sentence exactly: The cat sat on the mat. The cat was happy because the mat was "
              "warm and soft.",
    "code edit": "Rename the function to average and keep everything else the same:\n" + CODE,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default="models/SmolLM2-135M-Instruct")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    q = load_engine(a.model_dir, dtype=a.dtype)
    for name, text in ASKS.items():
        ids = q.encode(q.render_chat([{"role": "user", "content": text}]))
        ratios = []
        for _ in range(a.runs):
            t = time.perf_counter()
            plain = q.generate([ids], a.new_tokens)
            t_plain = time.perf_counter() - t
            t = time.perf_counter()
            guessed = q.generate([ids], a.new_tokens, speculate=4)
            ratios.append(t_plain / (time.perf_counter() - t))
        print(f"{name}: {len(plain.tokens[0])} tokens; forward passes {plain.forward_passes} plain, "
              f"{guessed.forward_passes} with speculate=4; same tokens: {guessed.tokens == plain.tokens}; "
              f"speed {statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()

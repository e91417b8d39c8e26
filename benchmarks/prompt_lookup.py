"""Prompt lookup (generate(..., speculate=4)) against plain greedy decoding: forward passes and speed,
runs alternating in one process.

    python3 benchmarks/prompt_lookup.py [--model-dir models/SmolLM2-135M-Instruct] [--dtype bfloat16]
    python3 benchmarks/prompt_lookup.py --scripted --dtype float32   # the Qwen3-0.6B shape, replies scripted

A trained model (the default, SmolLM2-135M-Instruct: scripts/convert_gguf.py) answers the prompts itself.
Random weights never copy their prompt, so --scripted makes the replies: on a random checkpoint of the
exact Qwen3-0.6B shape with Qwen3's real vocabulary (built once in .cache/), every forward pass runs for
real and then its logits are tipped toward a written reply (as tests/test_speculation.py's Scripted
stand-in, but at the model's real cost). "repeat" and "code edit" answer by copying the prompt; "no copy"
answers a question in words of its own, whose lookups find only chance matches (" the", ".", "\\n").
"""

import argparse
import contextlib
import functools
import inspect
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
from notebook_engine import load_engine  # noqa: E402

CODE = "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n"
ASKS = {
    "repeat": "Repeat this sentence exactly: The cat sat on the mat. The cat was happy because the mat was "
              "warm and soft.",
    "code edit": "Rename the function to average and keep everything else the same:\n" + CODE,
}
USE = "def spread(xs):\n    m = mean(xs)\n    return mean([(x - m) ** 2 for x in xs]) ** 0.5\n"
PASSAGE = ("The KV cache stores the keys and values of every past token, so a decode step only computes the new "
           "token's. It is allocated once, for the longest sequence, and written in place. Prefill fills it for "
           "the whole prompt in one pass; each decode step then appends one position per layer.")
SCRIPTED = {  # name: (the user's message, the reply the scripted model gives)
    "repeat": (f"Here is a passage:\n\n{PASSAGE}\n\nRepeat it word for word.", PASSAGE),
    "code edit": ("Rename mean to average and keep everything else the same:\n\n" + CODE + "\n" + USE,
                  (CODE + "\n" + USE).replace("mean", "average")),
    "no copy": ("What should I see in Paris in one day? Answer in a few sentences.",
                "Start early at the Louvre, then walk along the Seine to Notre-Dame and the Latin Quarter. "
                "After lunch, climb the hill of Montmartre for a view over the roofs, and finish with dinner "
                "near the Eiffel Tower as its lights come on."),
}


def realvocab_checkpoint():
    """The random Qwen3-0.6B-shaped checkpoint (benchmark.py's, built once) with Qwen3's real tokenizer."""
    import make_checkpoint
    from real_vocab import ADDED_TOKENS, N_BASE, build_real_tokenizer
    src = make_checkpoint.cached(ROOT / ".cache" / "qwen3-0.6B-random", "0.6B")
    out = ROOT / ".cache" / "qwen3-0.6B-random-realvocab"
    if not (out / "tokenizer.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        for name in ("model.safetensors", "tokenizer_config.json"):
            if not (out / name).exists():
                try:
                    os.link(Path(src) / name, out / name)
                except OSError:
                    shutil.copy(Path(src) / name, out / name)
        ids = {t: N_BASE + i for i, t in enumerate(ADDED_TOKENS)}
        g = json.loads((Path(src) / "generation_config.json").read_text())
        g.update(bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
                 eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]])
        (out / "generation_config.json").write_text(json.dumps(g, indent=1))
        c = json.loads((Path(src) / "config.json").read_text())
        c.update(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
        (out / "config.json").write_text(json.dumps(c, indent=1))
        build_real_tokenizer(out)
    return out


class Scripted:
    """While installed, the model's greedy choice after position i of `text` (prompt + reply ids) is
    text[i + 1]: forward_hidden and lm_head run for real, then the wanted token's logit is raised."""

    def __init__(self, q, text):
        import torch
        self.q, self.text, self.torch = q, torch.tensor(text), torch
        self.real = {name: q._module.__dict__[name] for name in ("forward_hidden", "lm_head")}
        self.chunk = None

    def forward_hidden(self, ids, cache, start_pos=0, L=None):
        self.chunk = (start_pos, ids.shape[1])
        return self.real["forward_hidden"](ids, cache, start_pos, L)

    def lm_head(self, hidden):
        logits = self.real["lm_head"](hidden)                         # (B, T, V) or (B, V), batch 1 here
        start, T = self.chunk
        last = self.torch.tensor([start + T - 1])
        positions = self.torch.arange(start, start + T) if hidden.dim() == 3 else last
        wanted = self.text[(positions + 1).clamp(max=len(self.text) - 1)]
        rows = logits.view(-1, T if hidden.dim() == 3 else 1, logits.shape[-1])[0]
        rows[self.torch.arange(len(wanted)), wanted] = rows.max() + 100.0
        return logits

    def __enter__(self):
        self.q._module.__dict__.update(forward_hidden=self.forward_hidden, lm_head=self.lm_head)
        return self

    def __exit__(self, *exc):
        self.q._module.__dict__.update(self.real)


def compare(q, name, prompt, new_tokens, runs, scripted_reply=None):
    """Plain decoding, speculate=4, and (where prompt_lookup takes `shortest`) speculate=4 drafting from 1-token
    matches too, as before issue 51: runs taking turns; medians of decode speed."""
    one_token_matches = functools.partial(q.prompt_lookup, shortest=1)
    modes = {"plain": (0, q.prompt_lookup), "speculate=4": (4, q.prompt_lookup)}
    if "shortest" in inspect.signature(q.prompt_lookup).parameters:
        modes["speculate=4, 1-token matches too"] = (4, one_token_matches)
    results = {mode: [] for mode in modes}
    real_lookup = q.prompt_lookup
    try:
        for _ in range(runs):
            for mode, (k, lookup) in modes.items():
                q.prompt_lookup = lookup
                scripted = contextlib.nullcontext() if scripted_reply is None else Scripted(q, prompt + scripted_reply)
                with scripted:
                    results[mode].append(q.generate([prompt], new_tokens, speculate=k))
    finally:
        q.prompt_lookup = real_lookup
    plain = results["plain"]
    speed = lambda rs: statistics.median(r.decode_tokens_per_second for r in rs)
    print(f"{name}: {len(plain[0].tokens[0])} tokens, plain {speed(plain):.2f} tokens/s "
          f"({plain[0].forward_passes} forward passes)", flush=True)
    for mode, rs in list(results.items())[1:]:
        ratios = [r.decode_tokens_per_second / p.decode_tokens_per_second for p, r in zip(plain, rs)]
        print(f"  {mode}: {rs[0].forward_passes} forward passes, same tokens {rs[0].tokens == plain[0].tokens}, "
              f"{speed(rs):.2f} tokens/s: {statistics.median(ratios):.2f}x plain "
              f"(runs {', '.join(f'{r:.2f}' for r in ratios)})", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=None, help="default: models/SmolLM2-135M-Instruct, or with "
                   "--scripted the random Qwen3-0.6B shape with the real vocabulary")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--scripted", action="store_true", help="scripted replies on random weights (see above)")
    p.add_argument("--only", nargs="*", help="only these prompts (by name)")
    a = p.parse_args()
    model_dir = a.model_dir or (realvocab_checkpoint() if a.scripted else "models/SmolLM2-135M-Instruct")
    q = load_engine(model_dir, dtype=a.dtype, tags=("plots",), QWEN3_COMPILE="off")  # plots: machine_name
    print(f"{q.machine_name()}, {Path(model_dir).name}, {a.new_tokens} new tokens, {a.runs} runs each", flush=True)
    q.generate([[1, 2, 3]], 4), q.generate([[1, 2, 3]], 8, speculate=4)  # warm-up
    asks = SCRIPTED if a.scripted else {name: (text, None) for name, text in ASKS.items()}
    for name, (text, reply) in asks.items():
        if a.only and name not in a.only:
            continue
        chat = [{"role": "user", "content": text}]
        prompt = q.encode(q.render_chat(chat, enable_thinking=False) if a.scripted else q.render_chat(chat))
        reply_ids = None if reply is None else q.encode(reply)
        new_tokens = a.new_tokens if reply is None else min(a.new_tokens, len(reply_ids))
        compare(q, name, prompt, new_tokens, a.runs, reply_ids)


if __name__ == "__main__":
    main()

"""Make the exercise ladder, exercises/qwen3_exercises.ipynb, from qwen3_from_scratch.ipynb.

Each exercise's cell is a function of the notebook's Part 2, found by its name (never by cell number), with
its signature and docstring as the notebook has them and an empty body; the checks (exercises/checks.py)
compare it with the notebook's own when they run. So there is one solution, the notebook's, and after the
notebook changes, running this again is all it takes.

    python3 scripts/make_exercises.py                  # write exercises/qwen3_exercises.ipynb (the learner's)
    python3 scripts/make_exercises.py --check          # exit 1 when the committed one is out of date
    python3 scripts/make_exercises.py --solutions out.ipynb
        # the teacher's version: each body the notebook's, between ### BEGIN SOLUTION and ### END SOLUTION
        # (nbgrader's source format: its generate_assignment turns it into the learner's version)
"""

import argparse
import ast
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "exercises"))
import checks  # noqa: E402

OUT = ROOT / "exercises" / "qwen3_exercises.ipynb"
MAIN = "../qwen3_from_scratch.ipynb"
COLAB = ("https://colab.research.google.com/github/qwen3-from-scratch/qwen3-from-scratch/blob/main/"
         "exercises/qwen3_exercises.ipynb")

# What each exercise asks: the formula, the shapes, the conventions the check holds it to.
TEXT = {
    1: r"""$$\mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\frac{1}{D}\sum_{i=1}^{D} x_i^2 + \epsilon}} \odot \gamma$$
`x` is (..., D) in the model dtype; `weight` ($\gamma$) is (D,), or (heads, hd) when QK-norm calls it on
(B, T, heads, hd). Return x's shape and dtype. As the reference does: normalise in float32 (`x.float()`),
round to the weight's dtype, multiply by the weight, return in x's dtype. No mean is subtracted, no bias.
Tools: `.pow(2).mean(-1, keepdim=True)`, `torch.rsqrt`.""",
    2: r"""$$\theta_i = \text{theta}^{-2i/d}, \qquad i = 0, 1, \dots, d/2 - 1$$
One angle per position for each **pair** of dimensions of a head ($d$ = `head_dim`), so `head_dim / 2` of
them: (head_dim / 2,) **float32** on `device`, whatever the model dtype (bf16 angles go wrong at long
positions). `theta` is the config's `rope_theta`: 1e6 for Qwen3.""",
    3: r"""The angle of pair $i$ at position $m$ is $m\,\theta_i$. `positions` holds integers of any shape (the
model passes (B, T, 1)); `frequencies` are exercise 2's (hd/2,). Return `cos, sin`, each (..., hd):
the angles as **two halves**, $[m\theta_0, \dots, m\theta_{d/2-1}, m\theta_0, \dots, m\theta_{d/2-1}]$
(dimension $i$ and $i + d/2$ turn together), computed in float32, times `scale` (YaRN's factor, 1.0
without it), then cast to the model dtype `dtype`.""",
    4: r"""$$x' = x \odot \cos + \mathrm{rotate\_half}(x) \odot \sin,
\qquad \mathrm{rotate\_half}(x) = (-x_{d/2:},\ x_{:d/2})$$
This turns each pair $(x_i, x_{i+d/2})$ by its angle: $x'_i = x_i\cos - x_{i+d/2}\sin$ and
$x'_{i+d/2} = x_{i+d/2}\cos + x_i\sin$. Qwen3 pairs dimension $i$ with $i + d/2$ (the layout of
GPT-NeoX), not neighbours. `x` is (B, T, heads, hd); `cos`, `sin` are (B, T, 1, hd), one table for all
heads. Return x's shape. Write both functions: `apply_rope` calls your `rotate_half`.""",
    5: r"""$$\mathrm{SiLU}(x) = x\,\sigma(x) = \frac{x}{1 + e^{-x}}$$
Elementwise, any shape: compute in float32 and return x's dtype. Write it with `torch.exp`
(no `torch.sigmoid`, no `torch.nn.functional`: writing it is the point).""",
    6: r"""$$\mathrm{MLP}(x) = W_\text{down}\big(\mathrm{SiLU}(W_\text{gate}\,x) \odot W_\text{up}\,x\big)$$
`x` is (B, T, D). `layer.gate_up_proj` (2F, D) stacks `gate_proj` (its first F rows) and `up_proj`;
`layer.down_proj` is (D, F). Every product goes through `linear(x, W)` $= xW^\top$ (given). Return
(B, T, D). Your `silu` is used where written.""",
    7: r"""$$\mathrm{softmax}(x)_i = \frac{e^{x_i - \max_j x_j}}{\sum_k e^{x_k - \max_j x_j}}$$
Along the **last** axis, any shape; in float32 (return float32 whatever x's dtype). Scores may be -inf
(masked: $e^{-\infty} = 0$) or large (1000: subtract the maximum, or `exp` overflows).""",
    8: r"""Query $t$ of the chunk sits in cache slot $\text{start\_pos} + t$, key $j$ in slot $j$ ($0 \le j < L$).
It may look where $j \le \text{start\_pos} + t$ (causal) and $j \ge \text{pad}_b$ (not row $b$'s left
padding). A padding query, which would see no key, sees itself (a row of only $-\infty$ is 0/0).
`pad` is (B,), long. Return a bool tensor (B, 1, 1, T, L), True where the query may look: the two 1s
broadcast over the KV heads and the query heads of each group. Make new tensors on `pad.device`.""",
    9: r"""$$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d}} + M\right) V$$
`q` is (B, T, H, hd); `k`, `v` are (B, KV, L, hd), as the cache holds them; `mask` (B, 1, 1, T, L) from
exercise 8: $M$ is 0 where True, $-\infty$ where False; $d$ is hd. **Grouped-query attention:** query head
$h$ uses KV head $h \,/\!/\, (H / KV)$ (with 4 query heads on 2 KV heads: 0, 0, 1, 1). Return
(B, T, H·hd): each token's heads side by side. Copy K and V per query head (`repeat_interleave`), or fold
each group into rows as the notebook does. Your `softmax` is used where written; it returns float32, so
cast the probabilities to v's dtype (`.to(v.dtype)`) before the product with `v`.""",
    10: r"""Qwen3 norms every query and key head with RMSNorm (**QK-norm**), then applies RoPE, in this order.
`qk` is (B, T, H + KV, hd): the query heads, then the key heads. `qk_norm` is (H + KV, hd), a weight per
head (q_norm's rows, then k_norm's), or `None` for a Llama (SmolLM2), which has no QK-norm: RoPE only.
`cos`, `sin` are (B, T, 1, hd). The eps is `config.rms_norm_eps`. Return qk's shape.""",
    11: r"""A layer's **mixer**, where tokens exchange information. `x` (B, T, D) is already normed.
`linear(x, layer.qkv_proj)` viewed as (B, T, H + 2 KV, hd) holds the query heads, the key heads, then the
value heads. QK-norm and RoPE on queries and keys (`qk_norm_rope`); then `cache.store(i, k, v, start_pos,
L)` writes the chunk's keys and values (B, T, KV, hd) into layer `i`'s slots and returns everything the
chunk may see, (B, KV, L, hd) each, with `L = mask.shape[-1]`; then `attention`, and `o_proj` maps
(B, T, H·hd) back to (B, T, D). H, KV and hd come from `config`.""",
    12: r"""$$h = x + \mathrm{Mixer}(\mathrm{RMSNorm}(x)),
\qquad x_\text{next} = h + \mathrm{FeedForward}(\mathrm{RMSNorm}(h))$$
Pre-norm: each sublayer reads a normed copy, and adds its output to the stream as it was. The norms are
`layer.input_layernorm` and `layer.post_attention_layernorm`, with eps `config.rms_norm_eps`; the mixer
is `layer.mixer(xn, layer, i, cache, start_pos, cos, sin, mask)` (your `self_attention`), the
feed-forward `layer.feed_forward(hn, layer)` (your `mlp`). x (B, T, D) -> (B, T, D).""",
    13: r"""The **KV cache**: `cache.k` and `cache.v`, (layers, B, KV, max_len, hd) each, allocated once. `store`
writes a chunk's `k`, `v` (B, T, KV, hd) into layer `i`'s slots `start_pos .. start_pos + T - 1` (note the
axes: the cache is (B, KV, slots, hd)) and returns layer `i`'s keys and values in slots `0 .. L - 1`,
(B, KV, L, hd) each. In the notebook it is `KVCache`'s method; here it is a function of the cache,
`self`, and every cache calls yours.""",
    14: r"""**`forward_hidden(token_ids, cache, start_pos=0, L=None)`**, the model itself: `token_ids` (B, T)
take cache slots `start_pos ..`; L is `start_pos + T` unless given. RoPE's positions are the slot minus
`cache.pad[b]`, clamped at 0 (a left-padded row counts from its first real token), made on `device`;
`cos, sin = rope_cos_sin(positions[:, :, None], *config.rope)`, once for all layers;
`mask = attention_mask(cache.pad, start_pos, T, L)`; `x = embed(token_ids)`; every layer in turn,
`x = decoder_layer(x, layer, i, ...)`; then the final RMSNorm, `weights.norm`. Return (B, T, D).

**`lm_head(hidden)`**: logits (..., V) in float32, `linear(hidden, weights.lm_head)` (the embedding matrix
itself when `config.tie_word_embeddings`, as in Qwen3-0.6B; its own matrix when not, as in Qwen3-8B;
`linear`, as every product: the loaded model may keep it in another form that brings its own product).""",
    15: r"""`prompt_ids` (B, T), a tensor or lists (`torch.as_tensor(prompt_ids, device=device)`) -> (B, n) new
token ids. Make a cache, `make_cache(B, T + max_new_tokens)`; run the prompt once (*prefill*:
`forward(ids, cache)`) and take the last position's logits; then again and again: the most likely token
(`argmax`), fed alone (*decode*: `forward(next_ids[:, None], cache, start_pos)` at the next slot, so the
cache supplies everything before it). Stop once every row has produced one of `config.stop_ids` (a row
that stopped keeps going until then), or after `max_new_tokens`. `forward` is given: `forward_hidden` and
`lm_head`, with its arguments checked.""",
}

PAYOFF_TEXT = f"""## Exercise {checks.PAYOFF} · Your model talks · about 5 minutes (and a download)
Read first: [Part 5 · Running it]({MAIN}#Part-5-·-Running-it).

This cell loads the checkpoint the main notebook loads (`models/Qwen3-0.6B`, downloaded when missing) into
**your** functions, the notebook's where you wrote none, and asks for a reply to a chat prompt with your
`greedy`; then it compares your greedy tokens with the notebook's. `QWEN3_MODEL` or `QWEN3_MODEL_DIR`
choose another checkpoint, as for the main notebook, and README's offline routes work here too: SmolLM2
(`python3 scripts/convert_gguf.py models/SmolLM2-135M-Instruct`, then `QWEN3_MODEL=SmolLM2-135M-Instruct`)
or random weights (`python3 scripts/make_checkpoint.py models/tiny`, then `QWEN3_MODEL_DIR=models/tiny`).
Afterwards `config` and `weights` hold the real model: `greedy` on your own prompts runs your code."""


def definitions(notebook=checks.NOTEBOOK):
    """name -> (the source lines of its cell, its ast node), for every function of the ladder, found by name
    in Part 2's cells (a method: inside its class)."""
    found = {}
    for source in checks.part2_sources(notebook):
        lines = source.splitlines()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name in checks.FUNCTIONS:
                found[node.name] = lines, node
            if isinstance(node, ast.ClassDef):
                for method in node.body:
                    if isinstance(method, ast.FunctionDef) and checks.METHODS.get(method.name) == node.name:
                        found[method.name] = lines, method
    if missing := [name for name in checks.FUNCTIONS if name not in found]:
        raise SystemExit(f"{Path(notebook).name}'s Part 2 defines no {', '.join(missing)}: update the ladder "
                         "(EXERCISES in exercises/checks.py)")
    return found


def function_cell(names, found, solutions):
    """The cell of one exercise: each function's signature and docstring as the notebook has them (its
    decorators left out), marked @exercise, with an empty body, or the notebook's between nbgrader's markers."""
    parts = []
    for name in names:
        lines, node = found[name]
        documented = ast.get_docstring(node) is not None
        body = node.body[1:] if documented else node.body
        head = lines[node.lineno - 1:node.body[0].end_lineno if documented else body[0].lineno - 1]
        indent = " " * body[0].col_offset
        solution = lines[body[0].lineno - 1:node.end_lineno]
        inside = ([indent + "### BEGIN SOLUTION", *solution, indent + "### END SOLUTION"] if solutions
                  else [indent + "# YOUR CODE HERE", indent + "raise NotImplementedError()"])
        parts.append("@exercise\n" + textwrap.dedent("\n".join([*head, *inside])))
    return "\n\n\n".join(parts)


def anchor(heading):
    return heading.replace(" ", "-")


def cell(kind, source, cell_id, **metadata):
    c = {"cell_type": kind, "id": cell_id, "metadata": metadata, "source": source.splitlines(keepends=True)}
    return {**c, "execution_count": None, "outputs": []} if kind == "code" else c


def nbgrader(grade_id, solution=False, points=None):
    meta = {"grade": points is not None, "grade_id": grade_id, "locked": not solution, "schema_version": 3,
            "solution": solution, "task": False}
    return {"nbgrader": {**meta, **({"points": points} if points is not None else {})}}


def first_run():
    """What the checks print on a first run (nothing written), as they print it."""
    one = checks.EXERCISES[0]
    return (checks.loaded_line(checks.NOTEBOOK.name),
            str(checks.Result(1, one.functions[0], "not written", checks.Lab.not_written(one.functions))),
            str(checks.Result(checks.PAYOFF, "your model talks", "not written", checks.PAYOFF_NOT_WRITTEN)))


def introduction():
    ladder = [e for e in checks.EXERCISES if e.functions]
    payoff = checks.EXERCISES[-1]
    rows = [f"| {e.number} | {e.title} | {', '.join(f'`{n}`' for n in e.functions)} | {e.minutes} | "
            f"[{e.section}]({MAIN}#{anchor(e.section)}) |" for e in ladder]
    rows.append(f"| {payoff.number} | {payoff.title} | (run it) | {payoff.minutes} | [{payoff.section}]({MAIN}#"
                f"{anchor(payoff.section)}) |")
    hours = sum(e.minutes for e in checks.EXERCISES) / 60
    setup, check_1, check_16 = first_run()
    mistakes = len({m.name for e in checks.EXERCISES for m in e.mistakes})
    return f"""# Qwen3 from scratch: the exercises
[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({COLAB})

Write dense Qwen3 yourself, one function at a time, as the main notebook, [qwen3_from_scratch.ipynb]({MAIN}),
builds it in its Part 2. Each exercise gives the formula and the shapes, a cell with the function's
signature and an empty body for you to fill in, and a check. The check runs your function and the
notebook's own on the same cases, the awkward ones included (one token, left padding, a chunk after a
cached prefix, bf16, large scores): one line when right; when wrong, the case, by how much and, when your
answer is a known mistake ({mistakes} are known), its name and the fix. At the end your functions run the
real Qwen3-0.6B and answer a chat prompt.

You may stop after any exercise: your functions are used wherever you wrote them, the notebook's elsewhere.
Each check tests one exercise alone (the notebook's functions for everything else), so a mistake shows where
it is made.

**For teachers.** About {hours:.0f} hours in all:

| # | exercise | to write | minutes | read first in the main notebook |
|---|---|---|---|---|
""" + "\n".join(rows) + f"""

Before the first exercise, read the main notebook's [Part 2]({MAIN}#Part-2-·-The-model) introduction (the
letters of the shapes: B, T, L, D, H, KV, hd); then, before each exercise, the section its row names.
Parts 1 and 3-7 are not needed ([Part 7]({MAIN}#Part-7-·-What-goes-wrong) measures some of the mistakes
the checks recognise on the real model).

**All checks at once:** the last cell, `grade()`, prints a table: each exercise, and *passed* or the
mistake it makes. *Run All* reaches it. For nbgrader, the function cells and the check cells carry its
metadata, and a check that does not pass raises under its autograder; `python3 scripts/make_exercises.py
--solutions source/qwen3_exercises.ipynb` writes the teacher's version (the notebook's own code between
`### BEGIN SOLUTION` and `### END SOLUTION`), from which nbgrader's `generate_assignment` makes this one.

**A first run** (*Run All* with nothing written) prints under the setup cell

    {setup}

under each check, for instance the first,

    {check_1}

under exercise {checks.PAYOFF}

    {check_16}

and in the table, *not written yet* for every exercise, then `passed 0 of {checks.PAYOFF}`. A check that
cannot run says **NOT CHECKED** and what would make it checkable: neither that nor *not written yet* is
ever a pass."""


SETUP = f"""# The checks (exercises/checks.py) and the notebook's Part 2, which they compare with.
import subprocess, sys
from pathlib import Path

here = next((p for p in (Path.cwd(), Path.cwd().parent, Path("qwen3-from-scratch"))
             if (p / "exercises" / "checks.py").is_file()), None)
if here is None:  # Colab, or this notebook on its own: fetch the repository beside it
    subprocess.check_call(["git", "clone", "--depth", "1", "{checks.REPOSITORY}"])
    here = Path("qwen3-from-scratch")
sys.path.insert(0, str(here.resolve() / "exercises"))
from checks import start

exercise, check, grade = start(globals())"""


def notebook(solutions=False, source=checks.NOTEBOOK):
    """The exercise notebook as a dict (solutions: the teacher's version)."""
    found = definitions(source)
    cells = [cell("markdown", introduction(), "introduction"),
             cell("markdown", "## Setup\nRun this first: it loads the checks and, from the main notebook, everything "
                  "your functions may call (`linear`, `embed`, `make_cache`, `forward`, ...).", "setup-text"),
             cell("code", SETUP, "setup")]
    for e in checks.EXERCISES:
        n = e.number
        if not e.functions:
            cells += [cell("markdown", PAYOFF_TEXT, f"ex{n:02d}-text"),
                      cell("code", f'check({n}, prompt="{checks.PROMPT}")', f"ex{n:02d}-check",
                           **nbgrader(f"ex{n:02d}_check", points=1))]
            continue
        names = ", ".join(f"`{f}`" for f in e.functions)
        text = (f"## Exercise {n} · {e.title} ({names}) · about {e.minutes} minutes\n"
                f"Read first: [{e.section}]({MAIN}#{anchor(e.section)}).\n\n{TEXT[n]}")
        cells += [cell("markdown", text, f"ex{n:02d}-text"),
                  cell("code", function_cell(e.functions, found, solutions), f"ex{n:02d}-code",
                       **nbgrader(f"ex{n:02d}_{e.functions[-1]}", solution=True)),
                  cell("code", f"check({n})", f"ex{n:02d}-check", **nbgrader(f"ex{n:02d}_check", points=1))]
    cells += [cell("markdown", "## All checks at once\nA table of every exercise and its result (exercise "
                   f"{checks.PAYOFF} as its cell last ran).", "grade-text"),
              cell("code", "grade()", "grade", **nbgrader("grade", points=None))]
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                         "name": "python3"},
                                         "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}


def text(nb):
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed notebook is out of date")
    parser.add_argument("--solutions", metavar="PATH", help="write the teacher's version (with solutions) here")
    args = parser.parse_args()
    if args.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text(notebook()):
            sys.exit(f"{OUT.relative_to(ROOT)} is out of date: python3 scripts/make_exercises.py")
        print(f"{OUT.relative_to(ROOT)} is up to date")
        return
    path = Path(args.solutions) if args.solutions else OUT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text(notebook(solutions=bool(args.solutions))), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

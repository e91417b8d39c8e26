"""Side-by-side benchmark: the notebook engine vs transformers, same machine, same checkpoint, one run.

    python3 benchmarks/benchmark.py            # full run (about 20 minutes on 2 CPU cores)
    python3 benchmarks/benchmark.py --quick    # a smoke run on a tiny model (seconds)

Uses QWEN3_MODEL_DIR when set, else builds (once, cached in .cache/) a random-weight checkpoint with
the exact Qwen3-0.6B shapes in the published layout. Both engines decode greedily in bf16 with stop
ids disabled, so they produce the same number of tokens; transformers uses its default SDPA
attention. Writes docs/benchmark.md, docs/benchmark.json and docs/benchmark.png, and prints the
ratios (notebook / transformers) on its last line.
"""

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The notebook sets this before it imports torch (2 MB pages for the weights it copies into its own
# tensors); this script imports torch before the notebook's cells run, so it sets it here. It changes
# nothing for transformers, whose weights stay mapped from the checkpoint file.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_engine import load_engine  # noqa: E402


def checkpoint_dir(size):
    if os.environ.get("QWEN3_MODEL_DIR"):
        return Path(os.environ["QWEN3_MODEL_DIR"])
    import make_checkpoint
    return make_checkpoint.cached(ROOT / ".cache" / f"qwen3-{size}-random", size)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prompts(n_rows, n_tokens, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n_rows, n_tokens), generator=g).tolist()


class StepTimer:
    """A transformers streamer that only records when each new token arrives."""

    def __init__(self, device):
        self.device, self.times = device, []

    def put(self, value):
        sync(self.device)
        self.times.append(time.perf_counter())

    def end(self):
        pass


def ours_decode(q, rows, new_tokens):
    """tokens/s over the tokens after the first (all rows), prefill seconds."""
    r = q.generate(rows, new_tokens)
    assert all(len(t) == new_tokens for t in r.tokens)
    return r.decode_tokens_per_second, r.prefill_seconds


def hf_decode(model, rows, new_tokens, device):
    timer = StepTimer(device)
    ids = torch.tensor(rows, device=device)
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, streamer=timer, eos_token_id=None,
                         pad_token_id=0)
    sync(device)
    end = time.perf_counter()
    assert out.shape[1] == ids.shape[1] + new_tokens
    first = timer.times[1]  # times[0]: the prompt is "put" first
    return len(rows) * (new_tokens - 1) / (end - first), first - t0


def weight_floor_ms(q, batch):
    """One decode step's chain of weight products alone (no attention, no norms), in ms."""
    cfg = q.config
    x, attn_out, ffn_mid = (torch.randn(batch, 1, n, device=q.device).to(q.dtype) for n in (
        cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, cfg.intermediate_size))

    def chain():
        for layer in q.weights.layers:
            q.linear(x, layer.qkv_proj)
            q.linear(attn_out, layer.o_proj)
            q.linear(x, layer.gate_up_proj)
            q.linear(ffn_mid, layer.down_proj)
        q.linear(x, q.weights.lm_head)
        sync(q.device)
    chain()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        chain()
        times.append(time.perf_counter() - t0)
    return 1000 * min(times)


def products_inside_step_ms(q, rows, new_tokens):
    """(ms per decode step, ms of it inside linear()) from a real generation, linear() timed call by
    call: shows whether the products run as fast inside the step as alone (CPU only: timing each call
    on a GPU would need a sync per call, which changes what is measured)."""
    real, calls = q._module.linear, []

    def timed(x, weight, *args):
        t0 = time.perf_counter()
        out = real(x, weight, *args)
        calls.append((weight is q.weights.lm_head, x.dim() == 2 or x.shape[1] == 1, time.perf_counter() - t0))
        return out
    q._module.linear = timed
    try:
        r = q.generate(rows, new_tokens)
    finally:
        q._module.linear = real
    first_head = next(i for i, c in enumerate(calls) if c[0])  # the prefill's lm_head: not a decode step
    decode = [dt for i, (_, one_token, dt) in enumerate(calls) if one_token and i != first_head]
    steps = new_tokens - 1
    return 1000 * len(rows) / r.decode_tokens_per_second, 1000 * sum(decode) / steps


def bandwidth_gbs(device):
    """Memory-read bandwidth: the best of 5 sums over a 1 GiB float32 tensor."""
    t = torch.ones(2 ** 28, device=device)
    best = float("inf")
    for _ in range(5):
        sync(device)
        t0 = time.perf_counter()
        t.sum()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    del t
    return 2 ** 30 / best / 1e9


def memory_probe(model_dir, device_name, prompt_len, new_tokens):
    """Run in a separate process: RSS growth over loading + one batch-1 generation, only our engine."""
    import torch  # noqa: F811  (the baseline is "right after import torch")

    def status(key):  # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork + exec
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
    base = status("VmRSS")
    q = load_engine(model_dir, device=device_name, dtype="bfloat16")
    q.config = dataclasses.replace(q.config, stop_ids=())
    q.generate(prompts(1, prompt_len, q.tokenizer.get_vocab_size()), new_tokens)
    peak = status("VmHWM")
    cuda_peak = torch.cuda.max_memory_allocated() if q.device.type == "cuda" else None
    return {"rss_after_import_torch": base, "peak_rss": peak, "rss_growth": peak - base,
            "cuda_peak_allocated": cuda_peak,
            "kv_cache_bytes": (prompt_len + new_tokens) * q.kv_bytes_per_token()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny model, few tokens: checks the script runs")
    p.add_argument("--device", default=os.environ.get("QWEN3_DEVICE", "auto"))
    p.add_argument("--runs", type=int, default=3, help="alternating runs per measurement (medians)")
    p.add_argument("--out", default=str(ROOT / "docs"))
    p.add_argument("--memory-probe", nargs=4, metavar=("DIR", "DEVICE", "PROMPT", "NEW"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.memory_probe:
        d, dev, n_prompt, n_new = a.memory_probe
        print(json.dumps(memory_probe(d, dev, int(n_prompt), int(n_new))))
        return

    quick = a.quick
    model_dir = checkpoint_dir("tiny" if quick else "0.6B")
    n1, n16, n_sweep, n_prefill = (16, 8, 4, 64) if quick else (256, 64, 16, 512)
    runs = 1 if quick else a.runs
    from transformers import Qwen3ForCausalLM

    q = load_engine(model_dir, device=a.device, dtype="bfloat16", tags=("plots",))  # + the notebook's plot_throughput
    q.config = dataclasses.replace(q.config, stop_ids=())  # EOS disabled: fixed-length generations
    device = q.device
    hf = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").to(device).eval()
    vocab = q.tokenizer.get_vocab_size()
    torch.set_grad_enabled(False)
    print(f"device {device}, {torch.get_num_threads()} threads, checkpoint {model_dir}", flush=True)

    def measure(name, fn_ours, fn_hf, n_runs):
        ours, theirs = [], []
        for r in range(n_runs):  # alternate, so drifts in machine load hit both
            ours.append(fn_ours())
            theirs.append(fn_hf())
            print(f"  {name} run {r + 1}: notebook {ours[-1]:.3f}, transformers {theirs[-1]:.3f}", flush=True)
        return statistics.median(ours), statistics.median(theirs)

    results = {}
    # warm-up: first calls allocate and load kernels
    ours_decode(q, prompts(1, 32, vocab), 4)
    hf_decode(hf, prompts(1, 32, vocab), 4, device)

    for batch, new in [(1, n1), (16, n16)]:
        rows = prompts(batch, 32, vocab, seed=batch)
        results[f"decode_b{batch}"] = measure(
            f"decode tokens/s, batch {batch}, {new} new tokens",
            lambda: ours_decode(q, rows, new)[0], lambda: hf_decode(hf, rows, new, device)[0], runs)
    sweep = {}
    for batch in (1, 4, 16, 64):
        if batch == 1 and not quick:
            sweep[batch] = results["decode_b1"]
        elif batch == 16 and not quick:
            sweep[batch] = results["decode_b16"]
        else:
            rows = prompts(batch, 32, vocab, seed=batch)
            sweep[batch] = measure(f"decode tokens/s, batch {batch}, {n_sweep} new tokens",
                                   lambda: ours_decode(q, rows, n_sweep)[0],
                                   lambda: hf_decode(hf, rows, n_sweep, device)[0], 1)
    long_prompt = prompts(1, n_prefill, vocab, seed=99)
    results["prefill_seconds"] = measure(
        f"prefill seconds, {n_prefill}-token prompt",
        lambda: ours_decode(q, long_prompt, 2)[1], lambda: hf_decode(hf, long_prompt, 2, device)[1], runs)

    # where the time goes in one decode step
    bw = bandwidth_gbs(device)
    layer_bytes = sum(t.numel() * t.element_size() for layer in q.weights.layers
                      for t in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj))
    weight_bytes = layer_bytes + q.weights.lm_head.numel() * q.weights.lm_head.element_size()
    kv_read = (32 + n1 / 2) * q.kv_bytes_per_token()  # bytes of cache read per step, averaged over the run
    roofline_ms = 1000 * (weight_bytes + kv_read) / (bw * 1e9)
    steps = {}
    for batch in (1, 16):
        ours_tps, hf_tps = results[f"decode_b{batch}"]
        steps[batch] = {"weight_matmul_floor_ms": weight_floor_ms(q, batch), "notebook_ms": 1000 * batch / ours_tps,
                        "transformers_ms": 1000 * batch / hf_tps}
    steps[1]["roofline_ms"] = roofline_ms
    if device.type == "cpu":
        for batch, new in [(1, 32 if not quick else 8), (16, 8 if not quick else 4)]:
            step_ms, inside_ms = products_inside_step_ms(q, prompts(batch, 32, vocab, seed=batch), new)
            steps[batch]["notebook_products_inside_step_ms"] = inside_ms
            steps[batch]["notebook_step_same_run_ms"] = step_ms

    # memory, in a separate process running only the notebook engine
    probe = subprocess.run([sys.executable, __file__, "--memory-probe", str(model_dir), a.device, "32",
                            str(64 if quick else 512)], capture_output=True, text=True)
    if probe.returncode:
        sys.exit(f"memory probe failed:\n{probe.stderr[-3000:]}")
    memory = json.loads(probe.stdout.strip().splitlines()[-1])
    file_bytes = sum(f.stat().st_size for f in Path(model_dir).glob("*.safetensors"))
    memory["checkpoint_file_bytes"] = file_bytes
    memory["budget_bytes"] = file_bytes + memory["kv_cache_bytes"] + 300 * 2 ** 20

    report = {
        "machine": {"device": str(device), "name": torch.cuda.get_device_name(device) if device.type == "cuda"
                    else platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__, "quick": quick},
        "checkpoint": str(model_dir),
        "decode_b1_tokens_per_s": dict(zip(("notebook", "transformers"), results["decode_b1"])),
        "decode_b16_tokens_per_s": dict(zip(("notebook", "transformers"), results["decode_b16"])),
        "sweep_tokens_per_s": {str(b): dict(zip(("notebook", "transformers"), v)) for b, v in sweep.items()},
        "prefill_seconds": dict(zip(("notebook", "transformers"), results["prefill_seconds"])),
        "prefill_tokens": n_prefill, "new_tokens": {"b1": n1, "b16": n16, "sweep": n_sweep},
        "bandwidth_gb_s": bw, "weight_bytes_per_step": weight_bytes, "kv_bytes_per_token": q.kv_bytes_per_token(),
        "roofline_b1_ms": roofline_ms, "roofline_b1_tokens_per_s": 1000 / roofline_ms,
        "step_breakdown": {str(b): v for b, v in steps.items()}, "memory": memory,
    }
    ratios = {
        "decode_b1": results["decode_b1"][0] / results["decode_b1"][1],
        "decode_b16": results["decode_b16"][0] / results["decode_b16"][1],
        "prefill": results["prefill_seconds"][1] / results["prefill_seconds"][0],  # speed ratio
        "b1_vs_roofline": results["decode_b1"][0] / (1000 / roofline_ms),
        **{f"sweep_b{b}": v[0] / v[1] for b, v in sweep.items()},
    }
    report["ratios"] = ratios
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if quick else ""
    (out / f"benchmark{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, out / f"benchmark{suffix}.md")
    q.plot_throughput(report, out / f"benchmark{suffix}.png")
    print(f"wrote {out}/benchmark{suffix}.md, .json, .png")
    print("ratios (notebook / transformers speed): " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


def write_markdown(r, path):
    m, st = r["memory"], r["step_breakdown"]
    gib = lambda b: f"{b / 2**30:.2f} GiB"
    lines = [
        f"# Benchmark: notebook engine vs transformers ({r['machine']['name']}, {r['machine']['device']}, "
        f"{r['machine']['threads']} threads, torch {r['machine']['torch']})", "",
        f"Checkpoint: `{r['checkpoint']}` (bf16). Greedy decoding, stop ids disabled, transformers with SDPA "
        "attention; medians of alternating runs in one process. Higher is better except for seconds.", "",
        "| measurement | notebook | transformers | ratio |", "|---|---|---|---|",
    ]
    for key, label, new in [("decode_b1_tokens_per_s", "decode tokens/s, batch 1", r["new_tokens"]["b1"]),
                            ("decode_b16_tokens_per_s", "decode tokens/s, batch 16", r["new_tokens"]["b16"])]:
        v = r[key]
        lines.append(f"| {label} ({new} new tokens) | {v['notebook']:.2f} | {v['transformers']:.2f} | "
                     f"**{v['notebook'] / v['transformers']:.2f}x** |")
    for b, v in r["sweep_tokens_per_s"].items():
        lines.append(f"| sweep: decode tokens/s, batch {b} | {v['notebook']:.2f} | {v['transformers']:.2f} | "
                     f"{v['notebook'] / v['transformers']:.2f}x |")
    pf = r["prefill_seconds"]
    lines.append(f"| prefill seconds, {r['prefill_tokens']}-token prompt | {pf['notebook']:.2f} | {pf['transformers']:.2f} | "
                 f"**{pf['transformers'] / pf['notebook']:.2f}x** faster |")
    lines += ["", "## Where one decode step's time goes", "",
              "| batch | weight matmuls alone | notebook step | transformers step | memory roofline "
              "| inside a notebook step: weight matmuls / the rest |", "|---|---|---|---|---|---|"]
    for b, s in st.items():
        roof = f"{s['roofline_ms']:.1f} ms" if "roofline_ms" in s else "-"
        inside = (f"{s['notebook_products_inside_step_ms']:.1f} / "
                  f"{s['notebook_step_same_run_ms'] - s['notebook_products_inside_step_ms']:.1f} ms"
                  if "notebook_products_inside_step_ms" in s else "-")
        lines.append(f"| {b} | {s['weight_matmul_floor_ms']:.1f} ms | {s['notebook_ms']:.1f} ms | "
                     f"{s['transformers_ms']:.1f} ms | {roof} | {inside} |")
    lines += ["", f"Memory-read bandwidth {r['bandwidth_gb_s']:.1f} GB/s; one batch-1 step reads "
              f"{r['weight_bytes_per_step'] / 1e9:.2f} GB of weights plus the KV cache, so the roofline is "
              f"{r['roofline_b1_ms']:.1f} ms per token ({r['roofline_b1_tokens_per_s']:.1f} tokens/s); the notebook "
              f"reaches **{r['ratios']['b1_vs_roofline']:.0%}** of it. The last column times `linear` call by call "
              "inside a few real decode steps (a separate, shorter generation): what is not weight products is the "
              "norms, RoPE, attention over the cache, sampling and the Python around them.", "",
              "## Memory (separate process, notebook engine only: load + batch-1 generation of 512 tokens "
              "after a 32-token prompt)", "",
              f"- peak RSS growth over `import torch`: {gib(m['rss_growth'])}",
              f"- budget: checkpoint files {gib(m['checkpoint_file_bytes'])} + KV cache {gib(m['kv_cache_bytes'])} "
              f"+ 300 MiB = {gib(m['budget_bytes'])} -> {'within' if m['rss_growth'] <= m['budget_bytes'] else 'OVER'} budget"]
    if m.get("cuda_peak_allocated"):
        lines.append(f"- CUDA peak allocated: {gib(m['cuda_peak_allocated'])}")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

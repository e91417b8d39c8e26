"""Side-by-side benchmark: the notebook engine vs transformers, same machine, same checkpoint, one run.

    python3 benchmarks/benchmark.py            # full run (25+ minutes on 2 CPU cores)
    python3 benchmarks/benchmark.py --quick    # a smoke run on tiny models (seconds)
    python3 benchmarks/benchmark.py --no-moe   # without the mixture-of-experts rows
    python3 benchmarks/benchmark.py --dtype bfloat16   # the notebook in bf16 (default auto: what a reader gets)
    python3 benchmarks/benchmark.py --compile on   # + the compiled decode step (default: on CUDA only)
    python3 benchmarks/benchmark.py --only-qwen35  # only the Qwen3.5 rows (docs/benchmark-qwen35.*)
    python3 benchmarks/benchmark.py --only-speculation  # only speculate=4 vs plain (a few minutes)
    python3 benchmarks/benchmark.py --only-core --cpu-kind avx2   # decode b1/b16, prefill 512/4,096 vs transformers
    python3 benchmarks/benchmark.py --llama-cpp DIR    # + llama.cpp columns (llama-cpp-python, DIR: its converter)
    python3 benchmarks/benchmark.py --cpu-kind avx2    # the whole run as an AVX2-only CPU (benchmarks/cpu_kind.py)

Uses QWEN3_MODEL_DIR when set, else builds (once, cached in .cache/) a random-weight checkpoint with
the exact Qwen3-0.6B shapes in the published layout; the MoE rows use a random checkpoint with the
Qwen3-30B-A3B layer shapes but 4 of its 48 layers (6 GB, built once); the Qwen3.5 rows one with the
exact Qwen3.5-0.8B text-model shapes (built once), where transformers runs its pure-PyTorch Gated
DeltaNet (flash-linear-attention is a GPU package), so the notebook is also compared with its own
Qwen3-0.6B figures, measured in the same runs. Both engines decode greedily
with stop ids disabled, so they produce the same number of tokens; transformers uses its default
SDPA attention, in the notebook's dtype. The notebook runs as it would for a reader (QWEN3_DTYPE=auto unless
--dtype says otherwise: bf16 where the device multiplies it natively, else float32; each kind of weight's own
product), once more with QWEN3_QUANT=int8 and int4, and (with --compile on,
the default on CUDA) each of the three once more with QWEN3_COMPILE=on: the static decode step compiled, on CUDA
replayed as a CUDA graph, in "compiled" columns of the decode rows (each shape compiled in an untimed run first).
A batch-1 row after a 4,096-token prompt compares unquantized decoding (eager, compiled, llama.cpp) at a long context.
The kind of weight every load made (each engine, each memory probe) is recorded in the report. Both unquantized and int8 also
decode three chat prompts at batch 1 with speculate=4 (prompt lookup, guess and check) against plain. Writes
docs/benchmark.md, docs/benchmark.json and docs/benchmark.png (with the machine they came from), and
prints the ratios (notebook / transformers) on its last line. Every table and JSON names the CPU kind it ran as
(--cpu-kind: torch capped to AVX2, or to AVX-512 without bf16, in this process and every one it starts).
"""

import argparse
import ctypes
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_kind  # noqa: E402

cpu_kind.apply()  # --cpu-kind: torch's caps, set before torch is imported (here and in every subprocess)
# The notebook sets this before it imports torch (2 MB pages for the weights it copies into its own
# tensors); this script imports torch before the notebook's cells run, so it sets it here. It changes
# nothing for transformers, whose weights stay mapped from the checkpoint file.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")  # likewise (the notebook says why); both engines get it
import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_engine import load_engine  # noqa: E402

CHAT_QUESTIONS = ["What is the capital of France?", "Write a haiku about tensors.", "Count from 1 to 10."]
DTYPE = "auto"  # the notebook's QWEN3_DTYPE (--dtype); transformers runs in the dtype the notebook resolved it to


def checkpoint_dir(size):
    if os.environ.get("QWEN3_MODEL_DIR") and size in ("tiny", "0.6B"):
        return Path(os.environ["QWEN3_MODEL_DIR"])
    import make_checkpoint
    return Path(make_checkpoint.cached(ROOT / ".cache" / f"qwen3-{size}-random", size))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prompts(n_rows, n_tokens, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n_rows, n_tokens), generator=g).tolist()


def machine(q):
    """The machine a report came from: the notebook's name for it, and the CPU kind this run emulates."""
    return {"name": q.machine_name(), "device": str(q.device), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "cpu_kind": cpu_kind.describe()}


WEIGHTS = [("bf16", "", "bf16"), ("int8", "_int8", "q8_0"), ("int4", "_int4", "q4_0")]  # name, result key, llama.cpp's
LONG_CONTEXT = 4096  # the long-context decode row: batch 1 after a prompt this long
LOADS = []  # the kind of weight each load of the notebook made, in the order of the loads


def weights_kind(q):
    """What a load made of its layer matrices: the class, its dtype or layout (the rule's choice, not a timing)."""
    w = q.weights.layers[0].qkv_proj
    how = {"Int4Weight": lambda: w.layout, "Int8Weight": lambda: "fused" if q.FUSED_INT8 else "tiles",
           "Bf16Weight": lambda: f"bf16 up to {q.BF16_ROWS} rows, else float32; {str(q.dtype)[6:]} activations"}.get(
        type(w).__name__, lambda: str(q.dtype)[6:])()
    return f"{type(w).__name__} ({how})"


def engine(model_dir, device, **env):
    """The notebook loaded as a reader would, except that the decode step is eager unless env says
    QWEN3_COMPILE=on (the "compiled" column): on CUDA, QWEN3_COMPILE=auto would compile every engine."""
    q = load_engine(model_dir, device=device, dtype=DTYPE, tags=("plots",),  # + the notebook's measures
                    **{"QWEN3_COMPILE": "off", **env})
    compiled = " compiled" if env.get("QWEN3_COMPILE") == "on" else ""
    LOADS.append({"load": f"{model_dir.name} {env.get('QWEN3_QUANT', 'none')}{compiled}", "weights": weights_kind(q)})
    q.config = dataclasses.replace(q.config, stop_ids=())  # EOS disabled: fixed-length generations
    return q


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


def measure(name, candidates, n_runs):
    """candidates {label: fn() -> number}: alternating runs (drifts in machine load hit all), medians."""
    runs = {label: [] for label in candidates}
    for r in range(n_runs):
        for label, fn in candidates.items():
            runs[label].append(fn())
        print(f"  {name} run {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in runs.items()), flush=True)
    return {label: statistics.median(v) for label, v in runs.items()}


def speculation(q, new_tokens, runs, k=4):
    """Batch-1 greedy decoding with speculate=k vs plain, on the chat prompts, runs taking turns:
    {question: tokens per forward pass, tokens/s of each (medians), whether the tokens are the same}."""
    rows = {}
    for question in CHAT_QUESTIONS:
        prompt = q.encode(q.render_chat([{"role": "user", "content": question}]))
        runs_of = {0: [], k: []}
        for _ in range(runs):
            for s in runs_of:
                runs_of[s].append(q.generate([prompt], new_tokens, speculate=s))
        plain, guessed = runs_of[0], runs_of[k]
        row = {"tokens_per_pass": (new_tokens - 1) / guessed[0].forward_passes,
               "plain_tokens_per_s": statistics.median(r.decode_tokens_per_second for r in plain),
               "speculate_tokens_per_s": statistics.median(r.decode_tokens_per_second for r in guessed),
               "same_tokens": all(r.tokens == plain[0].tokens for r in plain + guessed)}
        row["ratio"] = row["speculate_tokens_per_s"] / row["plain_tokens_per_s"]
        print(f"  speculate={k} vs plain, {question!r}: {row['tokens_per_pass']:.2f} tokens per pass, "
              f"{row['plain_tokens_per_s']:.2f} -> {row['speculate_tokens_per_s']:.2f} tokens/s ({row['ratio']:.2f}x), "
              f"same tokens {row['same_tokens']}", flush=True)
        rows[question] = row
    return rows


def time_inside_step(q, rows, new_tokens, function):
    """(ms per decode step, ms of it inside the notebook's `function`) from a real generation, the
    function timed call by call (CPU only: on a GPU a sync per call would change what is measured)."""
    real, calls = q._module.__dict__[function], []
    kinds = [v for v in q._module.__dict__.values() if isinstance(v, type) and issubclass(v, q.LayerWeights)]
    parts = [(kind, part) for kind in kinds for part in ("mixer", "feed_forward")  # a layer's own parts hold
             if getattr(kind.__dict__.get(part), "__func__", None) is real]        # the function itself

    def timed(x, *args):
        t0 = time.perf_counter()
        out = real(x, *args)
        calls.append((x.dim() == 2, x.dim() == 2 or x.shape[1] == 1, time.perf_counter() - t0))
        return out
    q._module.__dict__[function] = timed
    for kind, part in parts:
        setattr(kind, part, staticmethod(timed))
    try:
        r = q.generate(rows, new_tokens)
    finally:
        q._module.__dict__[function] = real
        for kind, part in parts:
            setattr(kind, part, staticmethod(real))
    first_head = next((i for i, c in enumerate(calls) if c[0]), None)  # lm_head after the prefill: not a decode step
    decode = [dt for i, (_, one_token, dt) in enumerate(calls) if one_token and i != first_head]
    return 1000 * len(rows) / r.decode_tokens_per_second, 1000 * sum(decode) / (new_tokens - 1)


def memory_probe(model_dir, device_name, prompt_len, new_tokens, quant):
    """Run in a separate process: RSS growth over loading + one batch-1 generation, only our engine."""
    import torch  # noqa: F811  (the baseline is "right after import torch")

    def status(key):  # VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork + exec
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
    base = status("VmRSS")
    q = load_engine(model_dir, device=device_name, dtype=DTYPE, QWEN3_QUANT=quant)
    q.config = dataclasses.replace(q.config, stop_ids=())
    q.generate(prompts(1, prompt_len, q.tokenizer.get_vocab_size()), new_tokens)
    peak = status("VmHWM")
    cuda_peak = torch.cuda.max_memory_allocated() if q.device.type == "cuda" else None
    return {"rss_after_import_torch": base, "peak_rss": peak, "rss_growth": peak - base, "weights": weights_kind(q),
            "cuda_peak_allocated": cuda_peak, "kv_cache_bytes": (prompt_len + new_tokens) * q.kv_bytes_per_token(),
            "weight_bytes": q.stored_bytes()}


def run_memory_probe(model_dir, device, new_tokens, quant):
    probe = subprocess.run([sys.executable, __file__, "--memory-probe", str(model_dir), device, "32",
                            str(new_tokens), quant, DTYPE], capture_output=True, text=True)
    if probe.returncode:
        sys.exit(f"memory probe failed:\n{probe.stderr[-3000:]}")
    memory = json.loads(probe.stdout.strip().splitlines()[-1])
    memory["checkpoint_file_bytes"] = sum(f.stat().st_size for f in Path(model_dir).glob("*.safetensors"))
    memory["budget_bytes"] = memory["checkpoint_file_bytes"] + memory["kv_cache_bytes"] + 300 * 2 ** 20
    LOADS.append({"load": f"{Path(model_dir).name} {quant} (memory probe)", "weights": memory["weights"]})
    return memory


def llama_cpp_engines(model_dir, llama_dir, quick, float32=False):
    """({label: fn(rows, new_tokens) -> (tokens/s, prefill seconds)} for llama.cpp's bf16 / q8_0 / q4_0 GGUFs of
    model_dir (and f32, for a notebook in float32), made by llama.cpp's own converter and quantizer (cached in
    .cache/gguf/), or {}; and why not."""
    try:
        import llama_cpp
    except ImportError:
        return {}, "llama-cpp-python is not installed (pip install llama-cpp-python gguf)"
    converter = Path(llama_dir or "") / "convert_hf_to_gguf.py"
    if not llama_dir or not converter.is_file():
        return {}, ("no llama.cpp converter: give --llama-cpp DIR (or LLAMA_CPP_DIR), a llama.cpp source tree with "
                    "convert_hf_to_gguf.py, e.g. llama-cpp-python's source package's vendor/llama.cpp")
    if quick:
        return {}, "--quick: tiny models"
    out = ROOT / ".cache" / "gguf" / model_dir.name
    ggufs = {kind: out / f"{kind}.gguf" for kind in ("bf16", "q8_0", "q4_0", *(("f32",) if float32 else ()))}
    made_after = max(f.stat().st_mtime for f in model_dir.iterdir())  # a rebuilt checkpoint: new GGUFs
    if not all(f.exists() and f.stat().st_mtime > made_after for f in ggufs.values()):
        # the random checkpoints carry a small test tokenizer that the converter does not know: it gets the real
        # Qwen vocabulary instead (tests/real_vocab.py; the benchmark feeds token ids, so only the sizes matter)
        sys.path.insert(0, str(ROOT / "tests"))
        from real_vocab import build_real_tokenizer
        staged = out / "hf"
        staged.mkdir(parents=True, exist_ok=True)
        for f in model_dir.iterdir():
            if f.name != "tokenizer.json" and not (staged / f.name).exists():
                (staged / f.name).symlink_to(f.resolve())
        build_real_tokenizer(staged)
        env = {**os.environ, "PYTHONPATH": str(converter.parent / "gguf-py")}
        for kind in [k for k in ggufs if k != "q4_0"]:
            made = subprocess.run([sys.executable, str(converter), str(staged), "--outtype", kind, "--outfile",
                                   str(ggufs[kind])], capture_output=True, text=True, env=env)
            if made.returncode:
                return {}, f"llama.cpp's converter failed: {made.stderr.strip().splitlines()[-1:]}"
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, torch.get_num_threads()
        if llama_cpp.llama_model_quantize(str(ggufs["bf16"]).encode(), str(ggufs["q4_0"]).encode(), ctypes.byref(params)):
            return {}, "llama.cpp's quantizer failed to make q4_0"

    def decode(llm):
        def run(rows, new_tokens):  # batch 1, greedy; the same timing as ours: tokens after the first
            assert len(rows) == 1
            t0 = time.perf_counter()
            for count, _ in enumerate(llm.generate(rows[0], top_k=1, temp=0.0, reset=True), start=1):
                if count == 1:
                    first = time.perf_counter()
                if count == new_tokens:
                    break
            return (new_tokens - 1) / (time.perf_counter() - first), first - t0
        return run
    llms = {kind: llama_cpp.Llama(str(f), n_threads=torch.get_num_threads(), n_ctx=LONG_CONTEXT + 256, verbose=False)
            for kind, f in ggufs.items()}
    features = " ".join(part.split("=")[0].split(":")[-1].strip() for part in  # "CPU : SSE3 = 1 | AVX = 1 | ..."
                        llama_cpp.llama_print_system_info().decode().split("|") if part.strip().endswith("= 1"))
    return ({f"llama_cpp_{kind}": decode(llm) for kind, llm in llms.items()},
            f"llama-cpp-python {llama_cpp.__version__}, {torch.get_num_threads()} threads, built with: {features}")


def compare(name, engines, rows, new_tokens, runs, index=0):
    """measure() of engines {label: fn(rows, new_tokens) -> (tokens/s, prefill seconds)}; index 1: prefill."""
    return measure(name, {label: (lambda f=f: f(rows, new_tokens)[index]) for label, f in engines.items()}, runs)


def dense_rows(a, device):
    """The dense model: notebook (bf16, int8, int4) vs transformers. -> (report, the bf16 engine)."""
    from transformers import Qwen3ForCausalLM
    quick = a.quick
    model_dir = checkpoint_dir("tiny" if quick else "0.6B")
    n1, n16, n_sweep = (16, 8, 4) if quick else (256, 64, 16)
    prefills = (64,) if quick else (512, 4096)
    runs = 1 if quick else a.runs
    q = engine(model_dir, device)
    q8 = engine(model_dir, device, QWEN3_QUANT="int8")
    q4 = engine(model_dir, device, QWEN3_QUANT="int4")
    qc = {f"notebook{w}_compiled": engine(model_dir, device, QWEN3_COMPILE="on", **({"QWEN3_QUANT": name} if w else {}))
          for name, w, _ in WEIGHTS} if a.compile else {}
    device = q.device
    hf = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=q.dtype, attn_implementation="sdpa").to(device).eval()
    vocab = q.tokenizer.get_vocab_size()
    print(f"device {device}, {q.machine_name()}, CPU kind {cpu_kind.describe()}, checkpoint {model_dir.name}", flush=True)
    for fn in (lambda: ours_decode(q, prompts(1, 32, vocab), 4), lambda: ours_decode(q8, prompts(1, 32, vocab), 4),
               lambda: ours_decode(q4, prompts(1, 32, vocab), 4),
               lambda: hf_decode(hf, prompts(1, 32, vocab), 4, device)):
        fn()  # warm-up: first calls allocate and load kernels

    engines = {"notebook": lambda rows, n: ours_decode(q, rows, n), "notebook_int8": lambda rows, n: ours_decode(q8, rows, n),
               "notebook_int4": lambda rows, n: ours_decode(q4, rows, n),
               "transformers": lambda rows, n: hf_decode(hf, rows, n, device)}
    compiled = {label: lambda rows, n, e=e: ours_decode(e, rows, n) for label, e in qc.items()}
    llama, llama_note = llama_cpp_engines(model_dir, a.llama_cpp, quick, float32=q.dtype == torch.float32)
    print(f"llama.cpp rows: {llama_note if llama else 'skipped: ' + llama_note}", flush=True)
    for fn in llama.values():
        fn(prompts(1, 32, vocab), 4)  # warm-up
    results = {}
    for batch, new in [(1, n1), (16, n16)]:
        rows = prompts(batch, 32, vocab, seed=batch)
        for e in qc.values():
            ours_decode(e, rows, new)  # compiles this batch size and cache length (untimed); the runs reuse it
        results[f"decode_b{batch}"] = compare(f"decode tokens/s, batch {batch}, {new} new tokens",
                                              engines | compiled | (llama if batch == 1 else {}), rows, new, runs)
    if not quick:  # batch 1 again after a 4,096-token prompt: attention reads 4,096 cached keys a step
        rows, long_engines = prompts(1, LONG_CONTEXT, vocab, seed=7), {
            k: f for k, f in (engines | compiled | llama).items()
            if k in ("notebook", "notebook_compiled", "llama_cpp_bf16", "llama_cpp_f32")}
        if "notebook_compiled" in compiled:
            try:
                compiled["notebook_compiled"](rows, 8)  # compiles the long cache's shapes (untimed)
            except MemoryError as e:  # beside every other engine of this run (2 copies of its weights)
                print(f"long-context compiled row skipped: {e}", flush=True)
                long_engines.pop("notebook_compiled")
        results["decode_b1_long"] = compare(f"decode tokens/s, batch 1 after a {LONG_CONTEXT}-token prompt, 32 new tokens",
                                            long_engines, rows, 32, 2)
    sweep = {1: results["decode_b1"], 16: results["decode_b16"]} if not quick else {}
    for batch in tqdm((1, 4, 16, 64), desc="batch-size sweep", unit="batch size"):
        if batch not in sweep:
            rows = prompts(batch, 32, vocab, seed=batch)
            sweep[batch] = compare(f"decode tokens/s, batch {batch}, {n_sweep} new tokens",
                                   {k: f for k, f in engines.items() if k in ("notebook", "transformers")}, rows, n_sweep, 1)
    for n in prefills:
        long_prompt = prompts(1, n, vocab, seed=n)
        results[f"prefill_{n}_seconds"] = compare(f"prefill seconds, {n}-token prompt", engines, long_prompt, 2,
                                                  runs if n <= 512 else 1, index=1)

    n_guess = 16 if quick else a.speculate_tokens
    guess = {"k": 4, "new_tokens": n_guess, "bf16": speculation(q, n_guess, runs), "int8": speculation(q8, n_guess, runs)}

    # where the time goes in one decode step: the notebook's own live measures
    live = {b: q.measure_machine(batch=b) for b in (1, 16)}
    live8, live4 = q8.measure_machine(batch=1), q4.measure_machine(batch=1)
    steps = {}
    for batch in (1, 16):
        speeds = results[f"decode_b{batch}"]
        steps[batch] = {"weight_matmul_floor_ms": live[batch]["products_ms"], "notebook_ms": 1000 * batch / speeds["notebook"],
                        "notebook_int8_ms": 1000 * batch / speeds["notebook_int8"],
                        "notebook_int4_ms": 1000 * batch / speeds["notebook_int4"],
                        "transformers_ms": 1000 * batch / speeds["transformers"]}
    steps[1]["roofline_ms"] = live[1]["roofline_ms"]
    if device.type == "cpu":
        for batch, new in [(1, 8 if quick else 32), (16, 4 if quick else 8)]:
            step_ms, inside_ms = time_inside_step(q, prompts(batch, 32, vocab, seed=batch), new, "linear")
            steps[batch]["notebook_products_inside_step_ms"] = inside_ms
            steps[batch]["notebook_step_same_run_ms"] = step_ms

    new_tokens = 64 if quick else 512
    memory = {quant: run_memory_probe(model_dir, a.device, new_tokens, quant) for quant in ("none", "int8", "int4")}
    report = {
        "checkpoint": model_dir.name, "dtype": str(q.dtype)[6:], "weights": weights_kind(q), "weights_int8": weights_kind(q8),
        "weights_int4": weights_kind(q4),
        "machine": machine(q) | {"quick": quick}, "date": time.strftime("%Y-%m-%d"),
        "decode_b1_tokens_per_s": results["decode_b1"], "decode_b16_tokens_per_s": results["decode_b16"],
        "sweep_tokens_per_s": {str(b): v for b, v in sorted(sweep.items())},
        "prefill_seconds": {str(n): results[f"prefill_{n}_seconds"] for n in prefills},
        "new_tokens": {"b1": n1, "b16": n16, "sweep": n_sweep}, "llama_cpp": llama_note if llama else "skipped: " + llama_note,
        "bandwidth_gb_s": live[1]["bandwidth_gb_s"], "weight_bytes_per_step": live[1]["weight_bytes"],
        "weight_bytes_per_step_int8": live8["weight_bytes"], "weight_bytes_per_step_int4": live4["weight_bytes"],
        "roofline_b1_ms": live[1]["roofline_ms"], "roofline_b1_int4_tokens_per_s": 1000 / live4["roofline_ms"],
        "roofline_b1_tokens_per_s": 1000 / live[1]["roofline_ms"], "roofline_b1_int8_tokens_per_s": 1000 / live8["roofline_ms"],
        "kv_bytes_per_token": q.kv_bytes_per_token(), "step_breakdown": {str(b): v for b, v in steps.items()},
        "memory": memory, "memory_new_tokens": new_tokens, "speculation": guess,
    }
    if "decode_b1_long" in results:
        report["decode_b1_long_tokens_per_s"], report["long_context"] = results["decode_b1_long"], LONG_CONTEXT
    report["compile_seconds"] = {name: {f"batch {k[0]}, cache {k[1]}, {k[-1]} slots read": v
                                        for k, v in qc[f"notebook{w}_compiled"].COMPILED["seconds"].items()}
                                 for name, w, _ in WEIGHTS if f"notebook{w}_compiled" in qc}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    q.plot_throughput(report, out / f"benchmark{'-quick' if quick else ''}.png")
    return report, q  # q: the bf16 engine, which the Qwen3.5 rows reuse


def core_rows(a):
    """--only-core: the dense model's decode (batch 1, 16) and prefill (512, 4,096 tokens) rows alone, the notebook
    as a reader loads it against transformers in the notebook's dtype, alternating; prints every run, the medians
    and the ratios (notebook / transformers speed)."""
    from transformers import Qwen3ForCausalLM
    model_dir = checkpoint_dir("tiny" if a.quick else "0.6B")
    q = engine(model_dir, a.device)
    hf = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=q.dtype, attn_implementation="sdpa").to(q.device).eval()
    print(f"{q.machine_name()}, CPU kind {cpu_kind.describe()}, notebook {str(q.dtype)[6:]} ({weights_kind(q)}), "
          f"transformers {str(q.dtype)[6:]}, checkpoint {model_dir.name}", flush=True)
    engines = {"notebook": lambda rows, n: ours_decode(q, rows, n),
               "transformers": lambda rows, n: hf_decode(hf, rows, n, q.device)}
    vocab = q.tokenizer.get_vocab_size()
    for f in engines.values():
        f(prompts(1, 32, vocab), 4), f(prompts(16, 32, vocab), 4)  # warm-up
    lines = []
    for batch, new in [(1, 16 if a.quick else 64), (16, 8 if a.quick else 32)]:
        v = compare(f"decode tokens/s, batch {batch}", engines, prompts(batch, 32, vocab, seed=batch), new, a.runs)
        lines.append(f"decode, batch {batch}: notebook {v['notebook']:.2f}, transformers {v['transformers']:.2f} "
                     f"tokens/s: {v['notebook'] / v['transformers']:.2f}x")
    for n in (64,) if a.quick else (512, 4096):
        v = compare(f"prefill seconds, {n}-token prompt", engines, prompts(1, n, vocab, seed=n), 2,
                    a.runs if n <= 512 else 1, index=1)
        lines.append(f"prefill, {n} tokens: notebook {v['notebook']:.2f} s, transformers {v['transformers']:.2f} s: "
                     f"{v['transformers'] / v['notebook']:.2f}x")
    print("\n".join(lines))


def moe_rows(a, device):
    """Qwen3-30B-A3B's layer shapes, 4 layers: notebook vs transformers, batch 1 / 16 and prefill."""
    from transformers import Qwen3MoeForCausalLM
    quick = a.quick
    model_dir = checkpoint_dir("tiny-moe" if quick else "30B-A3B-4layers")
    n1, n16, n_prefill, runs = (8, 4, 32, 1) if quick else (64, 16, 512, a.runs)
    q = engine(model_dir, device)
    hf = Qwen3MoeForCausalLM.from_pretrained(model_dir, dtype=q.dtype, attn_implementation="sdpa").to(q.device).eval()
    vocab = q.tokenizer.get_vocab_size()
    ours_decode(q, prompts(1, 32, vocab), 4)
    hf_decode(hf, prompts(1, 32, vocab), 4, q.device)
    engines = {"notebook": lambda rows, n: ours_decode(q, rows, n), "transformers": lambda rows, n: hf_decode(hf, rows, n, q.device)}
    results = {}
    for batch, new in [(1, n1), (16, n16)]:
        rows = prompts(batch, 32, vocab, seed=batch)
        results[f"decode_b{batch}"] = compare(f"MoE decode tokens/s, batch {batch}, {new} new tokens", engines, rows, new, runs)
    long_prompt = prompts(1, n_prefill, vocab, seed=7)
    results["prefill_seconds"] = compare(f"MoE prefill seconds, {n_prefill}-token prompt", engines, long_prompt, 2, runs,
                                         index=1)
    live = q.measure_machine(batch=1)
    share = {}
    if q.device.type == "cpu":
        step_ms, moe_ms = time_inside_step(q, prompts(1, 32, vocab, seed=1), 16 if not quick else 4, "moe")
        share = {"step_ms": step_ms, "moe_blocks_ms": moe_ms}
    total = q.stored_bytes()
    return {"checkpoint": model_dir.name, "layers": q.config.num_hidden_layers, "experts": q.config.num_experts,
            "experts_per_token": q.config.num_experts_per_tok, "weights": weights_kind(q),
            "decode_b1_tokens_per_s": results["decode_b1"], "decode_b16_tokens_per_s": results["decode_b16"],
            "prefill_seconds": results["prefill_seconds"], "prefill_tokens": n_prefill,
            "new_tokens": {"b1": n1, "b16": n16}, "weight_bytes_total": total,
            "weight_bytes_per_step_b1": live["weight_bytes"], "lm_head_bytes": q.nbytes(q.weights.lm_head),
            "roofline_b1_ms": live["roofline_ms"], "step_share": share}


def qwen35_rows(a, device, q3=None):
    """Qwen3.5-0.8B's shapes: the notebook vs transformers, and vs the notebook on Qwen3-0.6B (q3: that engine
    when dense_rows has loaded it), alternating."""
    from transformers import AutoModelForCausalLM
    quick = a.quick
    model_dir, qwen3_dir = checkpoint_dir("tiny-qwen3.5" if quick else "qwen3.5-0.8B"), checkpoint_dir("tiny" if quick else "0.6B")
    n1, n_prefill, runs = (8, 64, 1) if quick else (64, 512, a.runs)
    q, q3 = engine(model_dir, device), q3 or engine(qwen3_dir, device)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=q.dtype, attn_implementation="sdpa").to(q.device).eval()
    vocab = min(q.tokenizer.get_vocab_size(), q3.tokenizer.get_vocab_size())
    engines = {"notebook": lambda rows, n: ours_decode(q, rows, n), "transformers": lambda rows, n: hf_decode(hf, rows, n, q.device),
               "notebook_qwen3": lambda rows, n: ours_decode(q3, rows, n)}
    for f in engines.values():
        f(prompts(1, 32, vocab), 4)  # warm-up
    decode = compare(f"Qwen3.5 decode tokens/s, batch 1, {n1} new tokens", engines, prompts(1, 32, vocab, seed=1), n1, runs)
    prefill = compare(f"Qwen3.5 prefill seconds, {n_prefill}-token prompt", engines, prompts(1, n_prefill, vocab, seed=7), 2,
                      runs, index=1)
    return {"checkpoint": model_dir.name, "qwen3_checkpoint": qwen3_dir.name, "weights": weights_kind(q),
            "machine": machine(q) | {"quick": quick},
            "decode_b1_tokens_per_s": decode, "prefill_seconds": prefill, "prefill_tokens": n_prefill, "new_tokens": n1,
            "weight_bytes": q.stored_bytes(), "qwen3_weight_bytes": q3.stored_bytes(),
            "kv_bytes_per_token": q.kv_bytes_per_token(), "qwen3_kv_bytes_per_token": q3.kv_bytes_per_token(),
            "state_bytes": q.state_bytes(q.config, q.dtype.itemsize)}


def qwen35_markdown(e):
    d, p = e["decode_b1_tokens_per_s"], e["prefill_seconds"]
    return "\n".join([
        f"## Qwen3.5: `{e['checkpoint']}` (random weights) on {e['machine']['name']}, CPU kind "
        f"{e['machine'].get('cpu_kind', 'native')}", "",
        "transformers runs its pure-PyTorch Gated DeltaNet here (flash-linear-attention is a GPU package), so the "
        f"notebook's own Qwen3-0.6B (`{e['qwen3_checkpoint']}`), measured in the same alternating runs, is the other "
        "reference. Higher is better except for seconds.", "",
        "| measurement | notebook Qwen3.5 | transformers Qwen3.5 | ratio | notebook Qwen3-0.6B | Qwen3.5 / Qwen3 |",
        "|---|---|---|---|---|---|",
        f"| decode tokens/s, batch 1 ({e['new_tokens']} new tokens) | {d['notebook']:.2f} | {d['transformers']:.2f} | "
        f"**{d['notebook'] / d['transformers']:.2f}x** | {d['notebook_qwen3']:.2f} | {d['notebook'] / d['notebook_qwen3']:.2f}x |",
        f"| prefill seconds, {e['prefill_tokens']}-token prompt (ratio: speed) | {p['notebook']:.2f} | {p['transformers']:.2f} | "
        f"**{p['transformers'] / p['notebook']:.2f}x** | {p['notebook_qwen3']:.2f} | {p['notebook_qwen3'] / p['notebook']:.2f}x |", "",
        f"Weights held: {e['weight_bytes'] / 1e9:.2f} GB (Qwen3-0.6B: {e['qwen3_weight_bytes'] / 1e9:.2f} GB). Cache: "
        f"{e['kv_bytes_per_token'] / 1024:.0f} KiB per token plus a fixed {e['state_bytes'] / 2**20:.1f} MiB per sequence "
        f"(Qwen3-0.6B: {e['qwen3_kv_bytes_per_token'] / 1024:.0f} KiB per token). Weights: {e['weights']}."]) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny models, few tokens: checks the script runs")
    p.add_argument("--no-moe", action="store_true", help="skip the mixture-of-experts rows")
    p.add_argument("--no-qwen35", action="store_true", help="skip the Qwen3.5 rows")
    p.add_argument("--only-qwen35", action="store_true", help="only the Qwen3.5 rows: docs/benchmark-qwen35.md, .json")
    p.add_argument("--device", default=os.environ.get("QWEN3_DEVICE", "auto"))
    p.add_argument("--runs", type=int, default=3, help="alternating runs per measurement (medians)")
    p.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                   help="also time the compiled decode step (QWEN3_COMPILE=on); auto: on CUDA only")
    p.add_argument("--out", default=str(ROOT / "docs"))
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"],
                   help="the notebook's QWEN3_DTYPE (auto: as a reader gets it); transformers runs in the same dtype")
    p.add_argument("--speculate-tokens", type=int, default=128, help="new tokens per speculate=4 vs plain run")
    p.add_argument("--only-core", action="store_true",
                   help="only decode at batch 1 and 16 and prefill of 512 and 4,096 tokens, notebook vs transformers "
                        "(prints them, every run and the medians; writes nothing)")
    p.add_argument("--only-speculation", action="store_true",
                   help="only the speculate=4 vs plain rows, on the dense model (prints them; writes nothing)")
    p.add_argument("--llama-cpp", default=os.environ.get("LLAMA_CPP_DIR"), metavar="DIR",
                   help="a llama.cpp source tree (convert_hf_to_gguf.py): with llama-cpp-python installed, adds llama.cpp "
                        "bf16 / q8_0 / q4_0 columns to the batch-1 decode row (default: $LLAMA_CPP_DIR)")
    cpu_kind.add_argument(p)
    p.add_argument("--memory-probe", nargs=6, metavar=("DIR", "DEVICE", "PROMPT", "NEW", "QUANT", "DTYPE"),
                   help=argparse.SUPPRESS)
    a = p.parse_args()
    global DTYPE
    DTYPE = a.memory_probe[5] if a.memory_probe else a.dtype
    if a.memory_probe:
        d, dev, n_prompt, n_new, quant, _ = a.memory_probe
        print(json.dumps(memory_probe(d, dev, int(n_prompt), int(n_new), quant)))
        return
    torch.set_grad_enabled(False)
    a.compile = a.compile == "on" or a.compile == "auto" and (
        a.device.startswith("cuda") or a.device == "auto" and torch.cuda.is_available())
    out, suffix = Path(a.out), "-quick" if a.quick else ""
    if a.only_qwen35:
        e = qwen35_rows(a, a.device)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"benchmark-qwen35{suffix}.json").write_text(json.dumps(e, indent=2) + "\n")
        (out / f"benchmark-qwen35{suffix}.md").write_text(qwen35_markdown(e))
        print(qwen35_markdown(e))
        return
    if a.only_core:
        return core_rows(a)
    if a.only_speculation:
        model_dir = checkpoint_dir("tiny" if a.quick else "0.6B")
        for label, env in [("bf16", {}), ("int8", {"QWEN3_QUANT": "int8"})]:
            q = engine(model_dir, a.device, **env)
            print(f"{label}: {q.machine_name()}, CPU kind {cpu_kind.describe()}, checkpoint {model_dir.name}", flush=True)
            q.generate([[1, 2, 3]], 4), q.generate([[1, 2, 3]], 8, speculate=4)  # warm-up
            speculation(q, 16 if a.quick else a.speculate_tokens, 1 if a.quick else a.runs)
        return
    report, dense = dense_rows(a, a.device)
    if not a.no_moe:
        report["moe"] = moe_rows(a, a.device)
    if not a.no_qwen35:
        report["qwen35"] = qwen35_rows(a, a.device, dense)
    report["loads"] = LOADS
    ratio = lambda v: v["notebook"] / v["transformers"]
    ratios = {"decode_b1": ratio(report["decode_b1_tokens_per_s"]), "decode_b16": ratio(report["decode_b16_tokens_per_s"]),
              **{f"prefill_{n}": v["transformers"] / v["notebook"] for n, v in report["prefill_seconds"].items()},
              "int8_vs_bf16_decode_b1": report["decode_b1_tokens_per_s"]["notebook_int8"] / report["decode_b1_tokens_per_s"]["notebook"],
              "int4_vs_bf16_decode_b1": report["decode_b1_tokens_per_s"]["notebook_int4"] / report["decode_b1_tokens_per_s"]["notebook"],
              "int4_vs_bf16_rss_growth": report["memory"]["int4"]["rss_growth"] / report["memory"]["none"]["rss_growth"],
              "b1_vs_roofline": report["decode_b1_tokens_per_s"]["notebook"] / report["roofline_b1_tokens_per_s"],
              **{f"sweep_b{b}": ratio(v) for b, v in report["sweep_tokens_per_s"].items()}}
    b1 = report["decode_b1_tokens_per_s"]
    pairs = WEIGHTS + ([("f32", "", "f32")] if "llama_cpp_f32" in b1 else [])  # a float32 notebook vs f32 too
    ratios.update({f"{ours}_vs_llama_cpp_{kind}_decode_b1": b1[f"notebook{w}"] / b1[f"llama_cpp_{kind}"]
                   for ours, w, kind in pairs if f"llama_cpp_{kind}" in b1})
    for b in (1, 16):
        speeds = report[f"decode_b{b}_tokens_per_s"]
        ratios.update({f"{w[1:] + '_' if w else ''}compiled_vs_eager_decode_b{b}":  # bf16: no prefix
                       speeds[f"notebook{w}_compiled"] / speeds[f"notebook{w}"]
                       for _, w, _ in WEIGHTS if f"notebook{w}_compiled" in speeds})
    ratios.update({f"{ours}_compiled_vs_llama_cpp_{kind}_decode_b1": b1[f"notebook{w}_compiled"] / b1[f"llama_cpp_{kind}"]
                   for ours, w, kind in pairs if f"llama_cpp_{kind}" in b1 and f"notebook{w}_compiled" in b1})
    long = report.get("decode_b1_long_tokens_per_s", {})
    ratios.update({f"{ours}_vs_llama_cpp_{kind}_decode_b1_long": long[ours_key] / long[f"llama_cpp_{kind}"]
                   for ours, ours_key in [("eager", "notebook"), ("compiled", "notebook_compiled")]
                   for kind in ("bf16", "f32") if f"llama_cpp_{kind}" in long and ours_key in long})
    ratios.update({f"speculate4_b1_{w}": statistics.geometric_mean([r["ratio"] for r in report["speculation"][w].values()])
                   for w in ("bf16", "int8")})
    if "moe" in report:
        m = report["moe"]
        ratios.update(moe_decode_b1=ratio(m["decode_b1_tokens_per_s"]), moe_decode_b16=ratio(m["decode_b16_tokens_per_s"]),
                      moe_prefill=m["prefill_seconds"]["transformers"] / m["prefill_seconds"]["notebook"])
    if "qwen35" in report:
        e = report["qwen35"]
        ratios.update(qwen35_decode_b1=ratio(e["decode_b1_tokens_per_s"]),
                      qwen35_prefill=e["prefill_seconds"]["transformers"] / e["prefill_seconds"]["notebook"])
    report["ratios"] = ratios
    (out / f"benchmark{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"benchmark{suffix}.md").write_text(markdown(report))
    print(f"wrote {out.name}/benchmark{suffix}.md, .json, .png")
    print("ratios (notebook / transformers speed): " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


def markdown(r):
    m, st = r["memory"], r["step_breakdown"]
    gib = lambda b: f"{b / 2**30:.2f} GiB"
    speed = lambda v, k, lower_better: v["transformers"] / v[k] if lower_better else v[k] / v["transformers"]
    row = lambda label, v, lower_better=False: (
        f"| {label} | {v['notebook']:.2f} | {v['notebook_int8']:.2f} | {v['notebook_int4']:.2f} | {v['transformers']:.2f} | "
        f"**{speed(v, 'notebook', lower_better):.2f}x** | {speed(v, 'notebook_int8', lower_better):.2f}x | "
        f"{speed(v, 'notebook_int4', lower_better):.2f}x |")
    lines = [
        "# Benchmark: notebook engine vs transformers", "",
        f"Machine: **{r['machine']['name']}** ({r['machine']['device']}, torch {r['machine']['torch']}), "
        f"CPU kind **{r['machine']['cpu_kind']}**. "
        f"Checkpoint: `{r['checkpoint']}` (random weights). The notebook in **{r['dtype']}** (`QWEN3_DTYPE={DTYPE}`), "
        f"transformers in the same dtype with SDPA attention. Greedy decoding, stop ids disabled; medians of alternating "
        "runs in one process. Higher is better except for seconds.", "",
        f"Weights as the rule made them (no timing at load): {r['weights']}; int8 {r['weights_int8']}; int4 {r['weights_int4']}.", "",
        f"| measurement | notebook {r['dtype']} | notebook int8 | notebook int4 | transformers | ratio {r['dtype']} | ratio int8 | ratio int4 |",
        "|---|---|---|---|---|---|---|---|",
        row(f"decode tokens/s, batch 1 ({r['new_tokens']['b1']} new tokens)", r["decode_b1_tokens_per_s"]),
        row(f"decode tokens/s, batch 16 ({r['new_tokens']['b16']} new tokens)", r["decode_b16_tokens_per_s"]),
    ]
    for n, v in r["prefill_seconds"].items():
        lines.append(row(f"prefill seconds, {n}-token prompt (ratio: speed)", v, lower_better=True))
    b1 = r["decode_b1_tokens_per_s"]
    if "llama_cpp_bf16" in b1:
        versus = lambda ours, kind: f"{b1[ours]:.2f} / {b1[kind]:.2f} = **{b1[ours] / b1[kind]:.2f}x**"
        lines += ["", f"llama.cpp ({r['llama_cpp']}; GGUFs of the same weights made by llama.cpp's own converter and "
                  "quantizer), batch 1, in the same alternating runs, tokens/s: bf16 "
                  f"{b1['llama_cpp_bf16']:.2f}, q8_0 {b1['llama_cpp_q8_0']:.2f}, q4_0 {b1['llama_cpp_q4_0']:.2f}"
                  + (f", f32 {b1['llama_cpp_f32']:.2f}" if "llama_cpp_f32" in b1 else "") + ". The notebook "
                  f"against it: {r['dtype']} vs bf16 {versus('notebook', 'llama_cpp_bf16')}"
                  + (f", float32 vs f32 {versus('notebook', 'llama_cpp_f32')}" if "llama_cpp_f32" in b1 else "") + ", int8 vs q8_0 "
                  f"{versus('notebook_int8', 'llama_cpp_q8_0')}, int4 vs q4_0 {versus('notebook_int4', 'llama_cpp_q4_0')} "
                  "(llama.cpp's q4_0 keeps its output matrix at 6 bits, q6_K, and its embeddings at 4; ours keeps both at 8)."]
    else:
        lines += ["", f"llama.cpp rows: {r.get('llama_cpp', 'skipped')}."]
    if "notebook_compiled" in r["decode_b1_tokens_per_s"]:
        compiles = "; ".join(f"{name}: " + ", ".join(f"{k} {v:.0f} s" for k, v in c.items())
                             for name, c in r.get("compile_seconds", {}).items())
        lines += ["", "The decode step compiled (`QWEN3_COMPILE=on`: the static step; on a CPU the weights frozen in, on "
                  f"CUDA a CUDA graph), same weights and prompts, tokens/s, eager -> compiled; compile times: {compiles}.", "",
                  f"| measurement | {r['dtype']} | int8 | int4 | transformers | llama.cpp bf16 / q8_0 / q4_0 |",
                  "|---|---|---|---|---|---|"]
        for b in (1, 16):
            v = r[f"decode_b{b}_tokens_per_s"]
            cell = lambda w: (f"{v[f'notebook{w}']:.2f} -> {v[f'notebook{w}_compiled']:.2f} "
                              f"(**{v[f'notebook{w}_compiled'] / v[f'notebook{w}']:.2f}x**)")
            llamas = " / ".join(f"{v[f'llama_cpp_{k}']:.2f}" for _, _, k in WEIGHTS if f"llama_cpp_{k}" in v)
            lines.append(f"| decode, batch {b} ({r['new_tokens'][f'b{b}']} new tokens) | {cell('')} | {cell('_int8')} | "
                         f"{cell('_int4')} | {v['transformers']:.2f} | {llamas or '-'} |")
        if "bf16_compiled_vs_llama_cpp_bf16_decode_b1" in r["ratios"]:
            lines += ["", "Compiled against llama.cpp at batch 1: " + ", ".join(
                f"{ours} vs {kind} **{r['ratios'][f'{ours}_compiled_vs_llama_cpp_{kind}_decode_b1']:.2f}x**"
                for ours, _, kind in WEIGHTS) + "."]
    if "decode_b1_long_tokens_per_s" in r:
        v = r["decode_b1_long_tokens_per_s"]
        lines += ["", f"Batch 1 after a {r['long_context']:,}-token prompt (32 new tokens), tokens/s: "
                  + ", ".join(f"{k.replace('notebook', 'notebook ' + r['dtype'])} {x:.2f}" for k, x in v.items()) + "."]
    lines += ["", f"| decode tokens/s by batch size ({r['new_tokens']['sweep']} new tokens; batch 1 and 16: the rows above) "
              "| notebook | transformers | ratio |",
              "|---|---|---|---|"]
    for b, v in r["sweep_tokens_per_s"].items():
        lines.append(f"| batch {b} | {v['notebook']:.2f} | {v['transformers']:.2f} | {v['notebook'] / v['transformers']:.2f}x |")
    lines += ["", "## Where one decode step's time goes", "",
              "| batch | weight products alone | notebook step | notebook int8 step | notebook int4 step | transformers step "
              "| memory roofline | inside a notebook step: weight products / the rest |", "|---|---|---|---|---|---|---|---|"]
    for b, s in st.items():
        roof = f"{s['roofline_ms']:.1f} ms" if "roofline_ms" in s else "-"
        inside = (f"{s['notebook_products_inside_step_ms']:.1f} / "
                  f"{s['notebook_step_same_run_ms'] - s['notebook_products_inside_step_ms']:.1f} ms"
                  if "notebook_products_inside_step_ms" in s else "-")
        lines.append(f"| {b} | {s['weight_matmul_floor_ms']:.1f} ms | {s['notebook_ms']:.1f} ms | {s['notebook_int8_ms']:.1f} ms | "
                     f"{s['notebook_int4_ms']:.1f} ms | "
                     f"{s['transformers_ms']:.1f} ms | {roof} | {inside} |")
    lines += ["", f"Memory-read bandwidth {r['bandwidth_gb_s']:.1f} GB/s; one batch-1 step reads "
              f"{r['weight_bytes_per_step'] / 1e9:.2f} GB of weights ({r['weight_bytes_per_step_int8'] / 1e9:.2f} GB in int8, "
              f"{r['weight_bytes_per_step_int4'] / 1e9:.2f} GB in int4), "
              f"so the roofline is {r['roofline_b1_ms']:.1f} ms per token ({r['roofline_b1_tokens_per_s']:.1f} tokens/s; "
              f"int8 {r['roofline_b1_int8_tokens_per_s']:.1f}, int4 {r['roofline_b1_int4_tokens_per_s']:.1f}); the notebook reaches **{r['ratios']['b1_vs_roofline']:.0%}** of it."
              , "",
              f"## Guess and check: batch-1 decoding with `speculate={r['speculation']['k']}` vs plain "
              f"({r['speculation']['new_tokens']} new tokens after a chat prompt, greedy). bf16 and int8 products over "
              "K + 1 rows may round differently from one row's, so a near tie can tip the other way (\"same tokens\": no); "
              "in float32 the tokens are the same (tests/test_speculation.py).", "",
              "| prompt | weights | tokens per forward pass | plain tokens/s | speculate tokens/s | ratio | same tokens |",
              "|---|---|---|---|---|---|---|",
              *[f"| {question} | {r['dtype'] if w == 'bf16' else w} | {g['tokens_per_pass']:.2f} | {g['plain_tokens_per_s']:.2f} | "
                f"{g['speculate_tokens_per_s']:.2f} | **{g['ratio']:.2f}x** | {'yes' if g['same_tokens'] else 'no'} |"
                for w in ("bf16", "int8") for question, g in r["speculation"][w].items()], "",
              f"## Memory (separate process, notebook engine only: load + batch-1 generation of {r['memory_new_tokens']} "
              "tokens after a 32-token prompt)", "", "| weights | peak RSS growth over `import torch` | weights held | budget "
              "(checkpoint files + KV cache + 300 MiB) |", "|---|---|---|---|"]
    for quant, mm in m.items():
        lines.append(f"| {r['dtype'] if quant == 'none' else quant} | {gib(mm['rss_growth'])} | {gib(mm['weight_bytes'])} | "
                     f"{gib(mm['budget_bytes'])} ({'within' if mm['rss_growth'] <= mm['budget_bytes'] else 'OVER'}) |")
    lines.append(f"\nint8 / {r['dtype']} peak RSS growth: {m['int8']['rss_growth'] / m['none']['rss_growth']:.2f}; "
                 f"int4 / {r['dtype']}: {m['int4']['rss_growth'] / m['none']['rss_growth']:.2f}")
    if "moe" in r:
        e = r["moe"]
        lines += ["", f"## Mixture of experts: `{e['checkpoint']}` ({e['layers']} layers, {e['experts']} experts, "
                  f"{e['experts_per_token']} per token)", "",
                  "| measurement | notebook | transformers | ratio |", "|---|---|---|---|"]
        for key, label in [("decode_b1_tokens_per_s", f"decode tokens/s, batch 1 ({e['new_tokens']['b1']} new tokens)"),
                           ("decode_b16_tokens_per_s", f"decode tokens/s, batch 16 ({e['new_tokens']['b16']} new tokens)")]:
            v = e[key]
            lines.append(f"| {label} | {v['notebook']:.2f} | {v['transformers']:.2f} | **{v['notebook'] / v['transformers']:.2f}x** |")
        v = e["prefill_seconds"]
        lines.append(f"| prefill seconds, {e['prefill_tokens']}-token prompt | {v['notebook']:.2f} | {v['transformers']:.2f} | "
                     f"**{v['transformers'] / v['notebook']:.2f}x** faster |")
        share = e["step_share"]
        lines += ["", f"A batch-1 step reads {e['weight_bytes_per_step_b1'] / 1e9:.2f} GB of the {e['weight_bytes_total'] / 1e9:.2f} GB "
                  f"of weights (lm_head alone {e['lm_head_bytes'] / 1e9:.2f} GB: with so few layers it is a large part)"
                  + (f"; the MoE blocks take {share['moe_blocks_ms']:.1f} of the {share['step_ms']:.1f} ms step." if share else ".")]
    if "qwen35" in r:
        lines += ["", qwen35_markdown(r["qwen35"]).rstrip("\n")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

"""What each kind of CPU gets (issue 51): the dtype rule asks what torch will actually run (the CPU's bf16
instructions, and torch's caps below them: ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA). Where there are none,
`auto` computes in float32 and keeps the matrices in bf16 (Bf16Weight), whose product is chosen by the number of
rows: bf16 up to BF16_ROWS, float32 beyond. Everything the rule reads is monkeypatched here: nothing is timed."""

import platform

import pytest
import torch

from conftest import TEST_DEVICE, random_ids
from notebook_engine import load_engine

if TEST_DEVICE != "cpu":
    pytest.skip("the CPU kinds: a CPU's rule", allow_module_level=True)

# (aten's capability, oneDNN's cap, AVX512-BF16, AMX) -> does torch multiply bf16 with bf16 instructions?
X86 = [
    ("AVX512", "", True, False, True),             # Zen 4/5, Xeon with AVX512-BF16
    ("AVX512", "", True, True, True),              # Sapphire Rapids and later (AMX)
    ("AVX512", "", False, True, True),             # AMX alone
    ("AVX512", "", False, False, False),           # Skylake-X, Ice Lake: AVX-512 without bf16
    ("AVX2", "", False, False, False),             # most laptops: AVX2 only
    ("AVX2", "", True, False, False),              # ATEN_CPU_CAPABILITY=avx2 on a bf16 CPU
    ("AVX512", "AVX2", True, True, False),         # ONEDNN_MAX_CPU_ISA=AVX2 on a bf16 CPU
    ("AVX512", "avx2", True, False, False),        # oneDNN reads its cap in any case
    ("AVX512", "AVX512_CORE", True, False, False),  # AVX-512 without bf16 (--cpu-kind avx512)
    ("AVX512", "AVX512_CORE_VNNI", True, False, False),
    ("AVX512", "AVX512_CORE_BF16", True, False, True),  # capped at bf16 or above: still bf16
    ("AVX512", "AVX512_CORE_AMX", True, True, True),
    ("DEFAULT", "", True, False, False),           # ATEN_CPU_CAPABILITY=default
]


@pytest.fixture(scope="module")
def q(checkpoints):
    return load_engine(checkpoints("tiny"), device="cpu", dtype="float32", QWEN3_COMPILE="off")


def as_cpu(monkeypatch, aten="AVX512", onednn="", avx512_bf16=True, amx=False, machine="x86_64"):
    """Make the rule see this CPU: what torch and the environment would say on it."""
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: aten)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    if onednn:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", onednn)
    else:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)


@pytest.mark.parametrize("aten, onednn, avx512_bf16, amx, expected", X86)
def test_the_rule_asks_what_torch_will_run(q, monkeypatch, aten, onednn, avx512_bf16, amx, expected):
    as_cpu(monkeypatch, aten, onednn, avx512_bf16, amx)
    assert q.cpu_multiplies_bf16() == expected
    cpu = torch.device("cpu")
    dtype, weights_as, why = q.pick_dtype("auto", cpu)
    if expected:  # bf16 everywhere
        assert (dtype, weights_as) == (torch.bfloat16, "none")
    else:  # float32 activations and KV cache, bf16 matrices; the settings line says what rounds to bf16
        assert (dtype, weights_as) == (torch.float32, "bf16")
        assert f"up to {q.BF16_ROWS} rows" in why and "rounded to bf16" in why and "QWEN3_DTYPE=float32" in why
    for quant in ("int8", "int4"):  # aten's int8/int4 kernels take bf16 activations on any CPU
        assert q.pick_dtype("auto", cpu, quant)[:2] == (torch.bfloat16, quant)
    assert q.pick_dtype("float32", cpu)[:2] == (torch.float32, "none")  # float32 weights, as set
    assert q.pick_dtype("bfloat16", cpu)[:2] == (torch.bfloat16, "none")


def test_gpus_keep_their_rule(q, monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))  # a T4
    assert q.pick_dtype("auto", cuda)[:2] == (torch.float32, "none")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # an A100
    assert q.pick_dtype("auto", cuda)[:2] == (torch.bfloat16, "none")


def test_which_product_at_which_number_of_rows(q, monkeypatch):
    """Up to BF16_ROWS rows the product is bf16's (the input rounded to bf16, exactly what torch's bf16 product
    gives); beyond, float32's on the widened weight, in tiles. A decode step of batch 1 to 5 and a speculation
    chunk of 5 rows (speculate=4) are the first, a batch of 16 the second: BF16_ROWS = 5 is the crossover
    measured under the AVX2 caps and AVX-512 without bf16 (docs/performance.md), pinned so that a change is a
    decision."""
    assert q.BF16_ROWS == 5
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(600, 64, generator=g) * 0.1).bfloat16()  # more rows than one tile of 256
    weight = q.Bf16Weight(w)
    tiles = []
    real = q.matmul_tiles
    monkeypatch.setitem(q._module.__dict__, "matmul_tiles", lambda x, m: tiles.append(len(x)) or real(x, m))
    for rows in (1, 2, 4, 5, 6, 8, 16, 64, 512):
        x = torch.randn(rows, 64, generator=g)
        out = q.linear(x, weight)
        assert out.dtype == torch.float32 and out.shape == (rows, 600)
        if rows <= q.BF16_ROWS:
            assert torch.equal(out, (x.bfloat16() @ w.T).float()), rows
        else:
            torch.testing.assert_close(out, x @ w.float().T, atol=1e-5, rtol=1e-5)
            assert not torch.equal(out, (x.bfloat16() @ w.T).float()), rows  # x was not rounded to bf16
    assert tiles == [6, 8, 16, 64, 512]
    x = torch.randn(2, 3, 64, generator=g)  # (B, T, in): rows are B * T = 6
    assert torch.allclose(q.linear(x, weight), x @ w.float().T, atol=1e-5) and tiles[-1] == 6


def test_a_load_on_a_cpu_without_bf16_products(checkpoints, reference, monkeypatch):
    """Under `auto` on such a CPU: float32 activations and KV cache, every matrix (the embedding table and tied
    lm_head too) a Bf16Weight holding the checkpoint's bf16 values (half float32's bytes), norms in float32;
    QWEN3_DTYPE=float32 keeps float32 weights, whose logits equal transformers' to 1e-4."""
    as_cpu(monkeypatch, aten="AVX2", avx512_bf16=False)
    q = load_engine(checkpoints("tiny"), device="cpu", dtype="auto", QWEN3_COMPILE="off")
    layer = q.weights.layers[0]
    assert q.dtype == torch.float32 and q.weights_as == "bf16"
    for m in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj, q.weights.embed_tokens):
        assert isinstance(m, q.Bf16Weight) and m.w.dtype == torch.bfloat16
    assert q.weights.lm_head is q.weights.embed_tokens
    assert layer.input_layernorm.dtype == torch.float32 and layer.qk_norm.dtype == torch.float32
    assert q.make_cache(1, 8).k.dtype == torch.float32
    f32 = load_engine(checkpoints("tiny"), device="cpu", dtype="float32", QWEN3_COMPILE="off")
    assert isinstance(f32.weights.layers[0].qkv_proj, torch.Tensor) and f32.weights.layers[0].qkv_proj.dtype == torch.float32
    assert torch.equal(layer.qkv_proj.dequantize(torch.float32), f32.weights.layers[0].qkv_proj)  # bf16 files
    assert 2 * q.stored_bytes() - f32.stored_bytes() < 0.01 * f32.stored_bytes()  # matrices at half the bytes
    ids = random_ids(2, 9, seed=51)
    assert torch.equal(q.embed(ids), f32.embed(ids))  # the lookup gives float32 rows
    # more than BF16_ROWS rows: float32 products, so the logits are float32's
    torch.testing.assert_close(q.forward(ids), f32.forward(ids), atol=1e-5, rtol=0)
    torch.testing.assert_close(f32.forward(ids), reference()(ids).logits, atol=1e-4, rtol=0)


def rounded_reference(model):
    """transformers' model with every weight product's input and output rounded to bf16, as a product of up to
    BF16_ROWS rows rounds them (a context manager, via forward hooks on its nn.Linear modules)."""
    from contextlib import ExitStack
    stack = ExitStack()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            stack.callback(module.register_forward_pre_hook(
                lambda m, args: (args[0].bfloat16().float(),)).remove)
            stack.callback(module.register_forward_hook(lambda m, args, out: out.bfloat16().float()).remove)
    return stack


def test_bf16_weights_decode_close_to_transformers(checkpoints, reference, monkeypatch):
    """Decode steps (one row: bf16 products) against transformers in float32 on the same bf16-valued weights.
    The tolerance is what bf16 rounding of one-row products does: transformers' own logits, with every weight
    product's input and output rounded to bf16, move by `moved` from its float32 ones; ours may differ by
    that, plus the same again (their products round where ours may not: an accumulation in another order
    lands on the other side of a bf16 rounding boundary). Greedy tokens equal transformers' wherever its top
    two logits are further apart than that tolerance (elsewhere a near tie may go either way)."""
    as_cpu(monkeypatch, aten="AVX2", avx512_bf16=False)
    q = load_engine(checkpoints("tiny"), device="cpu", dtype="auto", QWEN3_COMPILE="off")
    monkeypatch.undo()
    model = reference()
    prompt, new = random_ids(1, 12, seed=52), 24
    tokens = torch.tensor([q.generate(prompt.tolist(), new).tokens[0]])
    sequence = torch.cat([prompt, tokens], dim=1)
    cache = q.make_cache(1, sequence.shape[1])
    q.forward(prompt, cache)  # 12 rows: float32
    ours = torch.cat([q.forward(sequence[:, p:p + 1], cache, p)[:, -1] for p in range(12, sequence.shape[1])])
    theirs = model(sequence).logits[0, 11:-1]  # the logits each decode step's input gives (position p predicts p+1)
    ours = torch.cat([q.forward(prompt)[:, -1], ours[:-1]])  # the prompt's last position, then each step's
    with rounded_reference(model):
        moved = (model(sequence).logits[0, 11:-1] - theirs).abs().max().item()
    assert moved > 1e-3  # bf16 rounding moves the logits far past float32's 1e-5: the comparison means something
    tolerance = 2 * moved
    assert (ours - theirs).abs().max().item() <= tolerance, ((ours - theirs).abs().max().item(), tolerance)
    top2 = theirs.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * tolerance  # their choice is clear at these steps
    assert clear.sum() >= len(clear) // 4, clear  # enough steps: the test checks tokens, not only near ties
    assert torch.equal(sequence[0, 12:][clear], theirs.argmax(-1)[clear])


@pytest.mark.parametrize("quant, kind", [("int8", "Int8Weight"), ("int4", "Int4Weight")])
def test_int8_and_int4_keep_working_without_bf16_products(checkpoints, reference, monkeypatch, quant, kind):
    """QWEN3_QUANT on such a CPU: bf16 activations (aten's int8/int4 kernels take them fast on any CPU) and the
    quantized weights, computing exactly what QWEN3_DTYPE=bfloat16 computes (whose accuracy against
    transformers tests/test_int8.py and test_int4.py check)."""
    as_cpu(monkeypatch, aten="AVX2", avx512_bf16=False)
    q = load_engine(checkpoints("tiny"), device="cpu", dtype="auto", QWEN3_QUANT=quant, QWEN3_COMPILE="off")
    monkeypatch.undo()
    assert q.dtype == torch.bfloat16 and q.weights_as == quant
    assert type(q.weights.layers[0].qkv_proj).__name__ == kind
    as_set = load_engine(checkpoints("tiny"), device="cpu", dtype="bfloat16", QWEN3_QUANT=quant, QWEN3_COMPILE="off")
    ids = random_ids(1, 10, seed=53)
    assert torch.equal(q.forward(ids), as_set.forward(ids))
    assert q.generate(ids.tolist(), 6).tokens == as_set.generate(ids.tolist(), 6).tokens

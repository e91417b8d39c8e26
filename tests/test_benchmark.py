"""The benchmark script runs end to end (on the tiny checkpoint) and reports what docs/performance.md promises.
Speed is never asserted here: the numbers come from `python3 benchmarks/benchmark.py` on a quiet machine."""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_DEVICE

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK = str(ROOT / "benchmarks" / "benchmark.py")


def test_quick_benchmark_writes_its_report(tmp_path):
    run = subprocess.run([sys.executable, BENCHMARK, "--quick", "--out", str(tmp_path),
                          "--device", TEST_DEVICE],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1].startswith("ratios (notebook / transformers speed): decode_b1 ")
    report = json.loads((tmp_path / "benchmark-quick.json").read_text())
    for key in ("decode_b1", "decode_b16", "prefill_64", "int8_vs_bf16_decode_b1", "int4_vs_bf16_decode_b1",
                "int4_vs_bf16_rss_growth", "b1_vs_roofline", "sweep_b1",
                "sweep_b4", "sweep_b16", "sweep_b64", "moe_decode_b1", "moe_decode_b16", "moe_prefill",
                "speculate4_b1_bf16", "speculate4_b1_int8"):
        assert report["ratios"][key] > 0
    assert report["machine"]["name"] and report["weights"].startswith(("Tensor", "PackedWeight", "Bf16Weight"))
    assert report["machine"]["cpu_kind"] and report["qwen35"]["machine"]["cpu_kind"] == report["machine"]["cpu_kind"]
    assert "/" not in report["checkpoint"]  # no paths of the machine that ran it
    step = report["step_breakdown"]["1"]
    if TEST_DEVICE == "cpu":  # timed call by call on the CPU only (benchmark.py: time_inside_step)
        assert 0 < step["notebook_products_inside_step_ms"] < step["notebook_step_same_run_ms"]
        assert 0 < report["moe"]["step_share"]["moe_blocks_ms"] < report["moe"]["step_share"]["step_ms"]
    assert {"weight_matmul_floor_ms", "notebook_ms", "notebook_int8_ms", "transformers_ms", "roofline_ms"} <= set(step)
    for quant in ("none", "int8", "int4"):
        memory = report["memory"][quant]
        assert memory["rss_growth"] > 0 and memory["budget_bytes"] > memory["checkpoint_file_bytes"]
    assert report["memory"]["int4"]["weight_bytes"] < report["memory"]["int8"]["weight_bytes"] < report["memory"]["none"]["weight_bytes"]
    loads = [x["load"] for x in report["loads"]]  # the weights of every load it made, memory probes included
    # dense unquantized/int8/int4, 3 memory probes, the MoE rows, the Qwen3.5 rows (alternating with the dense engine)
    assert len(loads) == 8 and sum("memory probe" in x for x in loads) == 3
    assert sum("moe" in x for x in loads) == 1 and sum("qwen3.5" in x for x in loads) == 1
    assert all(x["weights"] for x in report["loads"]) and report["weights_int4"].startswith("Int4Weight")
    table = (tmp_path / "benchmark-quick.md").read_text()
    assert "| decode tokens/s, batch 1 (16 new tokens) |" in table and "inside a notebook step" in table
    assert "| tokens per forward pass |" in table and all(  # same tokens: float32 only (tests/test_speculation.py)
        row["tokens_per_pass"] >= 1 for w in ("bf16", "int8") for row in report["speculation"][w].values())
    assert "Machine: **" in table and "Mixture of experts" in table and "llama.cpp" in table
    assert f"CPU kind **{report['machine']['cpu_kind']}**" in table
    assert (tmp_path / "benchmark-quick.png").stat().st_size > 10_000


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64") or TEST_DEVICE != "cpu",
                    reason="the caps are x86's")
def test_cpu_kind_caps_torch_before_it_is_imported(checkpoints):
    """--cpu-kind avx2 sets oneDNN's and aten's caps before torch is imported: torch runs as on an AVX2-only CPU
    in that process and in those it starts (they inherit the environment), the rule sees no bf16 products, and
    the kind is named. The memory probe is such a process of benchmark.py's, run here on its own."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import cpu_kind; kind = cpu_kind.apply(sys.argv[2:]); "
            "import os, torch; print(kind, torch.backends.cpu.get_cpu_capability(), cpu_kind.describe())")
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")}
    said = {kind: subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks"), "--cpu-kind", kind],
                                 capture_output=True, text=True, env=env, check=True).stdout.split(maxsplit=2)
            for kind in ("avx2", "avx512", "native")}
    assert said["avx2"] == ["avx2", "AVX2", "avx2 (torch capped: ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)\n"]
    assert said["avx512"][:2] == ["avx512", "AVX512"] and "ONEDNN_MAX_CPU_ISA=AVX512_CORE" in said["avx512"][2]
    assert said["native"][0] == "native" and said["native"][2] == "native\n"
    probe = subprocess.run([sys.executable, BENCHMARK, "--cpu-kind", "avx2", "--memory-probe", str(checkpoints("tiny")),
                            "cpu", "8", "4", "none", "auto"], capture_output=True, text=True, env=env, timeout=600)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert json.loads(probe.stdout.strip().splitlines()[-1])["weights"].startswith("Bf16Weight")

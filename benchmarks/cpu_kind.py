"""Measure another kind of x86 CPU on this one: `--cpu-kind avx2|avx512|native` caps the instruction sets torch uses.

    python3 benchmarks/benchmark.py --cpu-kind avx2     # torch as on an AVX2-only CPU (most laptops)
    python3 benchmarks/benchmark.py --cpu-kind avx512   # AVX-512 without bf16 instructions
    python3 benchmarks/benchmark.py --cpu-kind native   # no caps (a cap already in the environment is removed)

oneDNN reads ONEDNN_MAX_CPU_ISA and aten ATEN_CPU_CAPABILITY once, when torch first needs them, so a script
calls `apply()` before it imports torch; every process it starts (the memory probe, an engine of its own)
inherits the caps through the environment. Without --cpu-kind nothing is changed and `describe()` names
whatever caps the environment holds. llama.cpp is never capped (its own code, built for this CPU).
How close the emulation is to a real AVX2 CPU: docs/performance.md."""

import os
import sys

CAPS = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
KINDS = {"native": {}, "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
         "avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512"}}


def apply(argv=None):
    """Read --cpu-kind KIND (or --cpu-kind=KIND) from argv, set its caps in os.environ (removing any other);
    -> KIND, or None when argv does not say. Call it before `import torch`."""
    argv = sys.argv if argv is None else argv
    kind = next((a.split("=", 1)[1] for a in argv if a.startswith("--cpu-kind=")), None)
    if "--cpu-kind" in argv[:-1]:
        kind = argv[argv.index("--cpu-kind") + 1]
    if kind is None:
        return None
    if kind not in KINDS:
        sys.exit(f"--cpu-kind {kind!r}: use one of {', '.join(KINDS)}")
    if "torch" in sys.modules:
        sys.exit("--cpu-kind must be applied before torch is imported")
    for name in CAPS:
        os.environ.pop(name, None)
    os.environ.update(KINDS[kind])
    return kind


def describe():
    """The kind this process runs as, for tables: 'native' or e.g. 'avx2 (ONEDNN_MAX_CPU_ISA=AVX2 ...)'."""
    caps = {name: os.environ[name] for name in CAPS if os.environ.get(name)}
    kind = next((k for k, v in KINDS.items() if v == caps), "capped")
    return kind if not caps else f"{kind} (torch capped: " + " ".join(f"{k}={v}" for k, v in caps.items()) + ")"


def add_argument(parser):
    """The --cpu-kind option, for --help (apply() has acted on it already)."""
    parser.add_argument("--cpu-kind", choices=list(KINDS),
                        help="run as this kind of x86 CPU: torch capped to AVX2, or AVX-512 without bf16 "
                             "(benchmarks/cpu_kind.py); default: as the environment says")

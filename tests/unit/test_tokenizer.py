"""The tokenizer on synthetic vocabularies: pre-tokenizer splits, BPE by rank, special tokens,
byte-exact decoding. (Equality with llama.cpp itself is tested in
tests/integration/test_tokenizer_llamacpp.py.)
"""

from __future__ import annotations

import itertools
import random
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.synthetic_vocab import build_vocab, qwen35_pre_tokenizer
from engine.tokenizer import Tokenizer, TokenizerError, byte_decoder

HARD_STRINGS = [
    "",
    "Hello, world! It's a test; we'll see. DON'T SHOUT",
    "café naïve e\u0301cole n\u0303 — “quotes” …",
    "你好，世界！こんにちは 안녕하세요 مرحبا नमस्ते",
    "emoji 😀👍🏽 👨\u200d👩\u200d👧 🇩🇪 ❤️",
    "def f(x):\n\treturn x**2  # square\n\n\n    if a != b:\r\n        pass",
    "   leading and trailing spaces   ",
    "\n\n\n\t\t  \n \r\n",
    "1234567890 3.14159 0xDEADBEEF 1e-7",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|im_start <|im_start| |im_start|> <|IM_START|> <tool_call <think >",
    "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
    "[PAD300] [PAD2000] <|endoftext|><|endoftext|>",
    "\x00\x01\x7f control chars and \ufeff BOM",
]


@cache
def tokenizer(n_vocab: int, seed: int) -> Tokenizer:
    vocab = build_vocab(n_vocab, seed)
    return Tokenizer(vocab.tokens, vocab.token_types, vocab.merges, vocab.eos_id)


VOCABS = [(2048, 0), (4096, 1)]


@pytest.mark.parametrize(("n_vocab", "seed"), VOCABS)
@pytest.mark.parametrize("text", HARD_STRINGS)
def test_decode_of_encode_gives_the_text_back(n_vocab: int, seed: int, text: str) -> None:
    tok = tokenizer(n_vocab, seed)
    for parse_special in (True, False):
        ids = tok.encode(text, parse_special=parse_special)
        assert all(0 <= i < tok.n_vocab for i in ids)
        assert tok.decode(ids) == text


def test_pre_tokenizer_splits_like_the_qwen35_regex() -> None:
    pieces = [p for p, _ in qwen35_pre_tokenizer().pre_tokenize_str("Hi there's 123\n\n  x")]
    # Byte-level mapped: Ġ = space, Ċ = newline. Digits are split one by one; the run of
    # spaces before "x" keeps its last space for the word.
    assert pieces == ["Hi", "Ġthere", "'s", "Ġ", "1", "2", "3", "ĊĊ", "Ġ", "Ġx"]
    marks = [p for p, _ in qwen35_pre_tokenizer().pre_tokenize_str("e\u0301t\u00e9")]
    assert len(marks) == 1  # a combining mark (\p{M}) stays inside the word


def test_bpe_applies_merges_by_rank() -> None:
    vocab = build_vocab(2048, 0)
    tok = tokenizer(2048, 0)
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(vocab.merges)}
    index = {t: i for i, t in enumerate(vocab.tokens)}
    text = "However the engine's state 42 données"
    expected: list[int] = []
    for piece, _ in qwen35_pre_tokenizer().pre_tokenize_str(text):
        parts = list(piece)
        while True:  # textbook BPE: merge the lowest-ranked adjacent pair, leftmost first
            pairs = [
                (ranks.get((a, b), 1 << 30), i)
                for i, (a, b) in enumerate(itertools.pairwise(parts))
            ]
            if not pairs or min(pairs)[0] == 1 << 30:
                break
            _, i = min(pairs)
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        expected += [index[p] for p in parts]
    assert tok.encode(text) == expected


def test_control_tokens_only_with_parse_special_user_defined_always() -> None:
    vocab = build_vocab(2048, 0)
    tok = tokenizer(2048, 0)
    im_start, think = vocab.special["<|im_start|>"], vocab.special["<think>"]
    assert tok.encode("<|im_start|>") == [im_start]
    assert im_start not in tok.encode("<|im_start|>", parse_special=False)
    assert tok.encode("<think>", parse_special=False) == [think]
    assert tok.encode("a<think>b")[1] == think
    # Padding tokens are never matched in text.
    assert vocab.tokens.index("[PAD1800]") not in tok.encode("[PAD1800]")


def test_decode_rules_for_special_padding_and_partial_utf8() -> None:
    vocab = build_vocab(2048, 0)
    tok = tokenizer(2048, 0)
    im_end, pad = vocab.special["<|im_end|>"], vocab.tokens.index("[PAD1800]")
    assert tok.decode([im_end]) == "<|im_end|>"
    assert tok.decode([im_end], special=False) == ""
    assert tok.decode([pad]) == ""
    euro = [byte_to_id(vocab.tokens, b) for b in "€".encode()]
    assert tok.decode(euro) == "€"
    assert tok.decode(euro[:2]) == "\ufffd"
    assert tok.token_bytes(euro[0]) == b"\xe2"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([tok.n_vocab])


def byte_to_id(tokens: list[str], byte: int) -> int:
    char = next(c for c, b in byte_decoder().items() if b == byte)
    return tokens.index(char)


def test_byte_decoder_covers_every_byte_once() -> None:
    table = byte_decoder()
    assert sorted(table.values()) == list(range(256))
    assert table["Ġ"] == 32 and table["Ċ"] == 10


def test_eog_ids_are_llamacpps_end_of_generation_set() -> None:
    vocab = build_vocab(2048, 0)
    expected = {
        vocab.special[t]
        for t in ("<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
    }
    assert tokenizer(2048, 0).eog_ids == frozenset(expected)


def test_bad_vocabularies_are_clear_errors() -> None:
    vocab = build_vocab(2048, 0)
    with pytest.raises(TokenizerError, match="pre-tokenizer"):
        Tokenizer(vocab.tokens, vocab.token_types, vocab.merges, pre="llama3")
    with pytest.raises(TokenizerError, match="token types"):
        Tokenizer(vocab.tokens, vocab.token_types[:-1], vocab.merges)
    with pytest.raises(TokenizerError, match="malformed merge"):
        Tokenizer(vocab.tokens, vocab.token_types, ["nospace"])


def test_from_gguf_reads_the_tokenizer_keys(tmp_path: Path) -> None:
    vocab = build_vocab(2048, 0)
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen35",
        "tokenizer.ggml.tokens": vocab.tokens,
        "tokenizer.ggml.token_type": vocab.token_types,
        "tokenizer.ggml.merges": vocab.merges,
        "tokenizer.ggml.eos_token_id": vocab.eos_id,
    }
    model = SimpleNamespace(path=tmp_path / "m.gguf", metadata=meta)
    tok = Tokenizer.from_gguf(model)  # type: ignore[arg-type]
    assert tok.encode("hello world") == tokenizer(2048, 0).encode("hello world")
    model.metadata = {**meta, "tokenizer.ggml.model": "llama"}
    with pytest.raises(TokenizerError, match="not supported"):
        Tokenizer.from_gguf(model)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", HARD_STRINGS)
def test_stream_decoder_pieces_concatenate_to_decode(text: str) -> None:
    tok = tokenizer(2048, 0)
    ids = tok.encode(text)
    rng = random.Random(len(text))
    ids += [rng.randrange(tok.n_vocab) for _ in range(5)]  # may end inside a UTF-8 sequence
    stream = tok.stream_decoder()
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == tok.decode(ids)
    assert all("\ufffd" not in p for p in pieces[: len(tok.encode(text))]) or "\ufffd" in text


def test_debug_tokenize_reports_a_missing_file_clearly(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from openjet.cli import app

    result = CliRunner().invoke(app, ["debug", "tokenize", str(tmp_path / "none.gguf"), "hi"])
    assert result.exit_code == 2
    assert "none.gguf" in result.output
    assert "Traceback" not in result.output

"""Our tokenizer against llama.cpp's, for real: llama-server `/tokenize` (with and without
`parse_special`) and `/detokenize` on synthetic qwen35 vocabularies of two sizes and three seeds.

The vocabularies use the real Qwen3.5 pre-tokenizer settings (`tokenizer.ggml.pre = qwen35`,
its split regex, byte-level BPE, the Qwen special tokens with their converter types), so
agreement here is agreement on the code path the real model's vocabulary takes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from engine.gguf_file import open_gguf
from engine.synthetic import write_synthetic
from engine.tokenizer import Tokenizer
from openjet.cli import app

SERVER_ARGS = ["-c", "256", "-np", "1", "-t", "1", "--no-warmup"]

HARD_STRINGS = [
    "Hello, world! It's a test; we'll see. DON'T SHOUT, I'M HERE",
    "café naïve e\u0301cole n\u0303 a\u0308 — “quotes” … ½ ² Ⅻ ٣٤ ١٢",
    "你好，世界！こんにちは カタカナ 안녕하세요 مرحبا बच्चों नमस्ते ไทย",
    "emoji 😀👍🏽 👨\u200d👩\u200d👧 🇩🇪 ❤️ ✅\ufe0f",
    "def f(x):\n\treturn x**2  # square\n\n\n    if a != b:\r\n        pass\n",
    "   leading and trailing spaces   ",
    "\n\n\n\t\t  \n \r\n\r\r\n  \u00a0\u2003\u3000x\u200b\u0085\x0b\x0c",
    "1234567890 3.14159 0xDEADBEEF 1e-7 -42 ٣.١٤",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|im_start <|im_start| |im_start|> <|IM_START|> <tool_call <think > << <|<|im_end|>|>",
    "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
    "[PAD300] [PAD2000] <|endoftext|><|endoftext|><|vision_start|><|image_pad|>",
    "\x00\x01\x7f control chars, \ufeff BOM, \ud7ff, \ue000 private use, \U0010fffd",
    "x" * 300 + " " * 50 + "y\n" * 20,
    "'s 's 'S 'll 'LL 're 've 'm 'd don't DON'T o'clock rock'n'roll ''s",
]

POOL = [
    *"abcXYZ019 .,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`",
    *[" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", "\u00a0", "\u3000", "\x0b"],
    *"éüñßçøåÆŒ",
    *["e\u0301", "a\u0308\u0323", "\u0301", "\u093f", "\u0e31"],
    *"中文字漢한국어日本ひらカタ",
    *["😀", "👍🏽", "👨\u200d👩\u200d👧", "🇩🇪", "\ufe0f"],
    *"٣٤½²Ⅻ①",
    *["'s", "'LL", "'re", "'T"],
    *["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|im_start", "|>"],
    *["the", " the", "function", " return", "engine", "ing", "tion"],
]


def fuzz_strings(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(POOL, k=rng.randint(1, 80))) for _ in range(count)]


def server_tokenize(client: httpx.Client, text: str, parse_special: bool) -> list[int]:
    body = {"content": text, "add_special": False, "parse_special": parse_special}
    response = client.post("/tokenize", json=body)
    response.raise_for_status()
    return list(response.json()["tokens"])


def server_detokenize(client: httpx.Client, ids: list[int]) -> str:
    response = client.post("/detokenize", json={"tokens": ids})
    response.raise_for_status()
    return str(response.json()["content"])


def encode_mismatches(client: httpx.Client, tokenizer: Tokenizer, texts: list[str]) -> list[Any]:
    mismatches = []
    for text in texts:
        for parse_special in (True, False):
            expected = server_tokenize(client, text, parse_special)
            ours = tokenizer.encode(text, parse_special=parse_special)
            if ours != expected:
                mismatches.append((text, parse_special, ours, expected))
    return mismatches


def decode_cases(tokenizer: Tokenizer, seed: int, count: int) -> list[list[int]]:
    """Random id runs: any token (normal, control, user-defined, padding), and runs of
    single-byte tokens that cut UTF-8 sequences (invalid output on purpose)."""
    rng = random.Random(seed)
    single_bytes = [i for i in range(tokenizer.n_vocab) if len(tokenizer.token_bytes(i)) == 1]
    high_bytes = [i for i in single_bytes if tokenizer.token_bytes(i)[0] >= 0x80]
    cases = [
        [rng.randrange(tokenizer.n_vocab) for _ in range(rng.randint(1, 12))] for _ in range(count)
    ]
    cases += [[rng.choice(high_bytes) for _ in range(rng.randint(1, 6))] for _ in range(count)]
    cases += [tokenizer.encode("é😀中")[:k] for k in range(1, 8)]
    return cases


@pytest.mark.parametrize(("preset", "seed"), [("tiny", 0), ("tiny", 1), ("small", 2)])
def test_tokenizer_equals_llamacpp(
    preset: str, seed: int, tmp_path: Path, llama_server: Callable[..., Any]
) -> None:
    quant = "f32" if preset == "tiny" else "q8_0"
    path = write_synthetic(tmp_path / f"{preset}-{seed}.gguf", preset, quant, seed)
    tokenizer = Tokenizer.from_gguf(open_gguf(path))
    texts = HARD_STRINGS + fuzz_strings(seed, 500)
    with (
        llama_server(path, extra_args=SERVER_ARGS) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as client,
    ):
        mismatches = encode_mismatches(client, tokenizer, texts)
        decode_wrong = [
            (ids, tokenizer.decode(ids), expected)
            for ids in decode_cases(tokenizer, seed, 60)
            if tokenizer.decode(ids) != (expected := server_detokenize(client, ids))
        ]
        cli_ids = CliRunner().invoke(app, ["debug", "tokenize", str(path), HARD_STRINGS[8]])
        assert cli_ids.exit_code == 0, cli_ids.output
        assert cli_ids.output.strip() == ",".join(
            map(str, server_tokenize(client, HARD_STRINGS[8], True))
        )
    print(f"\n{preset} seed {seed}: {2 * len(texts)} encodes, {len(mismatches)} differ")
    assert mismatches == []
    assert decode_wrong == []

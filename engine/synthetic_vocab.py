"""A real, small byte-level BPE vocabulary in the Qwen3.5 layout, for synthetic `qwen35` GGUFs.

`build_vocab(n_vocab, seed)` trains a byte-level BPE (the `tokenizers` library's BpeTrainer)
on a corpus generated here from the seed (English, code, numbers, several scripts, emoji and
whitespace runs; nothing is downloaded), using the qwen35 pre-tokenizer regex. The result has
exactly `n_vocab` entries, laid out like the real Qwen3.5 vocabulary: normal tokens, then the
Qwen special tokens, then `[PAD<id>]` padding (type 5). When the vocabulary is large enough,
the special tokens sit 276 ids below the end, as in the real 248,320-token vocabulary (so the
27B-shaped preset gets the real ids: `<|im_end|>` = 248046, `<think>` = 248068).

`chat_template_text()` returns OpenJet's own Qwen3.5-style chat template (spec 8.3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

from engine.synthetic_corpus import corpus_lines

# llama.cpp src/llama-vocab.cpp, pre-tokenizer type QWEN35 (spec 8.2).
QWEN35_PRETOKENIZER_REGEX = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
TOKEN_TYPE_UNUSED = 5

# The Qwen3 / Qwen3.5 added tokens in their real order (ids 248044.. in the 27B vocabulary).
# `<|...|>` tokens are control tokens; the XML-like ones are non-special added tokens in the HF
# tokenizer, which llama.cpp's converter writes as user-defined (type 4): they are matched in
# text even without special parsing and decode to their text.
QWEN_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

# In the real vocabulary the special tokens start 276 ids before the end (248044 of 248320).
QWEN_SPECIAL_TAIL = 276
# Above this many trained tokens the remainder is padding: training stays within a few seconds.
MAX_TRAINED_TOKENS = 8192
N_BYTE_TOKENS = 256
MIN_VOCAB = N_BYTE_TOKENS + len(QWEN_SPECIAL_TOKENS)


@dataclass(frozen=True)
class SyntheticVocab:
    """The GGUF `tokenizer.ggml.*` arrays of a synthetic vocabulary."""

    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    special: dict[str, int]
    eos_id: int
    pad_id: int


def special_token_type(text: str) -> int:
    """Control for `<|...|>` tokens, user-defined for the XML-like ones (as llama.cpp converts)."""
    if text.startswith("<|") and text.endswith("|>"):
        return TOKEN_TYPE_CONTROL
    return TOKEN_TYPE_USER_DEFINED


def build_vocab(n_vocab: int, seed: int = 0) -> SyntheticVocab:
    """A deterministic byte-level BPE vocabulary of exactly `n_vocab` tokens (see module doc)."""
    if n_vocab < MIN_VOCAB:
        raise ValueError(
            f"n_vocab must be at least {MIN_VOCAB} (256 bytes + specials), got {n_vocab}"
        )
    special_start = _special_start(n_vocab)
    trained, merges = _train_bpe(min(special_start, MAX_TRAINED_TOKENS), seed)
    tokens = list(trained)
    types = [TOKEN_TYPE_NORMAL] * len(tokens)
    _pad_to(tokens, types, special_start)
    special: dict[str, int] = {}
    for text in QWEN_SPECIAL_TOKENS:
        special[text] = len(tokens)
        tokens.append(text)
        types.append(special_token_type(text))
    _pad_to(tokens, types, n_vocab)
    return SyntheticVocab(
        tokens=tokens,
        token_types=types,
        merges=merges,
        special=special,
        eos_id=special["<|im_end|>"],
        pad_id=special["<|endoftext|>"],
    )


def _special_start(n_vocab: int) -> int:
    # Keep the real layout (specials 276 from the end) unless that would leave too few ids to
    # train a useful BPE; tiny vocabularies put the specials right after the trained tokens.
    if n_vocab - QWEN_SPECIAL_TAIL >= 4 * N_BYTE_TOKENS:
        return n_vocab - QWEN_SPECIAL_TAIL
    return n_vocab - len(QWEN_SPECIAL_TOKENS)


def _pad_to(tokens: list[str], types: list[int], size: int) -> None:
    while len(tokens) < size:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(TOKEN_TYPE_UNUSED)


def qwen35_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """The qwen35 split regex followed by the GPT-2 byte-to-unicode mapping."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN35_PRETOKENIZER_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def train_bpe(seed: int, size: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tokens, merges) of a byte-level BPE trained to `size` tokens on the seed's corpus."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = qwen35_pre_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=16,
    )
    tokenizer.train_from_iterator(corpus_lines(seed), trainer=trainer)
    state = json.loads(tokenizer.to_str())["model"]
    vocab: dict[str, int] = state["vocab"]
    tokens = tuple(sorted(vocab, key=vocab.__getitem__))
    merges = tuple(m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in state["merges"])
    return tokens, merges


@cache
def _train_bpe_cached(seed: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # Smaller vocabularies are prefixes of this one: BPE training is greedy, so training to
    # fewer tokens stops earlier on the same sequence of merges.
    return train_bpe(seed, MAX_TRAINED_TOKENS)


def _train_bpe(target_size: int, seed: int) -> tuple[list[str], list[str]]:
    all_tokens, all_merges = _train_bpe_cached(seed)
    tokens = list(all_tokens[:target_size])
    kept = set(tokens)
    merges = []
    for merge in all_merges:  # in training order: stop at the first token past the size
        if merge.replace(" ", "") not in kept:
            break
        merges.append(merge)
    return tokens, merges


def chat_template_text() -> str:
    """OpenJet's Qwen3.5-style chat template (engine/templates/qwen35_chat.jinja)."""
    return resources.files("engine.templates").joinpath("qwen35_chat.jinja").read_text("utf-8")

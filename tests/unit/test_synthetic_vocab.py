"""Synthetic vocabularies: exact size, Qwen layout, real merges, determinism, the chat template."""

from __future__ import annotations

import pytest

from engine import synthetic_vocab
from engine.synthetic_vocab import (
    MIN_VOCAB,
    QWEN_SPECIAL_TOKENS,
    TOKEN_TYPE_CONTROL,
    TOKEN_TYPE_NORMAL,
    TOKEN_TYPE_UNUSED,
    TOKEN_TYPE_USER_DEFINED,
    build_vocab,
    chat_template_text,
)


@pytest.mark.parametrize("n_vocab", [MIN_VOCAB, 1000, 4096, 248320])
def test_vocab_has_exactly_n_vocab_tokens(n_vocab: int) -> None:
    vocab = build_vocab(n_vocab, seed=0)
    assert len(vocab.tokens) == len(vocab.token_types) == n_vocab
    assert len(set(vocab.tokens)) == n_vocab


def test_real_27b_size_puts_special_tokens_at_the_real_ids() -> None:
    vocab = build_vocab(248320, seed=0)
    assert vocab.special["<|endoftext|>"] == 248044
    assert vocab.special["<|im_start|>"] == 248045
    assert vocab.eos_id == vocab.special["<|im_end|>"] == 248046
    assert vocab.special["<tool_call>"] == 248058
    assert vocab.special["<think>"] == 248068
    assert vocab.special["</think>"] == 248069
    assert vocab.pad_id == 248044
    assert vocab.tokens[-1] == "[PAD248319]"


def test_token_types_follow_the_converter_rules() -> None:
    vocab = build_vocab(4096, seed=0)
    assert set(vocab.special) == set(QWEN_SPECIAL_TOKENS)
    for text, token_id in vocab.special.items():
        assert vocab.tokens[token_id] == text
        expected = TOKEN_TYPE_CONTROL if text.startswith("<|") else TOKEN_TYPE_USER_DEFINED
        assert vocab.token_types[token_id] == expected
    for token_id, (text, kind) in enumerate(zip(vocab.tokens, vocab.token_types, strict=True)):
        if kind == TOKEN_TYPE_UNUSED:
            assert text == f"[PAD{token_id}]"
    assert vocab.token_types[:256] == [TOKEN_TYPE_NORMAL] * 256


def test_merges_are_real_bpe_merges_over_a_byte_alphabet() -> None:
    vocab = build_vocab(4096, seed=0)
    assert len(vocab.merges) > 3000
    index = {text: i for i, text in enumerate(vocab.tokens)}
    for rank, merge in enumerate(vocab.merges):
        left, right = merge.split(" ")
        # Both halves exist, and the merged token was created by this merge (after its parts).
        merged = index[left + right]
        assert index[left] < merged and index[right] < merged, (rank, merge)
    # The byte-level alphabet: every one of the 256 byte characters is a single token.
    assert all(len(token) == 1 for token in vocab.tokens[:256])
    assert "Ġthe" in index and "ĠĠĠĠ" in index


def test_deterministic_for_a_seed_and_different_across_seeds() -> None:
    first = build_vocab(2048, seed=3)
    synthetic_vocab._train_bpe_cached.cache_clear()  # train again from scratch
    again = build_vocab(2048, seed=3)
    other = build_vocab(2048, seed=4)
    assert first == again
    assert first.merges != other.merges


def test_a_smaller_vocabulary_equals_training_to_that_size() -> None:
    vocab = build_vocab(1200, seed=3)  # trained tokens: 1200 - 26 specials
    tokens, merges = synthetic_vocab.train_bpe(3, 1200 - len(QWEN_SPECIAL_TOKENS))
    assert vocab.merges == list(merges)
    assert vocab.tokens[: len(tokens)] == list(tokens)


def test_too_small_a_vocabulary_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least"):
        build_vocab(100)


def test_chat_template_is_qwen35_style() -> None:
    text = chat_template_text()
    for marker in ("<|im_start|>", "<tool_call>", "<function=", "<parameter=", "<tool_response>"):
        assert marker in text
    assert "enable_thinking" in text

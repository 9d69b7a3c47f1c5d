"""The model's tokenizer: GGUF vocabulary and merges → a `tokenizers.Tokenizer`, as llama.cpp does it.

Encoding follows llama.cpp's BPE path for the `qwen35` pre-tokenizer (spec 8.2): special tokens
are cut out first (control tokens only when `parse_special`, user-defined ones always), every
other fragment is split by the qwen35 regex, byte-level mapped and BPE-merged by rank. No BOS,
no normalization. Decoding is done here, token by token, with llama.cpp's rules: normal tokens
map their byte-level characters back to bytes, control and user-defined tokens give their text,
unused (padding) tokens give nothing.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tokenizers import AddedToken, models
from tokenizers import Tokenizer as HFTokenizer

from engine.synthetic_vocab import (
    TOKEN_TYPE_CONTROL,
    TOKEN_TYPE_NORMAL,
    TOKEN_TYPE_USER_DEFINED,
    qwen35_pre_tokenizer,
)

if TYPE_CHECKING:
    from engine.gguf_file import GGUFModel

# Token texts llama.cpp treats as end of generation (src/llama-vocab.cpp), plus the FIM
# pad/repo/separator tokens it also adds to the EOG set.
EOG_TEXTS = frozenset(
    {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<|eom_id|>", "<|end_of_text|>"}
    | {"<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}
)
SUPPORTED_PRE_TOKENIZERS = frozenset({"qwen35"})


class TokenizerError(ValueError):
    """The GGUF's tokenizer cannot be used (unsupported kind or inconsistent arrays)."""


def byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-unicode table: one printable character per byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in table.values():
            table[chr(256 + extra)] = b
            extra += 1
    return table


class Tokenizer:
    """Encode and decode text exactly like llama.cpp does for this GGUF's vocabulary."""

    def __init__(
        self,
        tokens: Sequence[str],
        token_types: Sequence[int],
        merges: Sequence[str],
        eos_id: int | None = None,
        pre: str = "qwen35",
    ) -> None:
        if pre not in SUPPORTED_PRE_TOKENIZERS:
            raise TokenizerError(f"unsupported pre-tokenizer {pre!r} (supported: qwen35)")
        if len(tokens) != len(token_types):
            raise TokenizerError(
                f"{len(tokens)} tokens but {len(token_types)} token types in the vocabulary"
            )
        self.tokens: list[str] = list(tokens)
        self.token_types: list[int] = [int(t) for t in token_types]
        self._merges = [_split_merge(m) for m in merges]
        self.eos_id = eos_id
        self._pieces = self._build_pieces()
        self._with_special = self._build_hf(parse_special=True)

    @classmethod
    def from_gguf(cls, model: GGUFModel) -> Tokenizer:
        """Read `tokenizer.ggml.*` from an open GGUF (spec 8.1)."""
        meta = model.metadata
        kind = _as_str(meta.get("tokenizer.ggml.model", ""))
        if kind != "gpt2":
            raise TokenizerError(
                f"{model.path}: tokenizer model {kind!r} is not supported (need gpt2)"
            )
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
            if key not in meta:
                raise TokenizerError(f"{model.path}: metadata key {key} is missing")
        eos = meta.get("tokenizer.ggml.eos_token_id")
        return cls(
            tokens=[_as_str(t) for t in meta["tokenizer.ggml.tokens"]],
            token_types=[int(t) for t in meta["tokenizer.ggml.token_type"]],
            merges=[_as_str(m) for m in meta["tokenizer.ggml.merges"]],
            eos_id=None if eos is None else int(eos),
            pre=_as_str(meta.get("tokenizer.ggml.pre", "qwen35")),
        )

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @cached_property
    def eog_ids(self) -> frozenset[int]:
        """Ids that end generation: llama.cpp's EOG texts found in the vocabulary, and EOS."""
        ids = {i for i, text in enumerate(self.tokens) if text in EOG_TEXTS}
        if self.eos_id is not None:
            ids.add(self.eos_id)
        return frozenset(ids)

    @cached_property
    def special_ids(self) -> dict[str, int]:
        """Control and user-defined tokens by text."""
        kinds = (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
        return {
            t: i
            for i, (t, k) in enumerate(zip(self.tokens, self.token_types, strict=True))
            if k in kinds
        }

    @cached_property
    def _without_special(self) -> HFTokenizer:
        return self._build_hf(parse_special=False)

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        """Token ids of `text` (no BOS). Control tokens are recognised only with `parse_special`."""
        hf = self._with_special if parse_special else self._without_special
        return list(hf.encode(text, add_special_tokens=False).ids)

    def token_bytes(self, token_id: int, special: bool = True) -> bytes:
        """The bytes one token contributes to the text (control tokens only when `special`)."""
        if not 0 <= token_id < len(self._pieces):
            raise ValueError(
                f"token id {token_id} is outside the vocabulary (0..{self.n_vocab - 1})"
            )
        if not special and self.token_types[token_id] == TOKEN_TYPE_CONTROL:
            return b""
        return self._pieces[token_id]

    def decode(self, ids: Sequence[int], special: bool = True) -> str:
        """Text of `ids`; bytes that are not valid UTF-8 become U+FFFD."""
        data = b"".join(self.token_bytes(int(i), special) for i in ids)
        return data.decode("utf-8", errors="replace")

    def stream_decoder(self, special: bool = True) -> StreamDecoder:
        """Decode token by token while generating (holds back partial UTF-8 sequences)."""
        return StreamDecoder(self, special)

    def token_text(self, token_id: int) -> str:
        """A token's text as it appears in decoded output (may hold U+FFFD for partial UTF-8)."""
        return self.token_bytes(token_id).decode("utf-8", errors="replace")

    def _build_pieces(self) -> list[bytes]:
        decoder = byte_decoder()
        pieces: list[bytes] = []
        for text, kind in zip(self.tokens, self.token_types, strict=True):
            if kind == TOKEN_TYPE_NORMAL:
                # A normal token outside the byte-level alphabet cannot come from BPE; llama.cpp
                # would not emit it either, and its bytes are taken as UTF-8 text.
                if all(ch in decoder for ch in text):
                    pieces.append(bytes(decoder[ch] for ch in text))
                else:
                    pieces.append(text.encode("utf-8"))
            elif kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED):
                pieces.append(text.encode("utf-8"))
            else:
                pieces.append(b"")
        return pieces

    def _build_hf(self, parse_special: bool) -> HFTokenizer:
        vocab: dict[str, int] = {}
        for token_id, text in enumerate(self.tokens):
            vocab.setdefault(text, token_id)
        merges = [m for m in self._merges if m[0] in vocab and m[1] in vocab]
        hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
        hf.pre_tokenizer = qwen35_pre_tokenizer()
        added = [
            AddedToken(text, special=kind == TOKEN_TYPE_CONTROL, normalized=False)
            for text, kind in zip(self.tokens, self.token_types, strict=True)
            if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
        ]
        hf.add_tokens(added)
        # With special parsing off, control tokens are split as plain text; user-defined ones
        # (special=False above) are still matched, as in llama.cpp.
        hf.encode_special_tokens = not parse_special
        return hf


class StreamDecoder:
    """Text of a token stream as it grows: `push` returns only complete characters, so the
    pieces concatenate to exactly `Tokenizer.decode` of all the ids."""

    def __init__(self, tokenizer: Tokenizer, special: bool = True) -> None:
        self._tokenizer = tokenizer
        self._special = special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._utf8.decode(self._tokenizer.token_bytes(token_id, self._special))

    def flush(self) -> str:
        """The end of the stream: an unfinished UTF-8 sequence becomes U+FFFD."""
        return self._utf8.decode(b"", final=True)


def _split_merge(merge: str) -> tuple[str, str]:
    left, sep, right = merge.partition(" ")
    if not sep or not left or not right:
        raise TokenizerError(f"malformed merge {merge!r} (expected 'left right')")
    return left, right


def _as_str(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8")
    return str(value)

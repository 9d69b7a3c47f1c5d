"""Text-level pieces of the Qwen tool-call parser: the tags, tag hold-back while streaming,
whitespace-trimmed sections, and `ValueReader` for one `<parameter=NAME>` value.

A value ends at the first "\n</parameter>", as in llama.cpp's qwen3-coder parser (a
"</parameter>" inside a line is part of the value). One newline after the opening tag is not
part of the value. String parameters (by the tool's schema, or without a schema) stream as JSON string fragments
while they arrive; other values are JSON-parsed when complete and sent whole. The fragments of
all parameters concatenate to the call's `arguments` JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
FUNCTION_OPEN, FUNCTION_CLOSE = "<function=", "</function>"
PARAM_OPEN, PARAM_CLOSE = "<parameter=", "</parameter>"
VALUE_END = "\n" + PARAM_CLOSE
NEXT_TAGS = (PARAM_OPEN, FUNCTION_CLOSE, CALL_CLOSE)
JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "number": (int, float),
    "integer": int,
}


def held_prefix(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that could be the start of one of `tags`."""
    longest = 0
    for tag in tags:
        for size in range(min(len(tag) - 1, len(text)), longest, -1):
            if text.endswith(tag[:size]):
                longest = size
                break
    return longest


class TrimmedText:
    """A text section emitted as it streams, without leading or trailing whitespace."""

    def __init__(self) -> None:
        self.text = ""
        self.started = False
        self._pending = ""  # trailing whitespace held until more text follows

    def add(self, text: str, final: bool) -> str:
        if not self.started:
            text = text.lstrip()
            if not text:
                return ""
            self.started = True
        text = self._pending + text
        kept = text.rstrip()
        self._pending = "" if final else text[len(kept) :]
        self.text += kept
        return kept


@dataclass
class ValueRead:
    """What one `ValueReader.read` call produced."""

    complete: bool
    consumed: int = 0
    fragments: list[str] = field(default_factory=list)
    value: Any = None


class ValueReader:
    """Reads the value text that follows `<parameter=NAME>` (see module doc).

    Text that cannot belong to the closing tag is consumed as it arrives (kept here, and sent
    at once for string values), so a long value is scanned once, not once per delta.
    """

    def __init__(self, name: str, schema: Any, first: bool) -> None:
        self.name = name
        self.types = schema_types(schema)
        self.streams = not self.types or self.types == {"string"}
        self._key = ("{" if first else ", ") + json.dumps(name, ensure_ascii=False) + ": "
        self._started = False  # the newline after the opening tag has been dealt with
        self._kept: list[str] = []  # value text consumed so far
        self._sent = False  # the key and opening quote went out (streaming strings)

    def read(self, text: str, final: bool) -> ValueRead:
        """`text`: what follows the part already consumed; it grows between calls."""
        skipped = 0
        if not self._started:
            if not final and len(text) < len(VALUE_END) and VALUE_END.startswith(text):
                return ValueRead(complete=False)  # empty value, or not decided yet
            skipped = 1 if text.startswith("\n") and not text.startswith(VALUE_END) else 0
            self._started = True
        body = text[skipped:]
        end, after = value_end(body)
        if end is None:
            if final:
                return ValueRead(complete=False, consumed=skipped)
            taken = _safe_length(body)
            return ValueRead(False, skipped + taken, self._keep(body[:taken]))
        raw = "".join(self._kept) + body[:end]
        value = self.convert(raw)
        if self._sent:
            return ValueRead(True, skipped + after, [_escaped(body[:end]) + '"'], value)
        return ValueRead(
            True, skipped + after, [self._key + json.dumps(value, ensure_ascii=False)], value
        )

    def _keep(self, text: str) -> list[str]:
        if not text:
            return []
        self._kept.append(text)
        if not self.streams:
            return []
        fragment = ("" if self._sent else self._key + '"') + _escaped(text)
        self._sent = True
        return [fragment]

    def convert(self, raw: str) -> Any:
        """The argument value: the text itself, or its JSON value when the schema allows it."""
        if self.streams:
            return raw
        try:
            value = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            return raw
        return value if _value_matches(value, self.types) else raw


def _safe_length(text: str) -> int:
    """How much of an unfinished value cannot belong to its closing tag: all but an end that
    may grow into "\n</parameter>"."""
    return len(text) - held_prefix(text, (VALUE_END,))


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def value_end(text: str) -> tuple[int | None, int]:
    """(end of the value, end of its closing tag) or (None, 0) while it is not complete."""
    end = text.find(VALUE_END)
    return (None, 0) if end < 0 else (end, end + len(VALUE_END))


def schema_types(schema: Any) -> set[str]:
    """The JSON types a parameter schema allows (`type`, `anyOf`/`oneOf`, string enums)."""
    if not isinstance(schema, Mapping):
        return set()
    kind = schema.get("type")
    types: set[str] = set()
    if isinstance(kind, str):
        types = {kind}
    elif isinstance(kind, list):
        types = {t for t in kind if isinstance(t, str)}
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or []:
            types |= schema_types(option)
    enum = schema.get("enum")
    if not types and isinstance(enum, list) and all(isinstance(v, str) for v in enum):
        types = {"string"}
    return types


def _value_matches(value: Any, types: set[str]) -> bool:
    if isinstance(value, bool):
        return "boolean" in types
    if value is None:
        return "null" in types
    if isinstance(value, str):
        return False  # a quoted string stays as written
    return any(t in JSON_TYPES and isinstance(value, JSON_TYPES[t]) for t in types)

"""Fallback parsing of tool calls a server left in the message text.

Servers without a tool-call parser for the model (or a model that slipped) return Qwen's own
formats as plain content. Two are recognised inside `<tool_call>...</tool_call>`:
the XML function form (Qwen3-Coder / Qwen3.5)

    <function=edit_file><parameter=path>a.py</parameter>...</function>

and the JSON form (Hermes / Qwen2.5-3) `{"name": "edit_file", "arguments": {...}}`. A leading
`<think>...</think>` block is split off as reasoning.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from agent.tools import SPECS

TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)


def split_thinking(content: str) -> tuple[str, str]:
    """(reasoning, answer) of a message that still carries its <think> block."""
    if "</think>" not in content:
        return "", content
    thought, _, answer = content.partition("</think>")
    return thought.replace("<think>", "", 1).strip(), answer.lstrip()


def _typed(tool: str, name: str, raw: str) -> Any:
    value = raw.removeprefix("\n").removesuffix("\n")
    spec = SPECS.get(tool)
    kind = spec.parameters.get("properties", {}).get(name, {}).get("type") if spec else None
    if kind in (None, "string"):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:16]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def _parse_block(block: str) -> list[dict[str, Any]]:
    calls = []
    for function in FUNCTION.finditer(block):
        name = function.group(1)
        args = {
            p.group(1): _typed(name, p.group(1), p.group(2))
            for p in PARAMETER.finditer(function.group(2))
        }
        calls.append(_call(name, args))
    if calls:
        return calls
    try:
        data = json.loads(block.strip())
    except json.JSONDecodeError:
        return []
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        arguments = data.get("arguments") or data.get("parameters") or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return []
        return [_call(data["name"], arguments if isinstance(arguments, dict) else {})]
    return []


def extract_text_calls(content: str) -> tuple[str, list[dict[str, Any]]]:
    """(content without the call blocks, OpenAI-shaped tool calls found in it)."""
    if "<tool_call>" not in content:
        return content, []
    calls = [
        call for block in TOOL_CALL_BLOCK.finditer(content) for call in _parse_block(block.group(1))
    ]
    if not calls:
        return content, []
    return TOOL_CALL_BLOCK.sub("", content).strip(), calls


class ThinkSplitter:
    """Routes streamed content that opens with `<think>` to reasoning until `</think>`.

    For servers that leave the thinking in the content: the person sees it as reasoning while
    it streams, not as the answer. A tag split across chunks is held back until it is whole.
    """

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self.state = "start"  # start -> think -> content, or start -> content
        self.pending = ""
        self.after_thinking = False  # the blank lines after </think> are not part of the answer

    def feed(self, text: str) -> list[tuple[str, str]]:
        """(kind, text) pieces, kind "reasoning" or "content"."""
        self.pending += text
        if self.state == "start":
            head = self.pending.lstrip()
            if self.OPEN.startswith(head):
                return []  # could still become "<think>"
            if head.startswith(self.OPEN):
                self.state, self.pending = "think", head[len(self.OPEN) :]
            else:
                self.state = "content"
        if self.state == "think":
            end = self.pending.find(self.CLOSE)
            if end < 0:
                keep = _partial_suffix(self.pending, self.CLOSE)
                out, self.pending = (
                    self.pending[: len(self.pending) - keep],
                    self.pending[len(self.pending) - keep :],
                )
                return [("reasoning", out)] if out else []
            thought, rest = self.pending[:end], self.pending[end + len(self.CLOSE) :]
            self.state, self.pending, self.after_thinking = "content", rest, True
            return [("reasoning", thought), *self._content()] if thought else self._content()
        return self._content()

    def _content(self) -> list[tuple[str, str]]:
        out, self.pending = self.pending, ""
        if self.after_thinking:
            out = out.lstrip("\n")
            self.after_thinking = not out
        return [("content", out)] if out else []

    def flush(self) -> list[tuple[str, str]]:
        kind = "reasoning" if self.state == "think" else "content"
        out, self.pending = self.pending, ""
        return [(kind, out)] if out else []


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a beginning of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0

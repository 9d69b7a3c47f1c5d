"""The parser's output types: streaming deltas (`ParseEvent`) and the whole message
(`ParsedMessage`), both convertible to OpenAI's chat-completion shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ParseEvent:
    """One streaming delta: reasoning or content text, or a piece of a tool call."""

    kind: Literal["content", "reasoning", "tool_call"]
    text: str = ""
    index: int = 0
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""

    def to_delta(self) -> dict[str, Any]:
        """The OpenAI `choices[0].delta` object for this event."""
        if self.kind == "content":
            return {"content": self.text}
        if self.kind == "reasoning":
            return {"reasoning_content": self.text}
        call: dict[str, Any] = {"index": self.index}
        function: dict[str, str] = {"arguments": self.arguments}
        if self.call_id is not None:
            call["id"] = self.call_id
            call["type"] = "function"
        if self.name is not None:
            function["name"] = self.name
        call["function"] = function
        return {"tool_calls": [call]}


@dataclass
class ParsedMessage:
    """The whole assistant message, OpenAI-shaped, plus what could not be parsed."""

    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.reasoning_content:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message

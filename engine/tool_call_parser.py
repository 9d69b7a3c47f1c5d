"""Streaming parser for Qwen3.5 output: reasoning, content and XML tool calls (spec 8.4).

The model's text (after the generation prompt) is fed in deltas of any size. The parser
splits it into reasoning (up to `</think>`, or up to a `<tool_call>` that comes first), content
(up to the first `<tool_call>`) and tool calls in the Qwen3-Coder XML format:

    <tool_call>
    <function=NAME>
    <parameter=ARG>
    VALUE
    </parameter>
    </function>
    </tool_call>

`feed` returns events in the OpenAI streaming shape (content, reasoning and tool-call deltas;
a tool call's arguments arrive as JSON fragments — string values while they stream, other
values whole — whose concatenation is the final `arguments` string). `finish` returns the whole message. Broken or cut-off tool calls
never raise: they become entries in `ParsedMessage.errors` that the agent can show the model.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any, Literal

from engine.tool_call_events import ParsedMessage, ParseEvent
from engine.tool_call_stream import CallBuilder
from engine.tool_call_text import CALL_OPEN, TrimmedText, held_prefix

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

Mode = Literal["start", "reasoning", "content", "call", "between"]


def new_call_id(index: int) -> str:
    return "call_" + secrets.token_hex(12)


class ToolCallParser:
    """Incremental parser for one assistant message (see module doc)."""

    def __init__(
        self,
        tools: list[dict[str, Any]] | None = None,
        thinking: bool = True,
        id_factory: Callable[[int], str] = new_call_id,
    ) -> None:
        """`thinking`: the prompt ended inside `<think>`, so the output starts as reasoning."""
        self._schemas = _parameter_schemas(tools or [])
        self._id_factory = id_factory
        self._mode: Mode = "reasoning" if thinking else "start"
        self._buffer = ""
        self._reasoning = TrimmedText()
        self._content = TrimmedText()
        self._call: CallBuilder | None = None
        self._calls_started = 0
        self._message = ParsedMessage()
        self._finished = False

    def feed(self, text: str) -> list[ParseEvent]:
        """Parse a delta of model output; returns the events it completes."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        self._buffer += text
        return self._run(final=False)

    def finish(self) -> ParsedMessage:
        """End of output: flush what is held back, report unfinished calls."""
        if not self._finished:
            self._run(final=True)
            if self._mode == "call" and self._call is not None:
                self._message.errors.append(self._call.cut_off_error())
            self._finished = True
            self._message.content = self._content.text
            self._message.reasoning_content = self._reasoning.text
        return self._message

    def _run(self, final: bool) -> list[ParseEvent]:
        events: list[ParseEvent] = []
        while True:
            before = (self._mode, len(self._buffer))
            step = getattr(self, f"_step_{self._mode}")
            events.extend(step(final))
            if (self._mode, len(self._buffer)) == before:
                break
        return [e for e in events if e.kind == "tool_call" or e.text]

    def _step_start(self, final: bool) -> list[ParseEvent]:
        # Without a thinking prompt the model may still open a <think> block itself.
        stripped = self._buffer.lstrip()
        if stripped.startswith(THINK_OPEN):
            self._buffer = stripped[len(THINK_OPEN) :]
            self._mode = "reasoning"
        elif final or not THINK_OPEN.startswith(stripped):
            self._mode = "content"
        return []

    def _step_reasoning(self, final: bool) -> list[ParseEvent]:
        hold: tuple[str, ...] = ()
        if not self._reasoning.started:
            # A redundant <think> at the very start (the prompt already opened the block).
            if self._buffer.lstrip().startswith(THINK_OPEN):
                self._buffer = self._buffer.lstrip()[len(THINK_OPEN) :]
            hold = (THINK_OPEN,)
        text, tag = self._take_until((THINK_CLOSE, CALL_OPEN), final, hold)
        events = [
            ParseEvent("reasoning", self._reasoning.add(text, final=tag is not None or final))
        ]
        if tag == THINK_CLOSE:
            self._buffer = self._buffer[len(THINK_CLOSE) :]
            self._mode = "content"
        elif tag == CALL_OPEN:
            self._mode = "call"
        return events

    def _step_content(self, final: bool) -> list[ParseEvent]:
        text, tag = self._take_until((CALL_OPEN,), final)
        events = [ParseEvent("content", self._content.add(text, final=tag is not None or final))]
        if tag is not None:
            self._mode = "call"
        return events

    def _step_between(self, final: bool) -> list[ParseEvent]:
        # After a tool call: whitespace, another call, or stray text (kept as content).
        stripped = self._buffer.lstrip()
        if stripped.startswith(CALL_OPEN):
            self._buffer = stripped
            self._mode = "call"
        elif stripped and not CALL_OPEN.startswith(stripped):
            self._mode = "content"
        elif final:
            self._buffer = ""
        return []

    def _step_call(self, final: bool) -> list[ParseEvent]:
        if self._call is None:
            self._call = CallBuilder(self._calls_started, self._id_factory, self._schemas)
            self._calls_started += 1
        consumed, events = self._call.advance(self._buffer, final)
        self._buffer = self._buffer[consumed:]
        if self._call.done:
            if self._call.error is not None:
                self._message.errors.append(self._call.error)
            else:
                self._message.tool_calls.append(self._call.result())
            self._call = None
            self._mode = "between"
        return events

    def _take_until(
        self, tags: tuple[str, ...], final: bool, hold: tuple[str, ...] = ()
    ) -> tuple[str, str | None]:
        """Text before the first of `tags` (which stays in the buffer), or all text that
        cannot be the start of a tag; returns (text, tag found or None)."""
        found = [(self._buffer.find(t), t) for t in tags if t in self._buffer]
        if found:
            position, tag = min(found)
            text = self._buffer[:position]
            self._buffer = self._buffer[position:]
            return text, tag
        keep = 0 if final else held_prefix(self._buffer, tags + hold)
        text = self._buffer[: len(self._buffer) - keep]
        self._buffer = self._buffer[len(self._buffer) - keep :]
        return text, None


def _parameter_schemas(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Tool name → {parameter name → JSON schema} from OpenAI tool definitions."""
    schemas: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters") or {}
        properties = parameters.get("properties", {}) if isinstance(parameters, Mapping) else {}
        schemas[function["name"]] = dict(properties) if isinstance(properties, Mapping) else {}
    return schemas

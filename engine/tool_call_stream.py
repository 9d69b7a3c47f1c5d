"""`CallBuilder`: parses one `<tool_call>…</tool_call>` block of Qwen output as its text
arrives, and emits the call's OpenAI streaming deltas (name first, then argument fragments).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from engine.tool_call_events import ParseEvent
from engine.tool_call_text import (
    CALL_CLOSE,
    CALL_OPEN,
    FUNCTION_CLOSE,
    FUNCTION_OPEN,
    NEXT_TAGS,
    PARAM_OPEN,
    ValueReader,
    held_prefix,
)

State = Literal["open", "function", "params", "value", "close", "skip"]


class CallBuilder:
    """Parses one tool-call block incrementally and emits its OpenAI streaming deltas."""

    def __init__(
        self,
        index: int,
        id_factory: Callable[[int], str],
        schemas: Mapping[str, Mapping[str, Any]],
    ) -> None:
        self.index = index
        self.call_id = id_factory(index)
        self.name: str | None = None
        self.arguments: dict[str, Any] = {}
        self.fragments: list[str] = []
        self.error: str | None = None
        self.done = False
        self._schemas = schemas
        self._state: State = "open"
        self._param: str | None = None
        self._value: ValueReader | None = None

    def advance(self, text: str, final: bool) -> tuple[int, list[ParseEvent]]:
        """Consume what can be parsed from the start of `text`; returns (chars used, events)."""
        used, events = 0, []
        while not self.done:
            step = getattr(self, f"_in_{self._state}")
            taken, new_events = step(text[used:], final)
            events.extend(new_events)
            if taken == 0 and not self.done:
                break
            used += taken
        return used, events

    def result(self) -> dict[str, Any]:
        return {
            "id": self.call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": "".join(self.fragments)},
        }

    def cut_off_error(self) -> str:
        where = f"in parameter {self._param!r}" if self._state == "value" else "before its end"
        return f"{self._label()} was cut off {where}; it was not run. Send the complete call again."

    def _label(self) -> str:
        name = f" ({self.name})" if self.name else ""
        return f"tool call {self.index + 1}{name}"

    def _event(self, arguments: str, start: bool = False) -> ParseEvent:
        self.fragments.append(arguments)
        if start:
            return ParseEvent("tool_call", index=self.index, call_id=self.call_id, name=self.name)
        return ParseEvent("tool_call", index=self.index, arguments=arguments)

    def _fail(self, text: str, problem: str, final: bool) -> tuple[int, list[ParseEvent]]:
        if final and CALL_CLOSE not in text and FUNCTION_CLOSE not in text:
            self.error = self.cut_off_error()  # the output simply ended inside the call
        else:
            self.error = f"{self._label()} is malformed: {problem}; it was not run."
        self._state = "skip"
        return self._in_skip(text, final)

    def _expect(self, text: str, tag: str, final: bool) -> int | None:
        """Chars up to and including `tag` after whitespace, 0 to wait, None if it is not there."""
        body = text.lstrip()
        if body.startswith(tag):
            return len(text) - len(body) + len(tag)
        if not final and tag.startswith(body):
            return 0
        return None

    def _in_open(self, text: str, final: bool) -> tuple[int, list[ParseEvent]]:
        taken = self._expect(text, CALL_OPEN, final)
        if taken is None:
            return self._fail(text, f"it does not start with {CALL_OPEN}", final)
        if taken:
            self._state = "function"
        return taken, []

    def _in_function(self, text: str, final: bool) -> tuple[int, list[ParseEvent]]:
        taken = self._expect(text, FUNCTION_OPEN, final)
        if taken is None:
            return self._fail(text, f"expected {FUNCTION_OPEN}NAME> after {CALL_OPEN}", final)
        end = text.find(">", taken)
        if taken == 0 or end < 0:
            return (
                self._fail(text, "the function name is not closed by '>'", final)
                if final
                else (0, [])
            )
        name = text[taken:end].strip()
        if not name or "<" in name or "\n" in name:
            return self._fail(text, f"bad function name {name!r}", final)
        self.name = name
        self._state = "params"
        return end + 1, [self._event("", start=True)]

    def _in_params(self, text: str, final: bool) -> tuple[int, list[ParseEvent]]:
        for tag in (PARAM_OPEN, FUNCTION_CLOSE, CALL_CLOSE):
            taken = self._expect(text, tag, final)
            if taken:
                return self._after_params_tag(text, tag, taken, final)
        if any(self._expect(text, tag, final) == 0 for tag in NEXT_TAGS):
            return 0, []
        return self._fail(
            text,
            f"expected {PARAM_OPEN}NAME> or {FUNCTION_CLOSE}, got {text.strip()[:40]!r}",
            final,
        )

    def _after_params_tag(
        self, text: str, tag: str, taken: int, final: bool
    ) -> tuple[int, list[ParseEvent]]:
        if tag == PARAM_OPEN:
            end = text.find(">", taken)
            if end < 0:
                return (
                    self._fail(text, "a parameter name is not closed by '>'", final)
                    if final
                    else (0, [])
                )
            self._param = text[taken:end].strip()
            schema = self._schemas.get(self.name or "", {}).get(self._param, {})
            self._value = ValueReader(self._param, schema, first=not self.arguments)
            self._state = "value"
            return end + 1, []
        closing = "}" if self.arguments else "{}"
        if tag == CALL_CLOSE:  # </function> missing: the call still ends here
            self.done = True
        else:
            self._state = "close"
        return taken, [self._event(closing)]

    def _in_value(self, text: str, final: bool) -> tuple[int, list[ParseEvent]]:
        assert self._value is not None
        read = self._value.read(text, final)
        # A repeated parameter is read and dropped: the first value counts.
        duplicate = self._value.name in self.arguments
        events = [] if duplicate else [self._event(fragment) for fragment in read.fragments]
        if not read.complete:
            return read.consumed, events
        if not duplicate:
            self.arguments[self._value.name] = read.value
        self._value = None
        self._state = "params"
        return read.consumed, events

    def _in_close(self, text: str, final: bool) -> tuple[int, list[ParseEvent]]:
        taken = self._expect(text, CALL_CLOSE, final)
        if taken == 0:
            return 0, []
        self.done = True  # a missing </tool_call> is forgiven: the arguments are complete
        return taken or 0, []

    def _in_skip(self, text: str, final: bool) -> tuple[int, list[ParseEvent]]:
        end = text.find(CALL_CLOSE)
        if end >= 0:
            self.done = True
            return end + len(CALL_CLOSE), []
        if final:
            self.done = True
            return len(text), []
        return len(text) - held_prefix(text, (CALL_CLOSE,)), []

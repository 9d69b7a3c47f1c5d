"""Text the TUI shows, computed without textual: numbers, tool-call one-liners, the pane grid,
and a saved conversation turned back into transcript entries.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

MIN_PANE_WIDTH = 60  # narrower than this, panes stack instead of sitting side by side
MIN_PANE_HEIGHT = 12


def format_count(n: int) -> str:
    """Token counts: 950, 12.3K, 131K."""
    if n < 1000:
        return str(n)
    if n < 100_000:
        return f"{n / 1000:.1f}K"
    return f"{round(n / 1000)}K"


def format_rate(tokens_per_second: float) -> str:
    return f"{tokens_per_second:.1f} tok/s"


def format_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 2**30:.1f} GiB"


def format_percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{fraction * 100:.0f}%"


def short_path(path: Path | str) -> str:
    """A folder as the person knows it: under home as ~/..., else absolute."""
    resolved = Path(path).expanduser()
    try:
        return "~/" + str(resolved.relative_to(Path.home()))
    except ValueError:
        return str(resolved)


_MAIN_ARGUMENT = ("command", "path", "pattern", "file_path", "query")


def summarize_call(name: str, arguments: dict[str, Any]) -> str:
    """One line for a tool call: the tool and its main argument, e.g. `run_shell  pytest -q`."""
    for key in _MAIN_ARGUMENT:
        if key in arguments:
            return f"{name}  {str(arguments[key]).splitlines()[0] if arguments[key] else ''}"
    if arguments:
        return f"{name}  {json.dumps(arguments, ensure_ascii=False)[:80]}"
    return name


def grid_shape(panes: int, width: int, height: int) -> tuple[int, int]:
    """Columns and rows for `panes` panes in a width x height area.

    Prefer side by side (terminals are wide); use rows only when the panes would otherwise be
    narrower than MIN_PANE_WIDTH, and never make rows shorter than MIN_PANE_HEIGHT.
    """
    if panes <= 1:
        return 1, 1
    max_cols = max(1, width // MIN_PANE_WIDTH)
    max_rows = max(1, height // MIN_PANE_HEIGHT)
    if panes <= max_cols:
        return panes, 1
    rows = min(math.ceil(panes / max_cols), max_rows)  # balanced: 4 panes -> 2x2, not 3+1
    return math.ceil(panes / rows), rows


EntryKind = Literal["user", "assistant", "reasoning", "tool"]


@dataclass
class HistoryEntry:
    """One block of a transcript rebuilt from saved messages."""

    kind: EntryKind
    text: str = ""
    call_id: str = ""
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    output: str | None = None
    ok: bool = True


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"arguments": str(raw)}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def history_entries(messages: list[dict[str, Any]]) -> list[HistoryEntry]:
    """OpenAI-shaped messages -> transcript entries; tool results join their call's entry."""
    entries: list[HistoryEntry] = []
    calls: dict[str, HistoryEntry] = {}
    for message in messages:
        role = message.get("role")
        text = _content_text(message.get("content"))
        if role == "user":
            entries.append(HistoryEntry("user", text))
        elif role == "assistant":
            if message.get("reasoning_content"):
                entries.append(HistoryEntry("reasoning", str(message["reasoning_content"])))
            if text.strip():
                entries.append(HistoryEntry("assistant", text))
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                entry = HistoryEntry(
                    "tool",
                    call_id=str(call.get("id", "")),
                    tool=str(function.get("name", "?")),
                    arguments=_arguments(function.get("arguments")),
                )
                calls[entry.call_id] = entry
                entries.append(entry)
        elif role == "tool" and (call := calls.get(str(message.get("tool_call_id", "")))):
            call.output = text
    return entries


def format_time(epoch: float) -> str:
    """Local date and time as the resume picker shows and searches it: 2026-11-29 10:22."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


def session_matches(query: str, title: str, workdir: str, updated: float, created: float) -> bool:
    """Resume-picker search: every word of `query` is in the title, folder or a date."""
    haystack = " ".join((title, workdir, format_time(updated), format_time(created))).lower()
    return all(word in haystack for word in query.lower().split())

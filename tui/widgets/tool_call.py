"""One tool call in a transcript: a one-line summary that expands to its output (or diff)."""

from __future__ import annotations

from typing import Any, cast

from rich.syntax import Syntax
from rich.text import Text
from textual.content import Content
from textual.widgets import Collapsible, Static

from tui.formatting import summarize_call

OUTPUT_LIMIT = 20_000  # characters kept on screen; the session keeps the whole output


def _plain(text: str) -> str:
    # A tool's arguments are not markup (`ls [abc]*`). Collapsible takes any Content as its
    # title although it is annotated as str.
    return cast(str, Content(text))


class ToolCallView(Collapsible):
    """`▶ ⋯ run_shell  pytest -q` while running; ✓ or ✗ once done; expands to the output."""

    def __init__(self, call_id: str, name: str, arguments: dict[str, Any]) -> None:
        self.call_id = call_id
        self.summary = summarize_call(name, arguments)
        self.body = Static(Text("running…", style="dim"), classes="tool-output")
        super().__init__(self.body, title=_plain(f"⋯ {self.summary}"), collapsed=True)
        self.add_class("tool-call", "-running")

    def finish(self, ok: bool, output: str, diff: str | None = None) -> None:
        """Show the result: a coloured diff for edits, else the (capped) output."""
        self.remove_class("-running")
        self.add_class("-ok" if ok else "-failed")
        self.title = _plain(f"{'✓' if ok else '✗'} {self.summary}")
        if diff:
            self.body.update(Syntax(diff, "diff", theme="ansi_dark", word_wrap=True))
            return
        text = output if len(output) <= OUTPUT_LIMIT else output[:OUTPUT_LIMIT] + "\n… (cut)"
        self.body.update(Text(text or "(no output)", style="" if ok else "red"))

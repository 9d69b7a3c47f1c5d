"""An agent's conversation as it streams: the person's messages, the answer rendered as
Markdown (code blocks highlighted), the model's reasoning folded away, and tool calls.

The answer streams through Textual's `MarkdownStream`, which batches fragments that arrive
faster than they can be rendered; the view stays pinned to the bottom unless the person
scrolls up.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static
from textual.widgets.markdown import MarkdownStream

from tui.formatting import HistoryEntry
from tui.widgets.tool_call import ToolCallView


class Transcript(VerticalScroll):
    """The scrolling list of blocks of one agent's conversation."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._stream: MarkdownStream | None = None
        self._reasoning: Static | None = None
        self._reasoning_text = ""
        self._calls: dict[str, ToolCallView] = {}

    @property
    def live(self) -> bool:
        """False while the pane is being removed (then late events of its turn are dropped)."""
        return self.is_mounted and self.is_attached

    def on_mount(self) -> None:
        self.anchor()

    async def _add(self, block: Widget) -> None:
        # Events of a turn that was cancelled at quit may arrive while the pane is removed.
        if self.live:
            await self.mount(block)

    async def add_block(self, block: Widget) -> None:
        """Any other block (Slipstream's plan, a report): closes the streaming ones first."""
        await self.end_blocks()
        await self._add(block)

    async def add_user(self, text: str) -> None:
        await self.end_blocks()
        await self._add(Static(Text(text), classes="user-message"))

    async def add_notice(self, text: str, kind: str = "info") -> None:
        """A one-line note from OpenJet itself (turn ended, error, command result)."""
        await self._add(Static(Text(text), classes=f"notice -{kind}"))

    async def append_answer(self, text: str) -> None:
        if not self.live:
            return
        if self._stream is None:
            await self._end_reasoning()
            block = Markdown(classes="answer")
            await self._add(block)
            self._stream = Markdown.get_stream(block)
        await self._stream.write(text)

    async def append_reasoning(self, text: str) -> None:
        if not self.live:
            return
        if self._reasoning is None:
            await self._end_answer()
            self._reasoning = Static(classes="reasoning-text")
            self._reasoning_text = ""
            await self._add(Collapsible(self._reasoning, title="thinking", classes="reasoning"))
        self._reasoning_text += text
        self._reasoning.update(Text(self._reasoning_text, style="italic"))

    async def add_tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> None:
        await self.end_blocks()
        view = ToolCallView(call_id, name, arguments)
        self._calls[call_id] = view
        await self._add(view)

    def finish_tool_call(self, call_id: str, ok: bool, output: str, diff: str | None) -> bool:
        """Fill in a call's result; False when the call is not in this transcript."""
        view = self._calls.get(call_id)
        if view is None:
            return False
        view.finish(ok, output, diff)
        return True

    async def end_blocks(self) -> None:
        """Close the streaming answer and reasoning blocks (the next text starts new ones)."""
        await self._end_answer()
        await self._end_reasoning()

    async def _end_answer(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()

    async def _end_reasoning(self) -> None:
        self._reasoning = None

    async def show_history(self, entries: list[HistoryEntry]) -> None:
        """Rebuild a resumed session's conversation."""
        for entry in entries:
            if entry.kind == "user":
                await self.add_user(entry.text)
            elif entry.kind == "assistant":
                await self.append_answer(entry.text)
            elif entry.kind == "reasoning":
                await self.append_reasoning(entry.text)
            else:
                await self.add_tool_call(entry.call_id, entry.tool, entry.arguments)
                if entry.output is not None:
                    self.finish_tool_call(entry.call_id, entry.ok, entry.output, None)
        await self.end_blocks()

    async def clear(self) -> None:
        await self.end_blocks()
        self._calls.clear()
        await self.remove_children()

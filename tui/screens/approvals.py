"""Every pending approval across agents; Enter jumps to that agent's prompt."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from agent.events import ApprovalRequest


class ApprovalsScreen(ModalScreen[str | None]):
    """Dismisses with the agent id of the chosen approval, or None."""

    CSS_PATH = "approvals.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, pending: list[tuple[str, str, ApprovalRequest]]) -> None:
        super().__init__()
        self.pending = pending  # (agent id, pane label, request), oldest first per pane

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(f"Pending approvals ({len(self.pending)}) — Enter to answer, Esc to close")
            yield OptionList(*(self._option(i, item) for i, item in enumerate(self.pending)))

    @staticmethod
    def _option(index: int, item: tuple[str, str, ApprovalRequest]) -> Option:
        _, label, request = item
        line = Text.assemble((label, "bold"), "  ", (request.tool, "yellow"), "  ", request.summary)
        subject = request.command or request.path
        if subject:
            line.append(f"\n    {subject.splitlines()[0][:100]}", style="dim")
        return Option(line, id=f"approval-{index}")

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.pending[event.option_index][0])

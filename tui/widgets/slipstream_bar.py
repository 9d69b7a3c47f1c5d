"""The line above the footer while any pane is in Slipstream mode: per Slipstream pane, where
its data goes, the orchestrator's share of the tokens ("Orchestrator N%"), and — plainly, in a
strong colour — whether data is being sent to the cloud right now."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

if TYPE_CHECKING:
    from tui.widgets.agent_pane import AgentPane


class SlipstreamBar(Static):
    def __init__(self) -> None:
        super().__init__(id="slipstream-bar")

    def show(self, panes: Sequence[AgentPane]) -> None:
        """Describe every pane whose cloud line is on; hide when there is none."""
        line = Text()
        for pane in panes:
            cloud = pane.cloud
            if not cloud.host:
                continue
            if line:
                line.append("   ")
            line.append(f"☁ {pane.number} ", "bold")
            if cloud.sending:
                line.append(f"⇡ SENDING to {cloud.host}", "bold black on yellow")
            else:
                line.append(f"Slipstream → {cloud.host}", "yellow")
            if pane.orchestrator_share:
                line.append(f"  {pane.orchestrator_share}", "bold")
        self.display = bool(line)
        self.update(line)

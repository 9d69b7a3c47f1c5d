"""The grid of agent panes: its shape follows the terminal's size and the number of panes
(tui/formatting.grid_shape), and one pane can be zoomed to fill it."""

from __future__ import annotations

from textual.containers import Container
from textual.events import Resize

from tui.formatting import grid_shape
from tui.widgets.agent_pane import AgentPane


class PaneGrid(Container):
    def __init__(self) -> None:
        super().__init__(id="grid")

    @property
    def panes(self) -> list[AgentPane]:
        return list(self.query_children(AgentPane))

    @property
    def zoomed(self) -> bool:
        return self.has_class("-zoomed")

    def on_resize(self, event: Resize) -> None:
        self.relayout()

    def relayout(self) -> None:
        panes = self.panes
        shown = 1 if self.zoomed else len(panes)
        cols, rows = grid_shape(shown, self.size.width, self.size.height)
        self.styles.grid_size_columns = cols
        self.styles.grid_size_rows = rows
        for index, pane in enumerate(panes):  # the last pane fills its row: 3 panes = 2 + 1 wide
            last = index == len(panes) - 1 and not self.zoomed
            pane.styles.column_span = cols - index % cols if last else 1

    def zoom_to(self, pane: AgentPane) -> None:
        self.add_class("-zoomed")
        for each in self.panes:
            each.set_class(each is pane, "-zoomed")
        self.relayout()

    def unzoom(self) -> None:
        self.remove_class("-zoomed")
        for each in self.panes:
            each.remove_class("-zoomed")
        self.relayout()

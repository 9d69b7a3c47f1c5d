"""An agent's input box: plain text goes to the agent, `/commands` complete inline (Tab)."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.suggester import Suggester
from textual.widgets import Input

from tui import slash


class SlashSuggester(Suggester):
    """Suggests the completion of a slash command (and of its fixed arguments)."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)

    async def get_suggestion(self, value: str) -> str | None:
        return slash.complete(value)


class PromptInput(Input):
    """`Input` with slash-command completion; Tab accepts the suggestion."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "complete", "Complete", show=False),
    ]

    def __init__(self, id: str | None = None) -> None:
        super().__init__(
            placeholder="Message the agent, or / for commands", suggester=SlashSuggester(), id=id
        )

    def action_complete(self) -> None:
        """Accept the suggestion; without one, Tab moves focus as usual."""
        if self._suggestion and self.value.startswith("/"):
            self.value = self._suggestion
            self.cursor_position = len(self.value)
        else:
            self.screen.focus_next()

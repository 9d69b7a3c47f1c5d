"""Every slash command and every key, in one place (/help, f1)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.slash import COMMANDS

KEYS = (
    ("ctrl+n", "new agent (task, folder, approval mode, model profile)"),
    ("ctrl+r", "resume a saved session"),
    ("ctrl+o", "every pending approval, across agents"),
    ("f6 / shift+f6", "next / previous pane"),
    ("ctrl+g", "zoom the current pane (again: back to the grid)"),
    ("f2", "rename the current agent"),
    ("f8", "close the current agent (its session stays saved)"),
    ("f4", "show / hide the engine panel"),
    ("esc", "stop the current agent's turn"),
    ("tab", "complete a /command"),
    ("a p P d", "in an approval: approve once, allow prefix (agent / project), deny"),
    ("ctrl+q", "quit (sessions are saved; an engine we started is stopped)"),
)


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,f1,q", "app.pop_screen", "Close"),
    ]

    def compose(self) -> ComposeResult:
        commands = Table(title="Slash commands", title_justify="left", show_header=False, box=None)
        commands.add_column(style="bold cyan")
        commands.add_column()
        for spec in COMMANDS:
            commands.add_row(spec.usage, spec.help)
        keys = Table(title="Keys", title_justify="left", show_header=False, box=None)
        keys.add_column(style="bold cyan")
        keys.add_column()
        for key, what in KEYS:
            keys.add_row(key, what)
        with VerticalScroll(id="dialog"):
            yield Static(commands)
            yield Static(keys, classes="keys")
            yield Static("Esc closes this help.", classes="hint")

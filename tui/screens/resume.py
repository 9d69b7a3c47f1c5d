"""The resume picker: saved sessions searchable by title, folder and date, with a preview.
Slipstream sessions are marked ☁ and show their accounting (the orchestrator's share)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Label, Static

from agent.api import AgentManager, SessionSummary
from agent.slipstream_events import Accounting, is_slipstream_session, share_label
from tui.formatting import format_count, format_time, session_matches, short_path


class ResumeScreen(ModalScreen[str | None]):
    """Dismisses with the chosen session id, or None."""

    CSS_PATH = "resume.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("down", "move(1)", "Down", show=False),
        Binding("up", "move(-1)", "Up", show=False),
    ]

    def __init__(self, manager: AgentManager, open_ids: set[str], query: str = "") -> None:
        super().__init__()
        self.manager = manager
        self.open_ids = open_ids
        self.query_text = query
        self.sessions: list[SessionSummary] = []
        self.shown: list[SessionSummary] = []
        self.slipstream: dict[str, Accounting] = {}  # session id -> its accounting

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Resume a session — type to search title, folder or date; Enter opens")
            yield Input(self.query_text, placeholder="search", id="search")
            yield DataTable(cursor_type="row", zebra_stripes=True)
            yield Static(id="preview")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("title", "folder", "updated", "tokens", "status")
        # Open sessions are on screen already (choosing one would only focus it).
        self.sessions = [s for s in self.manager.list_sessions() if s.id not in self.open_ids]
        for session in self.sessions:
            events = self.manager.store.events(session.id)
            if is_slipstream_session(events):
                self.slipstream[session.id] = Accounting.from_events(events)
        self.show(self.query_text)
        self.query_one("#search", Input).focus()

    def show(self, query: str) -> None:
        self.shown = [
            s for s in self.sessions
            if session_matches(query, s.title, s.workdir, s.updated, s.created)
        ]  # fmt: skip
        table = self.query_one(DataTable)
        table.clear()
        for session in self.shown:
            accounting = self.slipstream.get(session.id)
            title = session.title or "(untitled)"
            tokens = session.prompt_tokens + session.completion_tokens
            if accounting is not None:  # both sides: the record counts the orchestrator's only
                title, tokens = (
                    f"☁ {title}",
                    accounting.orchestrator_tokens + accounting.local_tokens,
                )
            table.add_row(
                title,
                short_path(session.workdir),
                format_time(session.updated),
                format_count(tokens),
                session.status,
                key=session.id,
            )
        self._preview()

    @on(Input.Changed, "#search")
    def _search(self, event: Input.Changed) -> None:
        self.show(event.value)

    def action_move(self, step: int) -> None:
        table = self.query_one(DataTable)
        if self.shown:
            table.move_cursor(row=max(0, min(len(self.shown) - 1, table.cursor_row + step)))

    @on(DataTable.RowHighlighted)
    def _preview(self) -> None:
        preview = self.query_one("#preview", Static)
        session = self.current()
        if session is None:
            preview.update(
                Text("No saved session matches." if self.sessions else "No saved sessions yet.")
            )
            return
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim")
        grid.add_column()
        grid.add_row("title", session.title or "(untitled)")
        grid.add_row("folder", session.workdir)
        who = "model" if session.id not in self.slipstream else "orchestrator"
        grid.add_row(who, f"{session.model or '?'} at {session.endpoint}")
        grid.add_row("created", format_time(session.created))
        accounting = self.slipstream.get(session.id)
        if accounting is None:
            grid.add_row(
                "tokens", f"{session.prompt_tokens} prompt, {session.completion_tokens} completion"
            )
        else:
            grid.add_row(
                "slipstream",
                f"{share_label(accounting)} ({accounting.orchestrator_tokens} orchestrator, "
                f"{accounting.local_tokens} local tokens)",
            )
        preview.update(grid)

    def current(self) -> SessionSummary | None:
        row = self.query_one(DataTable).cursor_row
        return self.shown[row] if 0 <= row < len(self.shown) else None

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted, "#search")
    @on(DataTable.RowSelected)
    def _open(self) -> None:
        session = self.current()
        if session is not None:
            self.dismiss(session.id)

"""The new-agent dialog: first task, working folder, approval mode and model profile."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from tui.slash import APPROVAL_MODES


@dataclass(frozen=True)
class NewAgentRequest:
    task: str
    workdir: Path
    approval: str
    profile: str | None


class NewAgentScreen(ModalScreen[NewAgentRequest | None]):
    CSS_PATH = "new_agent.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "create", "Create"),
    ]

    def __init__(
        self, task: str, workdir: Path, approval: str, profiles: list[str], profile: str | None
    ) -> None:
        super().__init__()
        self.first_task, self.workdir, self.approval = task, workdir, approval
        self.profiles, self.profile = profiles, profile

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("New agent", classes="heading")
            yield Label("Task (optional)")
            yield Input(self.first_task, placeholder="What should it do?", id="task")
            yield Label("Working folder")
            yield Input(str(self.workdir), id="workdir")
            with Horizontal(classes="row"):
                with Vertical():
                    yield Label("Approval mode")
                    yield Select(
                        [(mode, mode) for mode in APPROVAL_MODES],
                        value=self.approval,
                        allow_blank=False,
                        id="approval",
                    )
                with Vertical():
                    yield Label("Model profile")
                    yield Select(
                        [("current", "")] + [(name, name) for name in self.profiles],
                        value="",
                        allow_blank=False,
                        id="profile",
                    )
            yield Label("", id="problem")
            with Horizontal(classes="buttons"):
                yield Button("Create (ctrl+s)", variant="primary", id="create")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#task", Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#create")
    @on(Input.Submitted)
    def action_create(self) -> None:
        raw = self.query_one("#workdir", Input).value.strip()
        workdir = Path(raw).expanduser()
        if not raw or not workdir.is_dir():
            self.query_one("#problem", Label).update(Text(f"Not a folder: {raw or '(empty)'}"))
            self.query_one("#workdir", Input).focus()
            return
        profile = self.query_one("#profile", Select).value
        self.dismiss(
            NewAgentRequest(
                task=self.query_one("#task", Input).value.strip(),
                workdir=workdir.resolve(),
                approval=str(self.query_one("#approval", Select).value),
                profile=str(profile) if profile else None,
            )
        )

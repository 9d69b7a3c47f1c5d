"""The progress view while our engine server loads, and the error view when it cannot.

Dismisses with True once the engine answers (reusing one that already does); the person can
quit at any time (the app then stops the engine). The error names the log file and shows its
last lines.
"""

from __future__ import annotations

import asyncio
import time
from typing import ClassVar

import httpx
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, LoadingIndicator, Static

from tui.launcher import ENGINE_START_TIMEOUT_S, EngineProcess, LaunchError, engine_answers

POLL_S = 0.5


class StartupScreen(Screen[bool]):
    CSS_PATH = "startup.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "retry", "Retry"),
        Binding("ctrl+q", "app.quit", "Quit", priority=True),
    ]

    def __init__(
        self, endpoint: str, engine: EngineProcess, timeout: float = ENGINE_START_TIMEOUT_S
    ) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.engine = engine
        self.timeout = timeout
        self.failed = False

    def compose(self) -> ComposeResult:
        with Vertical(id="box"):
            yield Label(Text(f"Starting the OpenJet engine at {self.endpoint}"), id="heading")
            yield LoadingIndicator()
            yield Static(id="progress")
            yield Static(id="log")
        yield Footer()

    def on_mount(self) -> None:
        self.bring_up()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.failed if action == "retry" else True

    @work(exclusive=True, group="engine-start")
    async def bring_up(self) -> None:
        self.failed = False
        self.refresh_bindings()
        async with httpx.AsyncClient() as client:
            if await engine_answers(self.endpoint, client):
                self.dismiss(True)
                return
            try:
                self.engine.start()
            except LaunchError as exc:
                self.show_failure(str(exc))
                return
            started = time.monotonic()
            while True:
                elapsed = time.monotonic() - started
                code = self.engine.exit_code()
                if code is not None:
                    self.show_failure(f"the engine exited with code {code}")
                    return
                if await engine_answers(self.endpoint, client):
                    self.dismiss(True)
                    return
                if elapsed > self.timeout:
                    self.engine.stop()
                    self.show_failure(f"the engine did not answer within {self.timeout:.0f} s")
                    return
                self.show_progress(elapsed)
                await asyncio.sleep(POLL_S)

    def show_progress(self, elapsed: float) -> None:
        self.query_one("#progress", Static).update(
            Text(f"loading… {elapsed:.0f} s   (log: {self.engine.log_path})", style="dim")
        )
        self.query_one("#log", Static).update(Text("\n".join(self.engine.log_tail()), style="dim"))

    def show_failure(self, problem: str) -> None:
        self.failed = True
        self.refresh_bindings()
        self.query_one(LoadingIndicator).display = False
        self.query_one("#heading", Label).update(
            Text(f"The engine did not start: {problem}", "bold red")
        )
        self.query_one("#progress", Static).update(
            Text.assemble(
                "Full log: ",
                (str(self.engine.log_path), "bold"),
                "\n",
                "r retries; ctrl+q quits. `openjet setup` re-checks this machine, or use "
                "`openjet --endpoint URL` for another server.",
            )
        )
        self.query_one("#log", Static).update(Text("\n".join(self.engine.log_tail(20))))

    def action_retry(self) -> None:
        self.query_one(LoadingIndicator).display = True
        self.query_one("#heading", Label).update(
            Text(f"Starting the OpenJet engine at {self.endpoint}")
        )
        self.bring_up()

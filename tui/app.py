"""The OpenJet Textual app: engine start-up (when the engine is ours), then the workspace.

Kept small: screens and widgets do the work. Quitting cancels running turns and Slipstream
runs (the sessions are already saved message by message), closes the agents, and stops an
engine we started.
"""

from __future__ import annotations

from pathlib import Path

from textual.app import App

from agent.api import AgentManager
from openjet.config import Config
from tui.launcher import EngineProcess, Target
from tui.screens.startup import StartupScreen
from tui.screens.workspace import WorkspaceScreen
from tui.widgets.session_pane import is_blank

HERE = Path(__file__).parent
CSS_FILES = [HERE / "app.tcss", *sorted((HERE / "widgets").glob("*.tcss"))]


class OpenJetApp(App[None]):
    TITLE = "OpenJet"
    CSS_PATH = CSS_FILES  # type: ignore[assignment]
    ENABLE_COMMAND_PALETTE = False

    def __init__(
        self,
        target: Target,
        config: Config,
        *,
        manager: AgentManager | None = None,
        engine: EngineProcess | None = None,
        workdir: Path | None = None,
        resume: str | None = None,
        poll_engine: bool = True,
    ) -> None:
        super().__init__()
        self.target = target
        self.config = config
        self.manager = manager or AgentManager(config)
        self.engine = engine if engine is not None else (
            EngineProcess.for_config(config) if target.manage_engine else None
        )  # fmt: skip
        self.workdir = workdir or Path.cwd()
        self.resume_id = resume
        self.poll_engine = poll_engine
        self.theme = str(config.get("tui.theme"))
        self._shut_down = False

    async def on_mount(self) -> None:
        if self.engine is not None:
            await self.push_screen(StartupScreen(self.target.endpoint, self.engine), self._started)
        else:
            await self.open_workspace()

    async def _started(self, ready: bool | None) -> None:
        if ready:
            await self.open_workspace()

    async def open_workspace(self) -> None:
        first = self.resume_id or self.workdir  # a session to resume, or a new agent's folder
        workspace = WorkspaceScreen(self.manager, self.target, self.config, first, self.poll_engine)
        await self.push_screen(workspace)

    def on_unmount(self) -> None:
        # Every exit passes here, a crash included: never leave an engine we started behind.
        if self.engine is not None:
            self.engine.stop()

    async def action_quit(self) -> None:
        failed = isinstance(self.screen, StartupScreen) and self.screen.failed
        await self.shutdown()
        if failed and self.engine is not None:
            self.exit(
                return_code=1, message=f"The engine did not start; its log: {self.engine.log_path}"
            )
        else:
            self.exit()

    async def shutdown(self) -> None:
        """Stop turns and agents; stop the engine only when we started it. Runs once."""
        if self._shut_down:
            return
        self._shut_down = True
        # Slipstream runs first: a run must see its own cancel, not only its worker's.
        slipstream = [
            session
            for screen in self.screen_stack
            if isinstance(screen, WorkspaceScreen)
            for session in screen.slipstream_sessions()
        ]
        for session in slipstream:
            await session.stop()  # before the store closes: the run records where it stopped
        for agent in list(self.manager.agents.values()):
            agent.cancel()
        self.workers.cancel_all()
        for session in slipstream:
            await session.aclose()
        for agent in list(self.manager.agents.values()):
            if is_blank(agent):  # an untouched agent leaves no empty session behind
                self.manager.close(agent.id)
                self.manager.delete_session(agent.id)
        await self.manager.aclose()
        if self.engine is not None:
            self.engine.stop()

"""The main screen: up to four agent panes in an adaptive grid, the engine panel, the footer.

Application-level actions live here: new/close/rename/resume agents, focus and zoom, the
list of every pending approval, and the slash commands a pane hands up (/new, /resume,
/model, /help, /quit). Saved Slipstream sessions are resumed through Slipstream; the bar above
the footer shows each Slipstream pane's orchestrator share and when data goes to the cloud.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Static

from agent.api import Agent, AgentManager, AgentSpec
from agent.profiles import ProfileError
from openjet.config import Config
from tui import messages as msg
from tui.launcher import Target
from tui.screens.approvals import ApprovalsScreen
from tui.screens.help import HelpScreen
from tui.screens.new_agent import NewAgentRequest, NewAgentScreen
from tui.screens.rename import RenameScreen
from tui.screens.resume import ResumeScreen
from tui.slipstream_session import PaneSession, SlipstreamLauncher, SlipstreamSession
from tui.widgets.agent_pane import AgentPane
from tui.widgets.engine_panel import AgentRate, EnginePanel
from tui.widgets.pane_grid import PaneGrid
from tui.widgets.slipstream_bar import SlipstreamBar

MAX_AGENTS = 4


class WorkspaceScreen(Screen[None]):
    CSS_PATH = "workspace.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+n", "new_agent", "New"),
        Binding("ctrl+r", "resume", "Resume"),
        Binding("ctrl+o", "approvals", "Approvals"),
        Binding("f6", "cycle_pane(1)", "Next pane"),
        Binding("shift+f6", "cycle_pane(-1)", "Previous pane", show=False),
        Binding("ctrl+g", "zoom", "Zoom"),
        Binding("f2", "rename", "Rename"),
        Binding("f8", "close_agent", "Close"),
        Binding("f4", "toggle_engine", "Engine"),
        Binding("f1", "help", "Help"),
        Binding("ctrl+q", "app.quit", "Quit", priority=True),
    ]

    def __init__(
        self,
        manager: AgentManager,
        target: Target,
        config: Config,
        first: Path | str,
        poll: bool = True,
    ) -> None:
        super().__init__()
        self.manager = manager
        self.target = target
        self.config = config
        self.default_profile = target.profile
        self._first = first  # a folder: open a new agent there; a str: resume that session
        self._poll = poll
        self._last_pane: AgentPane | None = None
        self.slipstream = SlipstreamLauncher(manager, self.spec)

    async def on_mount(self) -> None:
        # Here rather than in the app: the grid exists only once the screen is composed.
        if isinstance(self._first, str):
            await self._resume_chosen(self._first)
            return
        agent = self.open_agent(self.spec(self._first))
        if agent is not None:
            await self.add_agent(agent)

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield PaneGrid()
            yield EnginePanel(
                self.target.endpoint, str(self.config.get("engine.fallback_reason")), self._poll
            )
        yield Static(
            "No agents. ctrl+n opens a new one, ctrl+r resumes a saved session.", id="empty"
        )
        yield Footer()
        yield SlipstreamBar()

    # -- panes -------------------------------------------------------------------------------

    @property
    def grid(self) -> PaneGrid:
        return self.query_one(PaneGrid)

    @property
    def panes(self) -> list[AgentPane]:
        return self.grid.panes

    def pane_for(self, agent_id: str) -> AgentPane | None:
        """The pane of a session, or of a Slipstream worker (its events carry its own id)."""
        return next((pane for pane in self.panes if pane.owns(agent_id)), None)

    def current_pane(self) -> AgentPane | None:
        node = self.focused
        while node is not None:
            if isinstance(node, AgentPane):
                return node
            node = node.parent  # type: ignore[assignment]
        if self._last_pane is not None and self._last_pane in self.panes:
            return self._last_pane
        return self.panes[0] if self.panes else None

    def on_descendant_focus(self) -> None:
        node = self.focused
        while node is not None and not isinstance(node, AgentPane):
            node = node.parent  # type: ignore[assignment]
        if node is not None:
            self._last_pane = node

    def spec(
        self, workdir: Path, approval: str | None = None, profile: str | None = None
    ) -> AgentSpec:
        """The spec of a new agent: the target's endpoint/model unless a profile is chosen."""
        approval = approval or str(self.config.get("agent.approval"))
        if profile and profile != self.target.profile:
            return AgentSpec(workdir=workdir, approval=approval, profile=profile)
        return AgentSpec(
            workdir=workdir,
            approval=approval,
            profile=self.default_profile,
            endpoint=self.target.explicit_endpoint,
            model=self.target.model,
        )

    async def add_agent(self, agent: PaneSession, task: str | None = None) -> AgentPane:
        used = {pane.number for pane in self.panes}
        number = next(n for n in range(1, MAX_AGENTS + 2) if n not in used)  # lowest free
        pane = AgentPane(agent, number, self.slipstream)
        await self.grid.mount(pane)
        self.relayout()
        pane.focus_input()
        if task:
            await pane.start_turn(task)
        self.refresh_rates()
        return pane

    def open_agent(self, spec: AgentSpec) -> Agent | None:
        if len(self.panes) >= MAX_AGENTS:
            self.notify(f"{MAX_AGENTS} agents at most: close one first (f8).", severity="warning")
            return None
        try:
            return self.manager.create(spec)
        except Exception as exc:  # bad workdir, profile or endpoint: say so, keep running
            self.notify(
                f"Cannot start the agent: {exc}", severity="error", timeout=10, markup=False
            )
            return None

    def relayout(self) -> None:
        self.grid.relayout()
        self.query_one("#empty").display = not self.panes

    # -- actions -----------------------------------------------------------------------------

    def action_new_agent(self, task: str = "") -> None:
        if len(self.panes) >= MAX_AGENTS:
            self.notify(f"{MAX_AGENTS} agents at most: close one first (f8).", severity="warning")
            return
        profiles = sorted({*self.config.profiles(), "local"})
        screen = NewAgentScreen(
            task, Path.cwd(), str(self.config.get("agent.approval")), profiles, self.default_profile
        )
        self.app.push_screen(screen, self._new_agent_chosen)

    async def _new_agent_chosen(self, request: NewAgentRequest | None) -> None:
        if request is None:
            return
        agent = self.open_agent(self.spec(request.workdir, request.approval, request.profile))
        if agent is not None:
            await self.add_agent(agent, request.task or None)

    def action_resume(self, query: str = "") -> None:
        # Open sessions, and the workers of running Slipstream steps, are not offered.
        open_ids = {pane.agent_id for pane in self.panes} | set(self.manager.agents)
        self.app.push_screen(ResumeScreen(self.manager, open_ids, query), self._resume_chosen)

    async def _resume_chosen(self, session_id: str | None) -> None:
        if session_id is None:
            return
        if pane := self.pane_for(session_id):
            pane.focus_input()
            return
        blank = next((pane for pane in self.panes if pane.blank), None)
        if len(self.panes) >= MAX_AGENTS and blank is None:
            self.notify(f"{MAX_AGENTS} agents at most: close one first (f8).", severity="warning")
            return
        try:
            agent: PaneSession = (
                self.slipstream.resume(session_id)
                if self.slipstream.is_slipstream(session_id)
                else self.manager.resume(session_id)
            )
        except Exception as exc:
            self.notify(f"Cannot resume: {exc}", severity="error", timeout=10, markup=False)
            return
        if blank is not None:  # the resumed session takes the place of an untouched agent
            await self.close_pane(blank)
        await self.add_agent(agent)

    def action_approvals(self) -> None:
        pending = [
            (pane.agent_id, f"{pane.number} · {pane.session.title or 'agent'}", prompt.request)
            for pane in self.panes
            for prompt in pane.pending
        ]
        if not pending:
            self.notify("No approvals are pending.")
            return
        self.app.push_screen(ApprovalsScreen(pending), self._approval_chosen)

    def _approval_chosen(self, agent_id: str | None) -> None:
        pane = self.pane_for(agent_id) if agent_id else None
        if pane is None:
            return
        if self.grid.zoomed:
            self.grid.zoom_to(pane)
        pane.focus_next_approval()

    def action_cycle_pane(self, step: int) -> None:
        panes = self.panes
        current = self.current_pane()
        if not panes or current is None:
            return
        target = panes[(panes.index(current) + step) % len(panes)]
        if self.grid.zoomed:
            self.grid.zoom_to(target)
        target.focus_next_approval()

    def action_zoom(self) -> None:
        pane = self.current_pane()
        if self.grid.zoomed or pane is None:
            self.grid.unzoom()
        else:
            self.grid.zoom_to(pane)

    def action_rename(self) -> None:
        pane = self.current_pane()
        if pane is None:
            return

        def renamed(title: str | None) -> None:
            if title:
                pane.session.rename(title)
                pane.refresh_title()
                self.refresh_rates()

        self.app.push_screen(RenameScreen(pane.session.title or ""), renamed)

    async def action_close_agent(self) -> None:
        pane = self.current_pane()
        if pane is not None:
            await self.close_pane(pane)

    async def close_pane(self, pane: AgentPane) -> None:
        """Stop and forget the pane's agent; its session stays saved unless it is empty."""
        blank = pane.blank
        if isinstance(pane.session, SlipstreamSession):
            await pane.session.stop()  # the run records where it stopped: resumable
            await pane.session.aclose()  # and closes its workers
        elif pane.busy:
            pane.session.cancel()
        self.workers.cancel_node(pane)
        self.manager.close(pane.agent_id)
        if blank:
            self.manager.delete_session(pane.agent_id)
        if pane.has_class("-zoomed"):
            self.grid.unzoom()
        await pane.remove()
        self.relayout()
        self.refresh_rates()
        if self.panes:
            self.panes[-1].focus_input()

    def action_toggle_engine(self) -> None:
        panel = self.query_one(EnginePanel)
        panel.display = not panel.display

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    # -- messages from panes -----------------------------------------------------------------

    def on_approval_requested(self, message: msg.ApprovalRequested) -> None:
        pane = self.pane_for(message.agent_id)
        if pane is not None and not pane.has_focus_within:
            self.notify(
                f"Agent {pane.number} asks: {message.request.summary} — ctrl+o to answer",
                severity="warning",
                markup=False,
            )
        self.refresh_rates()

    def on_approval_answered(self) -> None:
        self.call_after_refresh(self.refresh_rates)

    def on_usage_changed(self) -> None:
        self.refresh_rates()

    def on_pane_state_changed(self) -> None:
        self.refresh_rates()

    def on_slipstream_update(self) -> None:
        # After the pane has applied the event (messages bubble once handled).
        self.call_after_refresh(self.refresh_slipstream)

    def refresh_rates(self) -> None:
        rates = [
            AgentRate(f"{p.number} {p.session.title or 'agent'}"[:22], p.tokens_per_second, p.busy)
            for p in self.panes
        ]
        pending = sum(len(p.pending) for p in self.panes)
        self.query_one(EnginePanel).set_agents(rates, pending)
        self.refresh_slipstream()

    def refresh_slipstream(self) -> None:
        if self.is_attached:
            self.query_one(SlipstreamBar).show(self.panes)

    def slipstream_sessions(self) -> list[SlipstreamSession]:
        return [pane.slipstream for pane in self.panes if pane.slipstream is not None]

    @on(msg.SlashEntered)
    async def _slash(self, message: msg.SlashEntered) -> None:
        command = message.command
        if command.name == "new":
            self.action_new_agent(command.argument)
        elif command.name == "resume":
            self.action_resume(command.argument)
        elif command.name == "help":
            self.action_help()
        elif command.name == "quit":
            await self.app.action_quit()
        elif command.name == "model":
            await self._model(message.agent_id, command.argument)

    async def _model(self, agent_id: str, profile: str) -> None:
        pane = self.pane_for(agent_id)
        profiles = sorted({*self.config.profiles(), "local"})
        if not profile:
            where = f"{pane.session.model or '?'} at {pane.session.endpoint}" if pane else "?"
            self.notify(
                f"Model: {where}. Profiles: {', '.join(profiles)} (/model NAME)", markup=False
            )
            return
        if profile not in profiles:
            self.notify(
                f"No profile {profile!r}; profiles: {', '.join(profiles)}", severity="error"
            )
            return
        self.default_profile = profile
        session = pane.session if pane else None
        if not isinstance(session, Agent):
            self.notify(f"New agents use profile {profile!r}.", markup=False)
            return
        try:
            await session.switch_profile(profile)
        except (ProfileError, RuntimeError) as exc:
            self.notify(f"This agent keeps its model: {exc}", severity="error", markup=False)
            return
        self.notify(
            f"This agent and new ones now use profile {profile!r} ({session.endpoint}).",
            markup=False,
        )

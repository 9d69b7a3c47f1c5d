"""What an agent pane shows and how it switches: its session — a plain agent or a Slipstream
run (tui/slipstream_session.py) — the `/mode normal|slipstream` switch, and the flow of a
Slipstream task in the pane: a run started (or a stopped one continued) in the pane's worker
group, its events posted to the pane, its own events applied by `SlipstreamLog`. The agent
turns, approvals, input and commands are `AgentPane`'s (tui/widgets/agent_pane.py).
"""

from __future__ import annotations

from textual.containers import Vertical
from textual.content import Content

from agent.api import Agent
from agent.slipstream_events import CloudActivity, RunFinished, StepStarted
from tui import messages as msg
from tui.slipstream_session import (
    PaneSession,
    SlipstreamLauncher,
    SlipstreamSession,
    endpoint_host,
)
from tui.widgets.slipstream_log import CloudLine, SlipstreamLog, share_text
from tui.widgets.status_line import StatusLine
from tui.widgets.transcript import Transcript


def is_blank(agent: Agent) -> bool:
    """An agent nobody has used yet: its session holds nothing worth keeping or resuming."""
    return agent.status == "idle" and not agent.title and not agent.history()


class SessionPane(Vertical):
    """The session side of an agent pane; `AgentPane` is the whole pane."""

    def __init__(
        self, session: PaneSession, number: int, launcher: SlipstreamLauncher | None = None
    ) -> None:
        super().__init__(id=f"pane-{number}", classes="agent-pane")
        self.session: PaneSession = session
        self.launcher = launcher
        self.number = number
        self.mode = "slipstream" if isinstance(session, SlipstreamSession) else "normal"
        self.approval_mode = session.approval_mode  # of the pane's next task, of either kind
        self.busy = False
        self.tokens_per_second = 0.0
        self._after_tools = False
        self._slipstream_log: SlipstreamLog | None = None

    @property
    def agent(self) -> Agent:
        """The pane's plain agent; a pane showing a Slipstream run has none."""
        if not isinstance(self.session, Agent):
            raise RuntimeError(f"pane {self.number} shows a Slipstream run, not an agent")
        return self.session

    @property
    def slipstream(self) -> SlipstreamSession | None:
        return self.session if isinstance(self.session, SlipstreamSession) else None

    @property
    def agent_id(self) -> str:
        return self.session.id

    def owns(self, agent_id: str) -> bool:
        """Events of this pane carry its session's id, or a Slipstream worker's."""
        run = self.slipstream
        return run.owns(agent_id) if run else agent_id == self.session.id

    @property
    def blank(self) -> bool:
        return not self.busy and isinstance(self.session, Agent) and is_blank(self.session)

    @property
    def cloud(self) -> CloudLine:
        return self.query_one(CloudLine)

    @property
    def orchestrator_share(self) -> str:
        """ "Orchestrator N%" once a Slipstream run counted tokens, else ''."""
        return self.query_one(StatusLine).orchestrator

    @property
    def worker_group(self) -> str:
        return f"agent-{self.number}"

    async def _show_saved_run(self, session: SlipstreamSession) -> None:
        """A resumed Slipstream session: its task, plan, reviews and accounting."""
        transcript = self.query_one(Transcript)
        self.cloud.host = session.host
        await transcript.add_user(session.run.task)
        for event in session.replay():
            session.note(event)
            await self.slipstream_log.apply(event)
        if session.can_continue:
            await transcript.add_notice(
                "this Slipstream run stopped before its end — press Enter to continue it",
                "warning",
            )

    @property
    def slipstream_log(self) -> SlipstreamLog:
        assert self._slipstream_log is not None, "the pane is not mounted"
        return self._slipstream_log

    def refresh_title(self) -> None:
        session = self.session
        title = session.title or "new agent"
        mark = "☁ " if self.mode == "slipstream" else ""
        # The folder's name only: panes are narrow; the resume picker shows the whole path.
        self.border_title = Content(f"{self.number} · {mark}{title} · {session.workdir.name}/")
        if isinstance(session, SlipstreamSession):
            self.border_subtitle = Content(f"Slipstream · {session.model or session.host}")
        else:
            self.border_subtitle = Content(session.model or "")

    # -- Slipstream --------------------------------------------------------------------------

    async def _start_slipstream(self, text: str) -> None:
        """A new run for `text`; empty text continues the pane's stopped run."""
        transcript = self.query_one(Transcript)
        if self.launcher is None:
            await transcript.add_notice("Slipstream is not available here", "error")
            return
        old = self.session
        try:
            if text:
                session = self.launcher.start(old.workdir, text, self.approval_mode)
            elif isinstance(old, SlipstreamSession) and old.can_continue:
                await old.aclose()
                session = self.launcher.resume(old.id)
            else:
                return
        except Exception as exc:  # no key, airgapped, bad folder: say so; nothing was sent
            await transcript.add_notice(
                f"Slipstream cannot start: {exc} — nothing was sent", "error"
            )
            return
        self.session = session
        if text:
            await self._retire(old)
            await transcript.add_user(text)
        else:
            await transcript.add_notice("continuing the Slipstream run")
        self.busy = True
        status = self.query_one(StatusLine)
        status.step, status.activity, status.detail = 0, "planning", ""
        status.plan_step = ""
        status.orchestrator = share_text(session.accounting.share())
        self.cloud.host = session.host
        self.refresh_title()
        self.post_message(msg.PaneStateChanged(self.agent_id))
        self.run_worker(self._run_slipstream(session), name="turn", group=self.worker_group)

    async def _run_slipstream(self, session: SlipstreamSession) -> None:
        try:
            async for event in session.events():
                session.note(event)
                self.post_message(msg.from_slipstream_event(event))
        except Exception as exc:  # a broken run must not take the TUI down
            self.post_message(msg.AgentFailed(self.agent_id, f"{type(exc).__name__}: {exc}"))

    async def _retire(self, old: PaneSession) -> None:
        """Let go of the session the pane showed before (it stays saved unless empty)."""
        assert self.launcher is not None
        if isinstance(old, SlipstreamSession):
            await old.aclose()
            return
        blank = is_blank(old)
        self.launcher.manager.close(old.id)
        if blank:
            self.launcher.manager.delete_session(old.id)
        else:
            await self.query_one(Transcript).add_notice(
                "the conversation above stays saved as its own session (ctrl+r resumes it)"
            )

    async def _open_plain_agent(self) -> bool:
        assert self.launcher is not None  # only a Slipstream session gets here
        old = self.session
        try:
            agent = self.launcher.new_agent(old.workdir, self.approval_mode)
        except Exception as exc:
            await self.query_one(Transcript).add_notice(f"cannot start the agent: {exc}", "error")
            return False
        await self._retire(old)
        self.session = agent
        status = self.query_one(StatusLine)
        status.plan_step, status.orchestrator = "", ""
        self.refresh_title()
        return True

    async def on_slipstream_update(self, message: msg.SlipstreamUpdate) -> None:
        event = message.event
        status = self.query_one(StatusLine)
        if isinstance(event, CloudActivity):
            host = endpoint_host(event.endpoint)
            status.activity, status.detail = (
                ("orchestrator", host) if event.active else ("idle", "")
            )
        elif isinstance(event, StepStarted):
            status.step, status.activity, status.detail = 1, "thinking", ""
            self._after_tools = False
        await self.slipstream_log.apply(event)
        if isinstance(event, RunFinished):
            self.refresh_title()

    async def _set_mode(self, mode: str) -> None:
        transcript = self.query_one(Transcript)
        if mode == self.mode:
            await transcript.add_notice(f"already in {mode} mode")
            return
        if mode == "normal":
            self.mode = "normal"
            if not self.busy:  # a run in progress still talks to the cloud until it ends
                self.cloud.host = ""
            await transcript.add_notice(
                "mode: normal — the next task goes to the local model only; nothing more is "
                "sent to the cloud" + (" once this run ends" if self.busy else "")
            )
        else:
            try:
                if self.launcher is None:
                    raise RuntimeError("no Slipstream launcher in this pane")
                orchestrator = self.launcher.orchestrator()
            except Exception as exc:  # no key, airgapped, unknown profile: nothing was sent
                await transcript.add_notice(f"Slipstream is not available: {exc}", "error")
                return
            self.mode = "slipstream"
            host = endpoint_host(orchestrator.endpoint)
            self.cloud.host = host
            who = orchestrator.model or orchestrator.name
            await transcript.add_notice(
                f"mode: slipstream — {who} at {host} plans and reviews the next task, the local "
                "model does the work. Sent to the cloud: the task, a summary of this folder, "
                "the plan, each step's report with its diff. The worker's transcript stays here.",
                "warning",
            )
        self.refresh_title()
        self.post_message(msg.PaneStateChanged(self.agent_id))

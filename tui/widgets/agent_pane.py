"""One agent's pane: transcript, pending approvals, input box and status line.

The pane owns its agent's turns: each turn runs in a worker of the pane's own group, which
turns the agent's events into messages (tui/messages.py) posted to the pane; the handlers
below update the widgets. An approval suspends only this pane's worker — the other panes'
workers keep running — and the pane's `ApprovalPrompt` sends the answer back to the agent.

`/mode slipstream` makes the pane's next task a Slipstream run (tui/widgets/session_pane.py):
its worker's events are shown by the same handlers as an agent's.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Input, Static
from textual.worker import Worker, WorkerState

from agent.api import Agent
from agent.events import ApprovalChoice
from tui import messages as msg
from tui import slash
from tui.formatting import history_entries
from tui.slash import SlashError
from tui.slipstream_session import SlipstreamSession
from tui.widgets.approval_prompt import ApprovalPrompt
from tui.widgets.prompt_input import PromptInput
from tui.widgets.session_pane import SessionPane
from tui.widgets.slipstream_log import CloudLine, SlipstreamLog
from tui.widgets.status_line import StatusLine
from tui.widgets.transcript import Transcript

PANE_COMMANDS = ("approve", "compact", "clear", "mode")  # handled here; the rest by the workspace
END_NOTICES = {
    "step_limit": ("step limit reached — send a message to continue", "warning"),
    "cancelled": ("stopped", "warning"),
    "error": ("the turn failed", "error"),
}


class AgentPane(SessionPane):
    """The view of one `agent.api.Agent`, or of one Slipstream run."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "stop", "Stop turn")]

    @property
    def pending(self) -> list[ApprovalPrompt]:
        return list(self.query(ApprovalPrompt))

    def compose(self) -> ComposeResult:
        yield Transcript()
        yield Vertical(classes="approvals")
        yield Static(classes="slash-hint")
        yield CloudLine()
        yield PromptInput()
        yield StatusLine()

    async def on_mount(self) -> None:
        self.refresh_title()
        status, transcript = self.query_one(StatusLine), self.query_one(Transcript)
        status.approval_mode = self.approval_mode
        self._slipstream_log = SlipstreamLog(transcript, status, self.cloud)
        session = self.session
        if isinstance(session, SlipstreamSession):
            await self._show_saved_run(session)
            return
        history = session.history()
        if history:
            await transcript.show_history(history_entries(history))
        if session.status == "interrupted" and session.can_continue:
            await transcript.add_notice(
                "this session stopped in the middle of a turn — press Enter to continue it",
                "warning",
            )

    def focus_input(self) -> None:
        self.query_one(PromptInput).focus()

    # -- turns -------------------------------------------------------------------------------

    async def start_turn(self, text: str) -> None:
        if self.busy:
            self.notify("This agent is still working — Esc stops it.", severity="warning")
            return
        # (An empty Enter continues what the pane shows: a stopped run, or an agent's turn.)
        if self.mode == "slipstream" and (text or isinstance(self.session, SlipstreamSession)):
            await self._start_slipstream(text)
            return
        # Back from Slipstream: the next task goes to a new plain agent on the local model.
        if not isinstance(self.session, Agent) and not (text and await self._open_plain_agent()):
            return
        self.busy = True
        self._after_tools = False
        status = self.query_one(StatusLine)
        status.step, status.activity, status.detail = 1, "thinking", ""
        if text:  # empty: continue an interrupted turn
            await self.query_one(Transcript).add_user(text)
        # One worker group per agent: closing the pane cancels exactly this agent's work.
        self.run_worker(self._run_turn(text), name="turn", group=self.worker_group)

    async def _run_turn(self, text: str) -> None:
        try:
            events = self.agent.run_turn(text)
            self.refresh_title()  # the agent names itself after its first task
            async for event in events:
                self.post_message(msg.from_event(event))
        except Exception as exc:  # a broken agent must not take the TUI down
            self.post_message(msg.AgentFailed(self.agent_id, f"{type(exc).__name__}: {exc}"))

    async def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name == "turn" and event.state in (
            WorkerState.SUCCESS,
            WorkerState.ERROR,
            WorkerState.CANCELLED,
        ):
            self.busy = False
            # A stopped turn (or Slipstream run) waits for nothing any more.
            prompts = self.pending
            focused = any(prompt.has_focus or prompt.has_focus_within for prompt in prompts)
            for prompt in prompts:
                await prompt.remove()
            self.remove_class("-needs-approval")
            if focused:
                self.focus_input()
            if self.query_one(StatusLine).activity != "error":
                self.query_one(StatusLine).activity = "idle"
            self.cloud.sending = False
            if self.mode == "normal":
                self.cloud.host = ""
            self.post_message(msg.PaneStateChanged(self.agent_id))

    def action_stop(self) -> None:
        if self.busy:
            self.session.cancel()

    # -- agent events ------------------------------------------------------------------------

    def _next_step_if_tools_done(self) -> None:
        if self._after_tools:
            self._after_tools = False
            self.query_one(StatusLine).step += 1

    async def on_token_delta(self, message: msg.TokenDelta) -> None:
        self._next_step_if_tools_done()
        transcript = self.query_one(Transcript)
        status = self.query_one(StatusLine)
        if message.reasoning:
            status.activity, status.detail = "thinking", ""
            await transcript.append_reasoning(message.text)
        else:
            status.activity, status.detail = "answering", ""
            await transcript.append_answer(message.text)

    async def on_tool_call_started(self, message: msg.ToolCallStarted) -> None:
        self._next_step_if_tools_done()
        status = self.query_one(StatusLine)
        status.activity, status.detail = "running tool", message.name
        await self.query_one(Transcript).add_tool_call(
            message.call_id, message.name, message.arguments
        )

    def on_tool_call_finished(self, message: msg.ToolCallFinished) -> None:
        self._after_tools = True
        status = self.query_one(StatusLine)
        # The model reads the result next.
        status.activity, status.detail = ("thinking" if self.busy else "idle"), ""
        self.query_one(Transcript).finish_tool_call(
            message.call_id, message.ok, message.output, message.diff
        )

    async def on_approval_requested(self, message: msg.ApprovalRequested) -> None:
        had_focus = self.has_focus_within
        prompt = ApprovalPrompt(message.request)
        await self.query_one(".approvals", Vertical).mount(prompt)
        self.add_class("-needs-approval")
        status = self.query_one(StatusLine)
        status.activity, status.detail = "waiting for approval", message.request.tool
        if had_focus:
            prompt.focus()

    async def on_approval_answered(self, message: msg.ApprovalAnswered) -> None:
        with contextlib.suppress(KeyError):  # the turn stopped meanwhile; its prompt goes below
            self.session.resolve_approval(message.request_id, message.decision)
        for prompt in self.pending:
            if prompt.request.id == message.request_id:
                was_focused = prompt.has_focus_within or prompt.has_focus
                await prompt.remove()
                if was_focused:
                    self.focus_next_approval()
        decision = message.decision
        if decision.choice is ApprovalChoice.DENY:
            await self.query_one(Transcript).add_notice(f"denied: {decision.reason}", "warning")
        elif decision.prefix:
            scope = (
                "this agent" if decision.choice is ApprovalChoice.ALLOW_PREFIX_AGENT else "project"
            )
            await self.query_one(Transcript).add_notice(f"`{decision.prefix}` allowed for {scope}")
        if not self.pending:
            self.remove_class("-needs-approval")
            self.query_one(StatusLine).activity = "running tool" if self.busy else "idle"

    def focus_next_approval(self) -> bool:
        """Focus the oldest pending prompt (else the input); True when there was one."""
        prompts = self.pending
        if prompts:
            prompts[0].focus()
            return True
        self.focus_input()
        return False

    def on_usage_changed(self, message: msg.UsageChanged) -> None:
        status = self.query_one(StatusLine)
        self.tokens_per_second = message.tokens_per_second
        status.tokens_per_second = message.tokens_per_second
        status.context_used, status.context_limit = message.context_used, message.context_limit

    async def on_agent_finished(self, message: msg.AgentFinished) -> None:
        transcript = self.query_one(Transcript)
        await transcript.end_blocks()
        if message.reason in END_NOTICES:
            text, kind = END_NOTICES[message.reason]
            await transcript.add_notice(
                f"{text}: {message.message}" if message.message else text, kind
            )
        self.refresh_title()  # the agent may have named itself from the first task

    async def on_agent_failed(self, message: msg.AgentFailed) -> None:
        self.query_one(StatusLine).activity = "error"
        await self.query_one(Transcript).add_notice(f"error: {message.message}", "error")

    # -- input -------------------------------------------------------------------------------

    @on(Input.Changed, "PromptInput")
    def _show_hint(self, event: Input.Changed) -> None:
        hint = self.query_one(".slash-hint", Static)
        hint.display = slash.is_slash(event.value)
        if hint.display:
            hint.update(Text(slash.hint(event.value)))

    @on(Input.Submitted, "PromptInput")
    async def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if not text:
            if self.session.can_continue and not self.busy:
                await self.start_turn("")
            return
        event.input.clear()
        if not slash.is_slash(text):
            await self.start_turn(text)
            return
        try:
            command = slash.parse(text)
        except SlashError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        if command.name in PANE_COMMANDS:
            await self.run_command(command)
        else:
            self.post_message(msg.SlashEntered(self.agent_id, command))

    async def run_command(self, command: slash.SlashCommand) -> None:
        transcript = self.query_one(Transcript)
        if command.name == "approve":
            self.approval_mode = command.argument
            self.query_one(StatusLine).approval_mode = self.approval_mode
            if isinstance(self.session, Agent):
                self.session.set_approval_mode(command.argument)
                await transcript.add_notice(f"approval mode: {self.approval_mode}")
            else:
                if not self.session.run.finished:  # a running or stopped run follows it too
                    self.session.set_approval_mode(command.argument)
                await transcript.add_notice(
                    f"approval mode: {self.approval_mode} (this Slipstream run's workers "
                    "and the next task)"
                )
        elif command.name == "clear":
            if self.busy:
                self.notify("Stop the turn first (Esc).", severity="warning")
                return
            if isinstance(self.session, Agent):
                self.session.clear()
            await transcript.clear()
            await transcript.add_notice("conversation cleared")
        elif command.name == "compact":
            if not isinstance(self.session, Agent):
                await transcript.add_notice(
                    "nothing to compact: every Slipstream step's worker starts with a fresh context"
                )
                return
            self.run_worker(self._compact(), name="compact", group=self.worker_group)
        elif command.name == "mode":
            await self._set_mode(command.argument)

    async def _compact(self) -> None:
        transcript = self.query_one(Transcript)
        await transcript.add_notice("compacting…")
        try:
            await self.agent.compact()
        except Exception as exc:  # reported in the pane; the agent stays usable
            await transcript.add_notice(f"compact failed: {exc}", "error")
            return
        await transcript.add_notice("older turns condensed")

"""The approval prompt inside an agent's pane: the command or the coloured diff, and the choices.

Keys while the prompt has focus: `a` approve once, `p` always allow the command prefix for
this agent, `P` ... for the whole project, `d` deny (then type a reason, Enter sends it).
Only this pane's agent waits; the others keep working.
"""

from __future__ import annotations

from typing import ClassVar

from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Button, Input, Static

from agent.events import ApprovalChoice, ApprovalDecision, ApprovalRequest
from tui.messages import ApprovalAnswered


def suggested_prefix(request: ApprovalRequest) -> str | None:
    """The prefix an 'always allow' answer allows: the agent's suggestion, else the first word."""
    if request.command is None:
        return None
    if request.suggested_prefix:
        return request.suggested_prefix
    words = request.command.split()
    return words[0] if words else None


class ApprovalPrompt(Vertical, can_focus=True):
    """Shows one pending request and posts `ApprovalAnswered` with the person's decision."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "decide('approve')", "Approve once"),
        Binding("p", "decide('agent')", "Allow prefix (agent)"),
        Binding("P", "decide('project')", "Allow prefix (project)"),
        Binding("d", "deny", "Deny…"),
        Binding("escape", "back", "Back", show=False),  # only while typing a reason
    ]

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__(classes="approval")
        self.request = request
        self.prefix = suggested_prefix(request)

    def compose(self) -> ComposeResult:
        request = self.request
        yield Static(Text(f"⚠ {request.tool}: {request.summary}", style="bold"), classes="title")
        with Horizontal(classes="choices"):
            yield Button(Content("[a] Approve once"), id="approve", variant="success", compact=True)
            if self.prefix is not None:
                yield Button(
                    Content(f"[p] Always `{self.prefix}` (agent)"), id="agent", compact=True
                )
                yield Button(
                    Content(f"[P] Always `{self.prefix}` (project)"), id="project", compact=True
                )
            yield Button(Content("[d] Deny…"), id="deny", variant="error", compact=True)
        with VerticalScroll(classes="subject"):
            if request.command is not None:
                yield Static(Syntax(request.command, "bash", theme="ansi_dark", word_wrap=True))
            if request.diff:
                yield Static(Syntax(request.diff, "diff", theme="ansi_dark", word_wrap=True))
            elif request.path:
                yield Static(Text(request.path, style="bold"))
        yield Input(placeholder="Why not? (Enter to send, Esc to go back)", classes="reason")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "decide" and parameters and parameters[0] != "approve":
            return self.prefix is not None
        if action == "back":  # otherwise Esc goes on to the pane: stop the turn
            return self.has_class("-denying")
        return True

    def action_decide(self, which: str) -> None:
        choice = {
            "approve": ApprovalChoice.APPROVE_ONCE,
            "agent": ApprovalChoice.ALLOW_PREFIX_AGENT,
            "project": ApprovalChoice.ALLOW_PREFIX_PROJECT,
        }[which]
        prefix = None if choice is ApprovalChoice.APPROVE_ONCE else self.prefix
        self._answer(ApprovalDecision(choice, prefix=prefix))

    def action_deny(self) -> None:
        self.add_class("-denying")
        self.query_one(".reason", Input).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "deny":
            self.action_deny()
        elif event.button.id:
            self.action_decide(event.button.id)

    @on(Input.Submitted, ".reason")
    def _reason_given(self, event: Input.Submitted) -> None:
        event.stop()
        reason = event.value.strip() or "denied by the user"
        self._answer(ApprovalDecision(ApprovalChoice.DENY, reason=reason))

    def action_back(self) -> None:
        self.remove_class("-denying")
        self.focus()

    def _answer(self, decision: ApprovalDecision) -> None:
        self.post_message(ApprovalAnswered(self.request.agent_id, self.request.id, decision))

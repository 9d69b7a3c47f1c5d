"""Textual messages between the TUI's widgets, and the mapping from agent events to them.

Each agent's turn runs in a worker of its pane; the worker turns every `agent.events` event
into one of these dataclass messages and posts it to the pane, so all UI changes happen in
message handlers (and tests can assert on what was posted). Messages bubble: the workspace
screen sees approvals and usage of every pane.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from agent import events
from agent.events import AgentEvent, ApprovalDecision, ApprovalRequest
from agent.slipstream_events import SlipstreamEvent, WorkerEvent
from tui.slash import SlashCommand


@dataclass
class TokenDelta(Message):
    """Streamed text of the answer (or of the model's reasoning when `reasoning`)."""

    agent_id: str
    text: str
    reasoning: bool = False


@dataclass
class ToolCallStarted(Message):
    agent_id: str
    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolCallFinished(Message):
    agent_id: str
    call_id: str
    name: str
    ok: bool
    output: str
    diff: str | None = None


@dataclass
class ApprovalRequested(Message):
    """An agent waits for a person's decision; its pane shows the prompt."""

    agent_id: str
    request: ApprovalRequest


@dataclass
class ApprovalAnswered(Message):
    """The person decided (posted by the approval prompt, handled by its pane)."""

    agent_id: str
    request_id: str
    decision: ApprovalDecision


@dataclass
class UsageChanged(Message):
    agent_id: str
    prompt_tokens: int
    completion_tokens: int
    tokens_per_second: float
    context_used: int
    context_limit: int


@dataclass
class AgentFinished(Message):
    """A turn ended: `reason` is answer, step_limit, cancelled or error."""

    agent_id: str
    reason: str
    message: str


@dataclass
class AgentFailed(Message):
    agent_id: str
    message: str


@dataclass
class SlashEntered(Message):
    """A slash command the pane cannot handle alone (/new, /resume, /help, /quit, /model...)."""

    agent_id: str
    command: SlashCommand


@dataclass
class PaneStateChanged(Message):
    """A pane's agent changed title or activity; the workspace refreshes the engine panel."""

    agent_id: str


@dataclass
class SlipstreamUpdate(Message):
    """A Slipstream run's own event (plan, step, report, review, accounting, cloud traffic);
    its workers' agent events arrive as the ordinary messages above."""

    agent_id: str  # the run's id, which is the pane's session id
    event: SlipstreamEvent


def from_slipstream_event(event: SlipstreamEvent) -> Message:
    """The message for one Slipstream event: a worker's event as that agent event's message."""
    if isinstance(event, WorkerEvent):
        return from_event(event.event)
    return SlipstreamUpdate(event.run_id, event)


def from_event(event: AgentEvent) -> Message:
    """The message for one agent event."""
    match event:
        case events.AssistantDelta(agent_id, text):
            return TokenDelta(agent_id, text)
        case events.ReasoningDelta(agent_id, text):
            return TokenDelta(agent_id, text, reasoning=True)
        case events.ToolCallStarted(agent_id, call_id, name, arguments):
            return ToolCallStarted(agent_id, call_id, name, dict(arguments))
        case events.ToolCallFinished(agent_id, call_id, name, ok, output, diff):
            return ToolCallFinished(agent_id, call_id, name, ok, output, diff)
        case events.ApprovalRequested(agent_id, request):
            return ApprovalRequested(agent_id, request)
        case events.UsageUpdated(agent_id, prompt, completion, rate, used, limit):
            return UsageChanged(agent_id, prompt, completion, rate, used, limit)
        case events.TurnFinished(agent_id, reason, message):
            return AgentFinished(agent_id, reason, message)
        case events.AgentError(agent_id, message):
            return AgentFailed(agent_id, message)
    raise TypeError(f"unknown agent event {event!r}")

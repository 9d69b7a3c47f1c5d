"""What an agent reports while it works: the events its public API yields, and approvals.

Every event is a frozen dataclass carrying the `agent_id` it belongs to, so one consumer (the
TUI, `openjet run`, Slipstream) can multiplex several agents. Approvals are the only way a
person answers an agent: an `ApprovalRequest` goes out as an `ApprovalRequested` event and comes
back as an `ApprovalDecision` through `Agent.resolve_approval` — never from anything the model
reads or writes. This module imports nothing from textual, the engine or the rest of the agent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

TurnEndReason = Literal["answer", "step_limit", "cancelled", "error"]


class ApprovalChoice(enum.Enum):
    """The answers a person can give to an approval request."""

    APPROVE_ONCE = "approve_once"
    ALLOW_PREFIX_AGENT = "allow_prefix_agent"  # this command prefix runs unasked for this agent
    ALLOW_PREFIX_PROJECT = "allow_prefix_project"  # ... for every agent in this workspace
    DENY = "deny"


@dataclass(frozen=True)
class ApprovalRequest:
    """One edit or command waiting for a person's decision.

    `command` is set for `run_shell`, `diff` and `path` for file edits. `suggested_prefix` is
    the command prefix an ALLOW_PREFIX_* answer allows when the decision names none.
    """

    id: str
    agent_id: str
    tool: str
    summary: str
    command: str | None = None
    diff: str | None = None
    path: str | None = None
    suggested_prefix: str | None = None


@dataclass(frozen=True)
class ApprovalDecision:
    """A person's answer; `reason` goes back to the model when the choice is DENY."""

    choice: ApprovalChoice
    reason: str = ""
    prefix: str | None = None


@dataclass(frozen=True)
class AssistantDelta:
    agent_id: str
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    agent_id: str
    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    agent_id: str
    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ApprovalRequested:
    agent_id: str
    request: ApprovalRequest


@dataclass(frozen=True)
class ToolCallFinished:
    agent_id: str
    call_id: str
    name: str
    ok: bool
    output: str
    diff: str | None = None


@dataclass(frozen=True)
class UsageUpdated:
    agent_id: str
    prompt_tokens: int
    completion_tokens: int
    tokens_per_second: float
    context_used: int
    context_limit: int


@dataclass(frozen=True)
class TurnFinished:
    agent_id: str
    reason: TurnEndReason
    message: str


@dataclass(frozen=True)
class AgentError:
    agent_id: str
    message: str


AgentEvent = (
    AssistantDelta
    | ReasoningDelta
    | ToolCallStarted
    | ApprovalRequested
    | ToolCallFinished
    | UsageUpdated
    | TurnFinished
    | AgentError
)

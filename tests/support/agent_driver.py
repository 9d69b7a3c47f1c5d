"""Drives an agent's turn in tests: collects its events and answers approvals like a person."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from agent.api import Agent
from agent.events import (
    AgentEvent,
    ApprovalChoice,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
)

E = TypeVar("E")
Decider = Callable[[ApprovalRequest], ApprovalDecision]


def approve_all(_: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(ApprovalChoice.APPROVE_ONCE)


async def drive(agent: Agent, text: str, decide: Decider = approve_all) -> list[AgentEvent]:
    """Run one turn to its end; every approval request is answered by `decide`."""
    events: list[AgentEvent] = []
    async for event in agent.run_turn(text):
        events.append(event)
        if isinstance(event, ApprovalRequested):
            agent.resolve_approval(event.request.id, decide(event.request))
    return events


def of_type(events: list[AgentEvent], kind: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, kind)]

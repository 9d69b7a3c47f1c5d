"""Running one assistant message's tool calls, in order: parse, prepare, approve, execute.

Every call ends with exactly one stored tool result — its output, an error the model can act
on, a refusal or denial with the reason, or "cancelled" when the turn stopped first — so the
stored conversation is always valid. Approvals wait for `resolve` (the person, through the
API); nothing the model reads or writes reaches that path.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from agent.approvals import ApprovalPolicy, suggest_prefix
from agent.cancel import CancelSignal
from agent.events import (
    AgentEvent,
    ApprovalChoice,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from agent.sessions import SessionStore
from agent.tools import PreparedCall, ToolContext, ToolError, prepare_call

CANCELLED_RESULT = "cancelled: the user stopped the turn before this call finished"
INTERRUPTED_RESULT = (
    "interrupted: the agent stopped (crash or kill) before this call finished; "
    "check the current state before trying it again"
)


@dataclass
class PendingApproval:
    request: ApprovalRequest
    future: asyncio.Future[ApprovalDecision]


class CallRunner:
    """Executes tool calls for one agent and holds its pending approvals."""

    def __init__(
        self,
        agent_id: str,
        store: SessionStore,
        policy: ApprovalPolicy,
        tools: ToolContext,
        cancel: CancelSignal,
        set_status: Callable[[str], None],
    ) -> None:
        self.agent_id = agent_id
        self.store = store
        self.policy = policy
        self.tools = tools
        self.cancel = cancel
        self.set_status = set_status
        self.pending: dict[str, PendingApproval] = {}

    def resolve(self, request_id: str, decision: ApprovalDecision) -> None:
        if not isinstance(decision, ApprovalDecision):
            raise TypeError("decision must be an ApprovalDecision")
        pending = self.pending.get(request_id)
        if pending is None:
            raise KeyError(f"no pending approval with id {request_id!r}")

        def settle() -> None:
            if not pending.future.done():
                pending.future.set_result(decision)

        self.cancel.call_soon(settle)

    def withdraw_all(self) -> None:
        for pending in self.pending.values():
            pending.future.cancel()
        self.pending.clear()

    async def run_calls(self, calls: list[dict[str, Any]]) -> AsyncGenerator[AgentEvent, None]:
        answered: set[str] = set()
        try:
            for call in calls:
                async with aclosing(self._run_call(call)) as events:
                    async for event in events:
                        yield event
                answered.add(call["id"])
        finally:
            for call in calls:
                if call["id"] not in answered:
                    self.store_result(call["id"], call["function"]["name"], CANCELLED_RESULT, False)

    def store_result(self, call_id: str, name: str, text: str, ok: bool) -> None:
        message = {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}
        self.store.append_message(self.agent_id, message)
        event = {"call_id": call_id, "name": name, "ok": ok}
        self.store.append_event(self.agent_id, "tool_result", event)

    async def _run_call(self, call: dict[str, Any]) -> AsyncGenerator[AgentEvent, None]:
        call_id, name = call["id"], str(call["function"].get("name") or "")
        args, problem = parse_arguments(call["function"].get("arguments"))
        yield ToolCallStarted(self.agent_id, call_id, name, args)
        diff = None
        try:
            if problem:
                raise ToolError(problem)
            prepared = prepare_call(self.tools, name, args)
            async with aclosing(self._approve(call_id, prepared)) as approval:
                async for event in approval:
                    yield event
            output = await self.cancel.race(prepared.run())
            ok, text, diff = True, output.text, output.diff
        except ToolError as exc:
            ok, text = False, f"Error: {exc}"
        except OSError as exc:
            ok, text = False, f"Error: {exc.strerror or exc} ({exc.filename or name})"
        self.store_result(call_id, name, text, ok)
        yield ToolCallFinished(self.agent_id, call_id, name, ok, text, diff)

    async def _approve(
        self, call_id: str, prepared: PreparedCall
    ) -> AsyncGenerator[AgentEvent, None]:
        """Yields an ApprovalRequested and waits when the policy asks; raises ToolError on no."""
        verdict = self.policy.check(prepared)
        if verdict.action == "deny":
            raise ToolError(f"refused: {verdict.reason}")
        if verdict.action == "allow":
            return
        request = request_for(self.agent_id, prepared)
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self.pending[request.id] = PendingApproval(request, future)
        self.set_status("awaiting_approval")
        asked = {"id": request.id, "call_id": call_id, "summary": request.summary}
        self.store.append_event(self.agent_id, "approval_requested", asked)
        yield ApprovalRequested(self.agent_id, request)
        try:
            decision = await self.cancel.race(future)
        finally:
            self.pending.pop(request.id, None)
        self.set_status("running")
        self._apply(request, decision)

    def _apply(self, request: ApprovalRequest, decision: ApprovalDecision) -> None:
        decided = {"id": request.id, "choice": decision.choice.value, "reason": decision.reason}
        self.store.append_event(
            self.agent_id, "approval_decided", {**decided, "prefix": decision.prefix}
        )
        if decision.choice is ApprovalChoice.DENY:
            why = f": {decision.reason}" if decision.reason else ""
            raise ToolError(f"the user denied this call{why}. Do not retry it unchanged.")
        prefix = decision.prefix or request.suggested_prefix
        if request.command is None or not prefix:
            return  # an edit: ALLOW_PREFIX_* answers mean "yes, this once"
        if decision.choice is ApprovalChoice.ALLOW_PREFIX_AGENT:
            self.policy.allow_for_agent(prefix)
            self.store.update(self.agent_id, allow_prefixes=self.policy.agent_prefixes)
        elif decision.choice is ApprovalChoice.ALLOW_PREFIX_PROJECT:
            self.store.add_project_prefix(str(self.tools.workspace.root), prefix)

    def repair_interrupted(self, messages: list[dict[str, Any]]) -> int:
        """After a crash: answer the tool calls that never got a result. Returns how many."""
        last = next((m for m in reversed(messages) if m.get("tool_calls")), None)
        if last is None:
            return 0
        answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
        missing = [c for c in last["tool_calls"] if c.get("id") not in answered]
        for call in missing:
            name = call["function"].get("name", "")
            self.store_result(call["id"], name, INTERRUPTED_RESULT, False)
        return len(missing)


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    if isinstance(raw, dict):
        return raw, None
    try:
        value = json.loads(raw or "{}")
    except (json.JSONDecodeError, TypeError) as exc:
        return {}, f"the arguments are not valid JSON ({exc}); send a JSON object"
    if not isinstance(value, dict):
        return {}, "the arguments must be a JSON object"
    return value, None


def request_for(agent_id: str, prepared: PreparedCall) -> ApprovalRequest:
    return ApprovalRequest(
        id=uuid.uuid4().hex,
        agent_id=agent_id,
        tool=prepared.name,
        summary=prepared.summary,
        command=prepared.command,
        diff=prepared.diff,
        path=prepared.path,
        suggested_prefix=suggest_prefix(prepared.command) if prepared.command else None,
    )

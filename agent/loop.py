"""One turn of an agent: model → tool calls → approvals → execution → results, until an answer.

`AgentLoop.run` is an async generator of `AgentEvent`s. Every message is stored the moment it
is complete (the user's, each assistant message, each tool result), so the session on disk is
always a valid OpenAI conversation up to the last finished step. Every wait is raced against
the cancel signal (`agent.cancel`): `cancel()` stops the model stream (its producer task is
cancelled, which closes the HTTP stream), kills a running command's process group, or withdraws
a pending approval; calls that did not finish get a "cancelled" result (`agent.calls`).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from agent.approvals import ApprovalPolicy
from agent.calls import CallRunner, PendingApproval
from agent.cancel import CancelSignal, TurnCancelled
from agent.context import ContextWindow
from agent.events import (
    AgentError,
    AgentEvent,
    ApprovalDecision,
    AssistantDelta,
    ReasoningDelta,
    TurnFinished,
    UsageUpdated,
)
from agent.llm import Completion, LLMClient, LLMError
from agent.sessions import SessionStore
from agent.textcalls import ThinkSplitter, extract_text_calls, split_thinking
from agent.tools import TOOL_SCHEMAS, ToolContext


class AgentLoop:
    """Runs the turns of one agent; owns its cancel signal and pending approvals."""

    def __init__(
        self,
        agent_id: str,
        store: SessionStore,
        llm: LLMClient,
        window: ContextWindow,
        policy: ApprovalPolicy,
        tools: ToolContext,
        max_steps: int,
    ) -> None:
        self.agent_id = agent_id
        self.store = store
        self.llm = llm
        self.window = window
        self.policy = policy
        self.tools = tools
        self.max_steps = max_steps
        self.running = False
        self.status = "idle"
        self._cancel = CancelSignal()
        self.calls = CallRunner(agent_id, store, policy, tools, self._cancel, self._set_status)
        self._partial = ""

    def _set_status(self, status: str) -> None:
        self.status = status
        self.store.update(self.agent_id, status=status)

    @property
    def pending(self) -> dict[str, PendingApproval]:
        return self.calls.pending

    # --- control, callable from any thread -------------------------------------------------
    def cancel(self) -> None:
        if self.running:
            self._cancel.fire()

    def resolve(self, request_id: str, decision: ApprovalDecision) -> None:
        self.calls.resolve(request_id, decision)

    # --- the turn ---------------------------------------------------------------------------
    def can_continue(self) -> bool:
        _, messages = self.window.active()
        return bool(messages) and messages[-1][1].get("role") in ("user", "tool")

    async def run(self, text: str) -> AsyncIterator[AgentEvent]:
        if self.running:
            yield AgentError(self.agent_id, "a turn is already running for this agent")
            return
        self.running = True
        self._cancel.arm()
        self._set_status("running")
        finished: TurnFinished | None = None
        try:
            async with aclosing(self._turn(text)) as steps:
                async for event in steps:
                    if isinstance(event, TurnFinished):
                        finished = event
                    yield event
        except TurnCancelled:
            finished = TurnFinished(self.agent_id, "cancelled", "cancelled by the user")
            yield finished
        except LLMError as exc:
            self.store.append_event(self.agent_id, "error", {"message": str(exc)})
            yield AgentError(self.agent_id, str(exc))
            finished = TurnFinished(self.agent_id, "error", str(exc))
            yield finished
        finally:
            self._end(finished)

    def _end(self, finished: TurnFinished | None) -> None:
        self.calls.withdraw_all()
        self.running = False
        reason = finished.reason if finished else "cancelled"
        self._set_status("error" if reason == "error" else "idle")
        self.store.append_event(self.agent_id, "turn_finished", {"reason": reason})

    async def _turn(self, text: str) -> AsyncGenerator[AgentEvent, None]:
        if text.strip():
            self.store.append_message(self.agent_id, {"role": "user", "content": text})
        elif not self.can_continue():
            yield TurnFinished(self.agent_id, "error", "nothing to continue: send a message")
            return
        model = await self._cancel.race(self.llm.resolve_model())
        if self.store.get(self.agent_id).model != model:  # learnt from the endpoint's /models
            self.store.update(self.agent_id, model=model)
        if self.window.size_from_endpoint:
            size = await self._cancel.race(self.llm.endpoint_context_size())
            self.window.size_from_endpoint = False
            if size:
                self.window.context_size = size
        for _ in range(self.max_steps):
            if self.window.over_budget():
                await self._cancel.race(self.window.condense(self.llm))
            completion: Completion | None = None
            async with aclosing(self._call_model()) as stream:
                async for item in stream:
                    if isinstance(item, Completion):
                        completion = item
                    else:
                        yield item
            assert completion is not None
            message = self._store_assistant(completion)
            yield self._usage(completion)
            if not message.get("tool_calls"):
                yield TurnFinished(self.agent_id, "answer", message.get("content") or "")
                return
            async with aclosing(self.calls.run_calls(message["tool_calls"])) as calls:
                async for event in calls:
                    yield event
        yield TurnFinished(
            self.agent_id,
            "step_limit",
            f"stopped after {self.max_steps} model calls (the step limit); send a message to go on",
        )

    async def _call_model(self) -> AsyncGenerator[AgentEvent | Completion, None]:
        """One model call; when the server says the prompt is too long (our estimate was off),
        condense and try once more."""
        for attempt in range(2):
            try:
                async with aclosing(self._stream_model()) as stream:
                    async for item in stream:
                        yield item
                return
            except LLMError as exc:
                if attempt or not exc.context_overflow:
                    raise
                if await self._cancel.race(self.window.condense(self.llm)) == "nothing":
                    raise

    async def _stream_model(self) -> AsyncGenerator[AgentEvent | Completion, None]:
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        messages = self.window.request_messages()
        splitter = ThinkSplitter()

        def on_delta(kind: str, text: str) -> None:
            for piece in splitter.feed(text) if kind == "content" else [(kind, text)]:
                queue.put_nowait(piece)

        async def produce() -> None:
            try:
                done = await self.llm.stream_chat(messages, TOOL_SCHEMAS, on_delta=on_delta)
                for piece in splitter.flush():
                    queue.put_nowait(piece)
                queue.put_nowait(("done", done))
            except Exception as exc:
                queue.put_nowait(("error", exc))

        self._partial = ""
        producer = asyncio.create_task(produce())
        try:
            while True:
                kind, value = await self._cancel.race(queue.get())
                if kind == "content":
                    self._partial += value
                    yield AssistantDelta(self.agent_id, value)
                elif kind == "reasoning":
                    yield ReasoningDelta(self.agent_id, value)
                elif kind == "done":
                    yield value
                    return
                else:
                    raise value
        except (TurnCancelled, GeneratorExit, asyncio.CancelledError):
            if self._partial.strip():  # keep what the person already saw
                partial = {"role": "assistant", "content": self._partial, "cancelled": True}
                self.store.append_message(self.agent_id, partial)
            raise
        finally:
            producer.cancel()
            with contextlib.suppress(BaseException):
                await producer

    def _store_assistant(self, completion: Completion) -> dict[str, Any]:
        reasoning, content = split_thinking(completion.content)
        calls = completion.tool_calls
        if not calls:
            content, calls = extract_text_calls(content)
        for call in calls:
            call["id"] = call.get("id") or f"call_{uuid.uuid4().hex[:16]}"
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = calls
        if completion.reasoning or reasoning:
            message["reasoning_content"] = completion.reasoning or reasoning
        self.store.append_message(self.agent_id, message)
        return message

    def _usage(self, completion: Completion) -> UsageUpdated:
        self.store.add_tokens(self.agent_id, completion.prompt_tokens, completion.completion_tokens)
        self.window.note_usage(completion.prompt_tokens, completion.completion_tokens)
        record = self.store.get(self.agent_id)
        used = completion.prompt_tokens + completion.completion_tokens or self.window.estimate()
        self.store.append_event(
            self.agent_id,
            "usage",
            {
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
                "tokens_per_second": completion.tokens_per_second,
            },
        )
        return UsageUpdated(
            self.agent_id,
            record.prompt_tokens,
            record.completion_tokens,
            completion.tokens_per_second,
            used,
            self.window.context_size,
        )

    def repair_interrupted(self) -> int:
        """After a crash: answer the tool calls that never got a result."""
        _, messages = self.window.active()
        return self.calls.repair_interrupted([m for _, m in messages])

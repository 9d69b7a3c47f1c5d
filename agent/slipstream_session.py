"""The session side of a Slipstream run: bookkeeping, cancellation, and the orchestrator.

Every decision is appended to the Slipstream session's events (and replayed into `RunState`)
before the run acts on it; every request to the orchestrator and every reply is appended to the
session's messages, which are the orchestrator's conversation. `consult` asks the orchestrator
one thing, corrects one reply that breaks the protocol, and on a second bad reply or a failed
call switches the run to local-only and tells the person (`CloudFailed`). `CloudActivity`
brackets every call so a consumer can show while data goes to the cloud.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agent.api import Agent, AgentManager
from agent.approvals import check_mode
from agent.context import load_prompt
from agent.events import ApprovalDecision
from agent.profiles import Profile
from agent.sessions import SessionRecord
from agent.slipstream_cloud import CloudError, OrchestratorClient
from agent.slipstream_events import (
    Accounting,
    AccountingUpdated,
    CloudActivity,
    CloudFailed,
    RunFinished,
    SlipstreamEvent,
)
from agent.slipstream_protocol import PlanStep, ProtocolError
from agent.slipstream_state import RunState

T = TypeVar("T")
DIFF_BLOCK = re.compile(r"\n\nDiff:\n```diff\n.*?\n```", re.DOTALL)  # as build_report writes it
DIFF_ELIDED = "\n\nDiff: [omitted here: reviewed in an earlier message]"


class RunCancelled(Exception):
    pass


class RunStopped(Exception):
    """The run cannot go on now (the local worker failed); a resume retries where it stopped."""


@dataclass
class Answer:
    """The last item of a generator that also yields events: its result."""

    value: Any  # None when the cloud failed and the run went local


class RunBase:
    """A run's session bookkeeping and its conversation with the orchestrator; the flow of
    steps is `SlipstreamRun`'s (agent.slipstream_run)."""

    def __init__(self, manager: AgentManager, record: SessionRecord, orchestrator: Profile) -> None:
        self.id = record.id
        self.manager = manager
        self.store = manager.store
        self.workdir = Path(record.workdir)
        self.state = RunState.from_events(self.store.events(record.id))
        self.orchestrator_endpoint = orchestrator.endpoint
        config = manager.config
        self.client = OrchestratorClient(
            orchestrator.endpoint,
            orchestrator.model,
            orchestrator.api_key,
            timeout_s=float(config.get("slipstream.timeout_s")),
            max_wait_s=float(config.get("slipstream.max_wait_s")),
        )
        self.worker: Agent | None = None
        self.running = False
        self._cancelled = False
        self._cloud_task: asyncio.Future[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cloud_active = False  # between CloudActivity(True) and (False)

    # --- public surface ------------------------------------------------------------------
    @property
    def task(self) -> str:
        return self.state.task

    @property
    def steps(self) -> list[PlanStep]:
        return list(self.state.plan)

    @property
    def accounting(self) -> Accounting:
        return self.state.accounting

    @property
    def settings(self) -> dict[str, Any]:
        return self.state.settings

    @property
    def finished(self) -> bool:
        return self.state.finished is not None

    def set_approval_mode(self, mode: str) -> None:
        """Change the run's approvals: the current worker at once, and every later one."""
        mode = check_mode(mode)
        self._record("slipstream_approval", {"approval": mode})
        if self.worker is not None:
            self.worker.set_approval_mode(mode)

    def resolve_approval(self, request_id: str, decision: ApprovalDecision) -> None:
        """Answer an approval of the current worker (from a `WorkerEvent`)."""
        if self.worker is not None:
            self.worker.resolve_approval(request_id, decision)

    def cancel(self) -> None:
        """Stop the run (callable from any thread); `resume` continues it later."""
        self._cancelled = True
        if self.worker is not None:
            self.worker.cancel()
        task = self._cloud_task
        if self._loop is not None and task is not None:
            self._loop.call_soon_threadsafe(task.cancel)

    async def aclose(self) -> None:
        self.cancel()
        for worker_id in set(self.state.worker_ids.values()):
            self.manager.close(worker_id)
        await self.client.aclose()

    async def run(self) -> AsyncIterator[SlipstreamEvent]:
        if self.running:
            raise RuntimeError("this Slipstream run is already running")
        self.running, self._cancelled = True, False
        self._loop = asyncio.get_running_loop()
        self.store.update(self.id, status="running")
        stopped: RunFinished | None = None
        try:
            async for event in self._drive():
                yield event
        except RunCancelled:
            self._record("slipstream_cancelled", {})
            stopped = RunFinished(self.id, "cancelled", "cancelled; resume continues at this step")
        except Exception as exc:  # the session stays consistent: resume retries this step
            message = str(exc) if isinstance(exc, RunStopped) else f"{type(exc).__name__}: {exc}"
            self._record("slipstream_error", {"message": message})
            stopped = RunFinished(self.id, "error", message + "; resume continues at this step")
        finally:
            self.running = False
            self.store.update(self.id, status=self._status(stopped))
        if stopped is not None:
            if self._cloud_active:
                self._cloud_active = False
                yield CloudActivity(self.id, False, self.orchestrator_endpoint)
            yield stopped

    def _status(self, stopped: RunFinished | None) -> str:
        finished = self.state.finished
        if finished is not None:
            return str(finished["reason"])
        return "error" if stopped and stopped.reason == "error" else "idle"

    # --- bookkeeping -----------------------------------------------------------------------
    def _record(self, kind: str, data: dict[str, Any]) -> None:
        self.store.append_event(self.id, kind, data)
        self.state.apply(kind, data)

    def _count(self, bucket: str, side: str, sent: int, received: int) -> AccountingUpdated:
        self._record(
            "slipstream_tokens",
            {"bucket": bucket, "side": side, "sent": sent, "received": received},
        )
        if side == "orchestrator":
            self.store.add_tokens(self.id, sent, received)
        a = self.state.accounting
        return AccountingUpdated(self.id, a.orchestrator_tokens, a.local_tokens, a.share())

    def _finish(self, reason: str, message: str) -> RunFinished:
        self._record("slipstream_finished", {"reason": reason, "message": message})
        return RunFinished(self.id, reason, message)  # type: ignore[arg-type]

    async def _cancellable(self, work: Awaitable[T]) -> T:
        if self._cancelled:
            asyncio.ensure_future(work).cancel()  # never started: close it cleanly
            raise RunCancelled()
        task = asyncio.ensure_future(work)
        self._cloud_task = task
        try:
            return await task
        except asyncio.CancelledError:
            if self._cancelled:
                raise RunCancelled() from None
            raise
        finally:
            self._cloud_task = None

    # --- the orchestrator ------------------------------------------------------------------
    def _request_messages(self) -> list[dict[str, Any]]:
        """The orchestrator's conversation; reports before the latest one lose their diff (it
        was reviewed already), so the context grows by reports, not by whole diffs."""
        system = {"role": "system", "content": load_prompt("slipstream_orchestrator")}
        stored = [m for _, m in self.store.messages(self.id)]
        reports = [i for i, m in enumerate(stored) if DIFF_BLOCK.search(str(m["content"]))]
        latest = reports[-1] if reports else -1
        messages = [system]
        for i, m in enumerate(stored):
            content = m["content"]
            if i in reports and i != latest:
                content = DIFF_BLOCK.sub(DIFF_ELIDED, content)
            messages.append({"role": m["role"], "content": content})
        return messages

    def _ask_user(self, meta: dict[str, Any], text: str) -> None:
        """Store the request, unless a crashed run already stored it and got no answer."""
        stored = self.store.messages(self.id)
        last = stored[-1][1] if stored else {}
        pending = last.get("role") == "user" and {
            k: last.get("slipstream", {}).get(k) for k in ("kind", "index")
        } == {k: meta[k] for k in ("kind", "index")}
        if not pending:
            self.store.append_message(
                self.id, {"role": "user", "content": text, "slipstream": meta}
            )

    async def _consult(
        self, kind: str, index: int, text: str, parse: Callable[[str], Any]
    ) -> AsyncGenerator[SlipstreamEvent | Answer, None]:
        """Ask the orchestrator; a reply that breaks the protocol is corrected once."""
        meta = {"kind": kind, "index": index}
        bucket = {"plan": "plan", "final": "final"}.get(kind, f"step {index + 1}")
        self._ask_user(meta, text)
        for attempt in (1, 2):
            self._cloud_active = True
            yield CloudActivity(self.id, True, self.orchestrator_endpoint)
            try:
                reply = await self._cancellable(self.client.chat(self._request_messages()))
            except CloudError as exc:
                self._cloud_active = False
                yield CloudActivity(self.id, False, self.orchestrator_endpoint)
                yield self._go_local(f"the orchestrator failed ({exc.kind}): {exc}")
                yield Answer(None)
                return
            self._cloud_active = False
            yield CloudActivity(self.id, False, self.orchestrator_endpoint)
            if self.store.get(self.id).model != self.client.model:  # learnt from /models
                self.store.update(self.id, model=self.client.model)
            message = {"role": "assistant", "content": reply.content, "slipstream": meta}
            self.store.append_message(self.id, message)
            yield self._count(bucket, "orchestrator", reply.prompt_tokens, reply.completion_tokens)
            try:
                yield Answer(parse(reply.content))
                return
            except ProtocolError as exc:
                self._record("slipstream_invalid_reply", {**meta, "problem": str(exc)})
                if attempt == 2:
                    yield self._go_local(f"the orchestrator's reply was unusable twice: {exc}")
                    yield Answer(None)
                    return
                correction = load_prompt("slipstream_correction", problem=str(exc))
                self.store.append_message(
                    self.id, {"role": "user", "content": correction, "slipstream": meta}
                )

    def _go_local(self, reason: str) -> CloudFailed:
        self._record("slipstream_local_only", {"reason": reason})
        return CloudFailed(self.id, reason + "; the local model continues alone", True)

    def _drive(self) -> AsyncGenerator[SlipstreamEvent, None]:
        raise NotImplementedError  # SlipstreamRun's

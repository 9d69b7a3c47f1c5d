"""Slipstream as the TUI sees it: a run wrapped to sit in a pane where an agent would, the
launcher that checks the orchestrator before anything is sent, and a saved run's events
replayed as the events a live run gives (so a resumed pane shows the same blocks).

No textual here: the pane (tui/widgets/agent_pane.py) and its Slipstream view
(tui/widgets/slipstream_log.py) do the showing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agent.api import Agent, AgentManager, AgentSpec
from agent.events import ApprovalDecision
from agent.profiles import Profile, ProfileError, is_loopback
from agent.slipstream import Slipstream, SlipstreamRun, SlipstreamSpec, resolve_orchestrator
from agent.slipstream_events import (
    Accounting,
    AccountingUpdated,
    CloudFailed,
    FinalReview,
    PlanReady,
    ReviewVerdict,
    RunFinished,
    SlipstreamEvent,
    StepReported,
    StepStarted,
    is_slipstream_session,
)
from agent.slipstream_protocol import PlanStep, steps_from_json

WorkerSpec = Callable[[Path, str | None], AgentSpec]  # (workdir, approval) -> the local model


def endpoint_host(endpoint: str) -> str:
    """What the person reads as "where the data goes": host and port of the URL."""
    return urlparse(endpoint).netloc or endpoint


class SlipstreamSession:
    """A Slipstream run in a pane: the attributes a pane and the workspace read from an
    `Agent` (id, title, workdir, model, endpoint, approval mode, status), and the controls."""

    def __init__(self, run: SlipstreamRun, manager: AgentManager) -> None:
        self.run = run
        self.manager = manager
        self.id = run.id
        self.workdir = run.workdir
        self.endpoint = run.orchestrator_endpoint
        self.host = endpoint_host(self.endpoint)
        self.worker_ids: set[str] = set()
        self._title = manager.store.get(run.id).title

    @property
    def title(self) -> str:
        return self._title

    @property
    def model(self) -> str:
        """The orchestrator's model (learnt from its /models when the config names none)."""
        return self.manager.store.get(self.id).model or ""

    @property
    def approval_mode(self) -> str:
        return str(self.run.settings.get("approval") or "ask")

    @property
    def status(self) -> str:
        return "running" if self.run.running else self.manager.store.get(self.id).status

    @property
    def accounting(self) -> Accounting:
        return self.run.accounting

    @property
    def can_continue(self) -> bool:
        """A run stopped before its end (cancelled, failed, or the process quit)."""
        return not self.run.finished and not self.run.running

    def events(self) -> AsyncIterator[SlipstreamEvent]:
        return self.run.run()

    def note(self, event: SlipstreamEvent) -> None:
        if isinstance(event, StepStarted):
            self.worker_ids.add(event.worker_id)

    def owns(self, agent_id: str) -> bool:
        """The run's own id, or one of its workers' (their events carry the worker's id)."""
        return agent_id == self.id or agent_id in self.worker_ids

    def set_approval_mode(self, mode: str) -> None:
        """The run's workers follow the new mode from now on (also after a resume)."""
        self.run.set_approval_mode(mode)

    def cancel(self) -> None:
        self.run.cancel()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel, and wait (bounded) until the run has recorded where it stopped."""
        self.run.cancel()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.run.running and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    def resolve_approval(self, request_id: str, decision: ApprovalDecision) -> None:
        self.run.resolve_approval(request_id, decision)

    def rename(self, title: str) -> None:
        self._title = title.strip()
        self.manager.store.update(self.id, title=self._title)

    async def aclose(self) -> None:
        await self.run.aclose()

    def replay(self) -> list[SlipstreamEvent]:
        """The saved run as events, to show a resumed session."""
        return replay_events(self.id, self.manager.store.events(self.id))


PaneSession = Agent | SlipstreamSession


class SlipstreamLauncher:
    """Starts and resumes Slipstream runs for the panes; the workers use `worker_spec`'s model
    (the workspace's local model), the orchestrator comes from `slipstream.*` in the config."""

    def __init__(self, manager: AgentManager, worker_spec: WorkerSpec) -> None:
        self.manager = manager
        self.worker_spec = worker_spec

    def orchestrator(self) -> Profile:
        """The configured orchestrator; ProfileError (in words) when it cannot be used."""
        profile = resolve_orchestrator(self.manager, None, None, None)
        if profile.api_key is None and not is_loopback(profile.endpoint):
            raise ProfileError(
                f"no API key for the orchestrator {profile.name!r} at {profile.endpoint}: run "
                f"`openjet login {profile.name}`, or set slipstream.profile to another profile"
            )
        return profile

    def start(self, workdir: Path, task: str, approval: str | None) -> SlipstreamSession:
        worker = self.worker_spec(workdir, approval)
        spec = SlipstreamSpec(
            workdir=workdir,
            task=task,
            worker_profile=worker.profile,
            worker_endpoint=worker.endpoint,
            worker_model=worker.model,
            approval=worker.approval,
        )
        return SlipstreamSession(Slipstream(self.manager).start(spec), self.manager)

    def resume(self, session_id: str) -> SlipstreamSession:
        return SlipstreamSession(Slipstream(self.manager).resume(session_id), self.manager)

    def new_agent(self, workdir: Path, approval: str | None) -> Agent:
        """A plain agent on the local model (a pane going back to normal mode)."""
        return self.manager.create(self.worker_spec(workdir, approval))

    def is_slipstream(self, session_id: str) -> bool:
        return is_slipstream_session(self.manager.store.events(session_id))


def replay_events(run_id: str, stored: list[tuple[str, dict[str, Any]]]) -> list[SlipstreamEvent]:
    """A saved Slipstream session's decisions as the events its run gave while live."""
    out: list[SlipstreamEvent] = []
    plan: list[PlanStep] = []
    next_index = 0
    for kind, data in stored:
        if kind == "slipstream_plan":
            plan = list(steps_from_json(data["steps"]))
            out.append(PlanReady(run_id, tuple(plan), next_index if data.get("replan") else 0))
        elif kind == "slipstream_step_started":
            index = int(data["index"])
            title = plan[index].title if index < len(plan) else f"step {index + 1}"
            out.append(StepStarted(run_id, index, title, int(data["attempt"]), data["worker_id"]))
        elif kind == "slipstream_report":
            out.append(StepReported(run_id, data["index"], data["attempt"], data["report"]))
        elif kind == "slipstream_review":
            out.append(ReviewVerdict(run_id, data["index"], data["verdict"], data["feedback"]))
            if data["verdict"] != "revise":
                next_index = int(data["index"]) + 1
        elif kind == "slipstream_final":
            out.append(FinalReview(run_id, data["verdict"], data["summary"]))
        elif kind == "slipstream_local_only":
            out.append(CloudFailed(run_id, str(data.get("reason", "")), True))
        elif kind == "slipstream_finished":
            out.append(RunFinished(run_id, data["reason"], str(data["message"])))
        elif kind == "slipstream_cancelled":
            out.append(RunFinished(run_id, "cancelled", "cancelled"))
        elif kind == "slipstream_error":
            out.append(RunFinished(run_id, "error", str(data.get("message", ""))))
    accounting = Accounting.from_events(stored)
    out.append(
        AccountingUpdated(
            run_id, accounting.orchestrator_tokens, accounting.local_tokens, accounting.share()
        )
    )
    return out

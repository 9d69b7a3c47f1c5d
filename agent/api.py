"""The agent's public API: the only surface the TUI, `openjet run` and Slipstream use.

`AgentManager` creates, resumes, lists and deletes agent sessions (one SQLite store for all);
an `Agent` runs turns as async generators of `agent.events` events and takes the person's
approval decisions, cancellation, renames and approval-mode switches. Every agent of a manager
runs in the same event loop; the control methods (`resolve_approval`, `cancel`) may also be
called from other threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.approvals import ApprovalPolicy, check_mode
from agent.context import ContextWindow, load_prompt
from agent.events import AgentEvent, ApprovalDecision, ApprovalRequest
from agent.llm import LLMClient
from agent.loop import AgentLoop
from agent.profiles import Profile, is_loopback, resolve_profile
from agent.sessions import SessionRecord, SessionStore
from agent.tools import TOOL_SCHEMAS, FileTracker, ToolContext, Workspace
from openjet.config import Config, load_config

TITLE_LENGTH = 60
_closing: set[asyncio.Task[None]] = set()  # keeps closing clients alive until they are done


@dataclass(frozen=True)
class AgentSpec:
    """What a new agent needs. `approval` None means the config's `agent.approval`."""

    workdir: Path
    approval: str | None = None
    profile: str | None = None
    endpoint: str | None = None
    model: str | None = None
    title: str | None = None


@dataclass(frozen=True)
class SessionSummary:
    id: str
    title: str
    workdir: str
    endpoint: str
    model: str
    status: str
    created: float
    updated: float
    prompt_tokens: int
    completion_tokens: int


def _summary(record: SessionRecord) -> SessionSummary:
    return SessionSummary(
        record.id,
        record.title,
        record.workdir,
        record.endpoint,
        record.model,
        record.status,
        record.created,
        record.updated,
        record.prompt_tokens,
        record.completion_tokens,
    )


class Agent:
    """One coding agent bound to one session."""

    def __init__(
        self, record: SessionRecord, store: SessionStore, profile: Profile, config: Config
    ) -> None:
        self.id = record.id
        self.workdir = Path(record.workdir)
        self._store = store
        self._config = config
        self._title = record.title
        self.endpoint = profile.endpoint
        max_tokens = int(config.get("agent.max_tokens")) or None
        self.llm = LLMClient(
            profile.endpoint, profile.model, profile.api_key, max_tokens=max_tokens
        )
        workspace = Workspace(self.workdir)
        system = load_prompt("system", workdir=str(workspace.root))
        window = ContextWindow(
            store,
            record.id,
            system,
            TOOL_SCHEMAS,
            profile.context_size,
            send_reasoning=is_loopback(profile.endpoint),
            size_from_endpoint=not profile.context_size_configured,
        )
        policy = ApprovalPolicy(
            record.approval,
            config.get("agent.allow_commands"),
            record.allow_prefixes,
            lambda: store.project_prefixes(str(workspace.root)),
        )
        tools = ToolContext(
            workspace,
            FileTracker(),
            float(config.get("agent.shell_timeout")),
            airgapped=bool(config.get("airgapped")),
        )
        self._loop = AgentLoop(
            record.id, store, self.llm, window, policy, tools, int(config.get("agent.max_steps"))
        )
        self._window = window
        if record.status in ("running", "awaiting_approval"):  # the last process died mid-turn
            self._loop.repair_interrupted()
            store.update(record.id, status="interrupted")
            self._loop.status = "interrupted"

    @property
    def title(self) -> str:
        return self._title

    @property
    def model(self) -> str:
        return self.llm.model

    @property
    def approval_mode(self) -> str:
        return self._loop.policy.mode

    @property
    def status(self) -> str:
        """idle, running, awaiting_approval, interrupted (resumed after a crash) or error."""
        return self._loop.status

    @property
    def can_continue(self) -> bool:
        """True when the conversation ends with a user message or tool results (an interrupted
        turn): `run_turn("")` then continues it."""
        return self._loop.can_continue()

    def run_turn(self, text: str) -> AsyncIterator[AgentEvent]:
        """Send `text` (empty: continue an interrupted turn) and stream the turn's events."""
        if not self._title and text.strip():
            self.rename(" ".join(text.split())[:TITLE_LENGTH])
        return self._loop.run(text)

    def resolve_approval(self, request_id: str, decision: ApprovalDecision) -> None:
        self._loop.resolve(request_id, decision)

    def pending_approvals(self) -> list[ApprovalRequest]:
        return [p.request for p in self._loop.pending.values()]

    def cancel(self) -> None:
        self._loop.cancel()

    def set_approval_mode(self, mode: str) -> None:
        self._loop.policy.mode = check_mode(mode)
        self._store.update(self.id, approval=mode)

    async def switch_profile(self, name: str) -> None:
        """Continue this conversation on another model profile (`/model NAME`).

        Refused while a turn runs; the next turn goes to the new endpoint, whose context window
        is learnt again unless the profile fixes it. Raises ProfileError for a bad profile.
        """
        if self.status in ("running", "awaiting_approval"):
            raise RuntimeError("the agent is busy: switch the model between turns")
        profile = resolve_profile(self._config, name)
        previous = self.llm
        self.llm = LLMClient(
            profile.endpoint, profile.model, profile.api_key, max_tokens=previous.max_tokens
        )
        self._loop.llm = self.llm
        self.endpoint = profile.endpoint
        self._window.context_size = profile.context_size
        self._window.size_from_endpoint = not profile.context_size_configured
        self._window.send_reasoning = is_loopback(profile.endpoint)
        self._store.update(
            self.id, endpoint=profile.endpoint, model=profile.model, profile=profile.name
        )
        await previous.aclose()

    def rename(self, title: str) -> None:
        self._title = title.strip()
        self._store.update(self.id, title=self._title)

    def history(self) -> list[dict[str, Any]]:
        """The active conversation (OpenAI-shaped; a condensed past comes first as a summary)."""
        return self._window.request_messages()[1:]

    async def compact(self) -> None:
        """Condense the whole conversation into a summary now."""
        await self._window.condense(self.llm, everything=True)

    def clear(self) -> None:
        """Forget the conversation for the model's purposes (the store keeps the record)."""
        self._window.clear()

    async def aclose(self) -> None:
        self.cancel()
        await self.llm.aclose()


class AgentManager:
    """All agents of one process, and the session store they share."""

    def __init__(self, config: Config | None = None, store: SessionStore | None = None) -> None:
        self.config = config or load_config()
        self.store = store or SessionStore()
        self.agents: dict[str, Agent] = {}

    def create(self, spec: AgentSpec) -> Agent:
        workdir = Path(os.path.realpath(Path(spec.workdir).expanduser()))
        if not workdir.is_dir():
            raise ValueError(f"workdir {spec.workdir} is not a directory")
        approval = check_mode(spec.approval or str(self.config.get("agent.approval")))
        profile = resolve_profile(self.config, spec.profile, spec.endpoint, spec.model)
        record = self.store.create(
            title=spec.title or "",
            workdir=str(workdir),
            endpoint=profile.endpoint,
            model=profile.model,
            profile=profile.name,
            approval=approval,
        )
        return self._open(record, profile)

    def resume(self, session_id: str) -> Agent:
        if session_id in self.agents:
            return self.agents[session_id]
        record = self.store.get(session_id)
        if not Path(record.workdir).is_dir():
            raise ValueError(f"the session's workdir {record.workdir} no longer exists")
        profile = resolve_profile(
            self.config, record.profile, record.endpoint, record.model or None
        )
        return self._open(record, profile)

    def _open(self, record: SessionRecord, profile: Profile) -> Agent:
        agent = Agent(record, self.store, profile, self.config)
        self.agents[agent.id] = agent
        return agent

    def close(self, agent_id: str) -> None:
        """Stop the agent (a running turn is cancelled) and forget it; the session stays."""
        agent = self.agents.pop(agent_id, None)
        if agent is None:
            return
        agent.cancel()
        with contextlib.suppress(RuntimeError):  # no loop running: nothing in flight to close
            task = asyncio.get_running_loop().create_task(agent.llm.aclose())
            _closing.add(task)
            task.add_done_callback(_closing.discard)

    def list_sessions(self, query: str | None = None) -> list[SessionSummary]:
        return [_summary(r) for r in self.store.sessions(query)]

    def delete_session(self, session_id: str) -> None:
        if session_id in self.agents:
            raise ValueError(f"session {session_id} is open; close its agent first")
        self.store.delete(session_id)

    def pending_approvals(self) -> list[ApprovalRequest]:
        return [r for agent in self.agents.values() for r in agent.pending_approvals()]

    async def aclose(self) -> None:
        for agent in list(self.agents.values()):
            self.agents.pop(agent.id)
            await agent.aclose()
        self.store.close()

"""Cancellation: of the model stream, of a running command, of a pending approval, and of a
consumer that walks away. The session must stay a valid conversation afterwards."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.api import Agent, AgentManager, AgentSpec
from agent.events import (
    AgentEvent,
    ApprovalChoice,
    ApprovalDecision,
    ApprovalRequested,
    AssistantDelta,
    ToolCallStarted,
    TurnFinished,
)
from tests.support.agent_driver import drive, of_type
from tests.support.processes import pid_alive
from tests.support.scripted_server import ScriptedServer


@pytest.fixture
async def manager() -> AsyncIterator[AgentManager]:
    mgr = AgentManager()
    yield mgr
    await mgr.aclose()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


async def run_until(
    agent: Agent, text: str, stop_at: type
) -> tuple[list[AgentEvent], asyncio.Task[None]]:
    """Run a turn in a task; cancel the agent when an event of type `stop_at` arrives."""
    events: list[AgentEvent] = []
    reached = asyncio.Event()

    async def consume() -> None:
        async for event in agent.run_turn(text):
            events.append(event)
            if isinstance(event, stop_at):
                reached.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(reached.wait(), 20)
    return events, task


def valid_conversation(messages: list[dict[str, Any]]) -> None:
    """Every tool call has exactly one result, right after its assistant message."""
    for i, message in enumerate(messages):
        ids = [c["id"] for c in message.get("tool_calls") or []]
        following = [m.get("tool_call_id") for m in messages[i + 1 : i + 1 + len(ids)]]
        assert following == ids


async def test_cancel_while_the_model_streams(
    tmp_path: Path, project: Path, manager: AgentManager
) -> None:
    script = [
        {
            "content": "Let me think about this for a very long while",
            "chunk_delay": 0.02,
            "hang": True,
        },
        {"content": "resumed", "expect": {"last_role": "user", "last_contains": "try again"}},
    ]
    with ScriptedServer(script, tmp_path / "srv") as server:
        agent = manager.create(AgentSpec(workdir=project, endpoint=server.url, approval="all"))
        events, task = await run_until(agent, "think", AssistantDelta)
        await asyncio.sleep(0.3)
        started = time.monotonic()
        agent.cancel()
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - started < 2
        assert of_type(events, TurnFinished) == [
            TurnFinished(agent.id, "cancelled", "cancelled by the user")
        ]
        deadline = time.monotonic() + 5
        while server.disconnects() < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert server.disconnects() == 1  # the HTTP stream was closed, not left running
        history = agent.history()
        assert history[0] == {"role": "user", "content": "think"}
        assert history[1]["role"] == "assistant" and history[1]["content"].startswith(
            "Let me think"
        )
        assert agent.status == "idle"
        after = await drive(agent, "try again")
        assert of_type(after, TurnFinished)[0].message == "resumed"
        assert server.problems() == []


async def test_cancel_kills_a_running_command_and_answers_every_call(
    tmp_path: Path, project: Path, manager: AgentManager
) -> None:
    pidfile = tmp_path / "sleep.pid"
    calls = [
        {"name": "run_shell", "arguments": {"command": f"sleep 60 & echo $! > {pidfile}; wait"}},
        {"name": "list_dir", "arguments": {}},
    ]
    script = [{"tool_calls": calls}, {"content": "ok", "expect": {"last_role": "user"}}]
    with ScriptedServer(script, tmp_path / "srv") as server:
        agent = manager.create(AgentSpec(workdir=project, endpoint=server.url, approval="all"))
        events, task = await run_until(agent, "sleep", ToolCallStarted)
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.025)
        agent.cancel()
        await asyncio.wait_for(task, 8)
        assert of_type(events, TurnFinished)[0].reason == "cancelled"
        pid = int(pidfile.read_text())
        for _ in range(100):
            if not pid_alive(pid):
                break
            await asyncio.sleep(0.05)
        assert not pid_alive(pid)
        history = agent.history()
        valid_conversation(history)
        assert [m["content"] for m in history[2:]] == [
            "cancelled: the user stopped the turn before this call finished"
        ] * 2
        await drive(agent, "next")
        assert server.problems() == []


async def test_cancel_while_waiting_for_approval(
    tmp_path: Path, project: Path, manager: AgentManager
) -> None:
    script = [{"tool_calls": [{"name": "run_shell", "arguments": {"command": "touch x"}}]}]
    with ScriptedServer(script, tmp_path / "srv") as server:
        agent = manager.create(AgentSpec(workdir=project, endpoint=server.url, approval="ask"))
        events, task = await run_until(agent, "touch", ApprovalRequested)
        assert manager.pending_approvals() == [events[-1].request]  # type: ignore[union-attr]
        assert agent.status == "awaiting_approval"
        agent.cancel()
        await asyncio.wait_for(task, 5)
    assert of_type(events, TurnFinished)[0].reason == "cancelled"
    assert manager.pending_approvals() == [] and not (project / "x").exists()
    valid_conversation(agent.history())
    late = of_type(events, ApprovalRequested)[0].request.id
    with pytest.raises(KeyError, match="no pending approval"):
        agent.resolve_approval(late, ApprovalDecision(ApprovalChoice.APPROVE_ONCE))


async def test_a_consumer_that_walks_away_leaves_a_consistent_session(
    tmp_path: Path, project: Path, manager: AgentManager
) -> None:
    script = [{"tool_calls": [{"name": "run_shell", "arguments": {"command": "touch x"}}]}]
    with ScriptedServer(script, tmp_path / "srv") as server:
        agent = manager.create(AgentSpec(workdir=project, endpoint=server.url, approval="ask"))
        turn = agent.run_turn("touch")
        async for event in turn:
            if isinstance(event, ApprovalRequested):
                break
        await turn.aclose()  # type: ignore[attr-defined]
    assert agent.status == "idle" and manager.pending_approvals() == []
    valid_conversation(agent.history())
    assert manager.store.events(agent.id)[-1] == ("turn_finished", {"reason": "cancelled"})

"""Several agents in one process against one endpoint: they run at the same time, and one never
silently overwrites another's edit."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from agent.api import AgentManager, AgentSpec
from agent.events import ToolCallFinished, TurnFinished
from tests.support.agent_driver import drive, of_type
from tests.support.scripted_server import ScriptedServer

DELAY = 0.6


def tc(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


async def test_four_agents_run_concurrently(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    script = []
    for i in range(4):
        tag = f"agent-{i}"
        script += [
            {
                "match": tag,
                "first_byte_delay": DELAY,
                "tool_calls": [tc("write_file", path=f"{tag}.txt", content=tag)],
            },
            {
                "match": tag,
                "first_byte_delay": DELAY,
                "content": f"{tag} done",
                "expect": {"last_contains": f"wrote {tag}.txt"},
            },
        ]
    manager = AgentManager()
    with ScriptedServer(script, tmp_path / "srv") as server:
        agents = [
            manager.create(AgentSpec(workdir=shared, endpoint=server.url, approval="auto-edits"))
            for _ in range(4)
        ]
        started = time.monotonic()
        runs = await asyncio.gather(
            *(drive(a, f"agent-{i}: write your file") for i, a in enumerate(agents))
        )
        elapsed = time.monotonic() - started
        assert server.problems() == []
    await manager.aclose()
    # Serially this takes 8 x DELAY; concurrently about 2 x DELAY.
    assert elapsed < 4 * DELAY, elapsed
    for i, events in enumerate(runs):
        assert of_type(events, TurnFinished)[0].message == f"agent-{i} done"
        assert {e.agent_id for e in events} == {agents[i].id}
        assert (shared / f"agent-{i}.txt").read_text() == f"agent-{i}"
    assert len({a.id for a in agents}) == 4


async def test_an_edit_after_another_agents_edit_must_reread(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "config.py").write_text("A = 0\nB = 0\n")
    edit_a = tc("edit_file", path="config.py", old_string="A = 0", new_string="A = 1")
    edit_b = tc("edit_file", path="config.py", old_string="B = 0", new_string="B = 2")
    script = [
        {"match": "alpha", "tool_calls": [tc("read_file", path="config.py")]},
        {"match": "alpha", "content": "read"},
        {"match": "beta", "tool_calls": [tc("read_file", path="config.py")]},
        {"match": "beta", "content": "read"},
        {"match": "alpha", "tool_calls": [edit_a]},
        {"match": "alpha", "content": "edited"},
        {"match": "beta", "tool_calls": [edit_b]},
        {
            "match": "beta",
            "tool_calls": [tc("read_file", path="config.py")],
            "expect": {"last_contains": "changed since you last read it"},
        },
        {"match": "beta", "tool_calls": [edit_b], "expect": {"last_contains": "A = 1"}},
        {"match": "beta", "content": "edited after re-reading"},
    ]
    manager = AgentManager()
    with ScriptedServer(script, tmp_path / "srv") as server:
        alpha, beta = (
            manager.create(AgentSpec(workdir=shared, endpoint=server.url, approval="all"))
            for _ in range(2)
        )
        await drive(alpha, "alpha task")
        await drive(beta, "beta task")
        await drive(alpha, "now edit")
        events = await drive(beta, "now edit")
        assert server.problems() == []
    await manager.aclose()
    outcomes = [(e.name, e.ok) for e in of_type(events, ToolCallFinished)]
    assert outcomes == [("edit_file", False), ("read_file", True), ("edit_file", True)]
    assert (shared / "config.py").read_text() == "A = 1\nB = 2\n"

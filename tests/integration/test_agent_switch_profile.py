"""`Agent.switch_profile`: the conversation moves to another endpoint, and resume keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.api import Agent, AgentManager, AgentSpec
from agent.events import AssistantDelta
from agent.profiles import ProfileError
from openjet.config import update_values
from tests.support.scripted_server import ScriptedServer


async def answer(agent: Agent, text: str) -> str:
    return "".join([e.text async for e in agent.run_turn(text) if isinstance(e, AssistantDelta)])


async def test_switch_moves_the_conversation_and_survives_resume(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with (
        ScriptedServer([{"content": "from A"}], tmp_path / "a") as first,
        ScriptedServer([{"content": "from B"}, {"content": "B again"}], tmp_path / "b") as second,
    ):
        update_values({"profiles.b.endpoint": second.url, "profiles.b.model": "model-b"})
        manager = AgentManager()
        agent = manager.create(AgentSpec(workdir=project, endpoint=first.url, approval="never"))
        assert await answer(agent, "hello") == "from A"
        with pytest.raises(ProfileError):
            await agent.switch_profile("nope")
        await agent.switch_profile("b")
        assert await answer(agent, "and now?") == "from B"
        moved = second.requests()[0]
        assert moved["model"] == "model-b"
        assert [m["content"] for m in moved["messages"] if m["role"] == "user"][-2:] == [
            "hello",
            "and now?",
        ]
        await manager.aclose()

        resumed = AgentManager().resume(agent.id)
        assert resumed.endpoint == second.url and resumed.model == "model-b"
        assert await answer(resumed, "still there?") == "B again"
        assert len(first.requests()) == 1

"""Condensing against the scripted server: the model writes the summary, the next request
starts with the same system prompt and the summary, and compact/clear work on demand."""

from __future__ import annotations

from pathlib import Path

from agent.api import AgentManager, AgentSpec
from agent.context import SUMMARY_PREFIX
from openjet.config import update_values
from tests.support.agent_driver import drive
from tests.support.scripted_server import ScriptedServer


async def test_condensing_by_the_model_then_compact_and_clear(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "big.txt").write_text("lorem ipsum dolor sit amet\n" * 500)
    script = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}]},
        {"content": "It is lorem ipsum."},
        {
            "content": "The user asked about big.txt; it is lorem ipsum.",
            "expect": {"last_contains": "task one"},
        },
        {"content": "Second answer.", "expect": {"n_messages": 3, "last_contains": "task two"}},
        {"status": 400, "error": "no summaries today"},
    ]
    with ScriptedServer(script, tmp_path / "srv") as server:
        update_values({"profiles.small.endpoint": server.url, "profiles.small.context_size": 4096})
        manager = AgentManager()
        agent = manager.create(AgentSpec(workdir=project, profile="small", approval="all"))
        await drive(agent, "task one: what is in big.txt?")
        await drive(agent, "task two: and now?")
        requests = server.requests()
        assert server.problems() == []

        condense = requests[2]
        assert "tools" not in condense and "condense" in condense["messages"][0]["content"]
        after = requests[3]["messages"]
        assert after[0] == requests[0]["messages"][0]  # the stable system prompt
        assert after[1] == {
            "role": "user",
            "content": SUMMARY_PREFIX + "The user asked about big.txt; it is lorem ipsum.",
        }
        assert after[2] == {"role": "user", "content": "task two: and now?"}
        assert ("condensed", {"upto_seq": 4, "how": "model"}) in manager.store.events(agent.id)

        await agent.compact()  # the model refuses (400): the deterministic fallback takes over
        history = agent.history()
        assert len(history) == 1 and history[0]["content"].startswith(SUMMARY_PREFIX)
        assert "task two: and now?" in history[0]["content"]
        assert manager.store.events(agent.id)[-1] == (
            "condensed",
            {"upto_seq": 6, "how": "fallback"},
        )
        agent.clear()
        assert agent.history() == []
        assert len(manager.store.messages(agent.id)) == 6  # the record keeps everything
        await manager.aclose()

"""The agent learns the endpoint's context window unless its profile fixes one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.api import AgentManager, AgentSpec
from agent.events import UsageUpdated
from agent.llm import LLMClient
from engine.synthetic import write_synthetic
from openjet.config import update_values
from tests.support.scripted_server import ScriptedServer


async def limits_seen(agent: Any, text: str) -> list[int]:
    return [e.context_limit async for e in agent.run_turn(text) if isinstance(e, UsageUpdated)]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"id": "m", "meta": {"n_ctx": 16384}}, 16384),  # our engine
        ({"id": "m", "max_model_len": 65536}, 65536),  # vLLM, SGLang
        ({"id": "m", "context_length": 200000}, 200000),  # OpenRouter
        ({"id": "m"}, None),  # says nothing: the profile's size stays
    ],
)
async def test_endpoint_context_size_is_read_from_models(
    tmp_path: Path, entry: dict[str, Any], expected: int | None
) -> None:
    with ScriptedServer([], tmp_path, model_entry=entry) as server:
        client = LLMClient(server.url)
        try:
            assert await client.resolve_model() == "m"
            assert await client.endpoint_context_size() == expected
        finally:
            await client.aclose()


async def test_agent_uses_the_endpoint_size_unless_configured(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    entry = {"id": "m", "meta": {"n_ctx": 12288}}
    script = [{"content": "one"}, {"content": "two"}]
    with ScriptedServer(script, tmp_path / "a", model_entry=entry) as server:
        update_values({"profiles.fixed.endpoint": server.url, "profiles.fixed.context_size": 4096})
        manager = AgentManager()
        agent = manager.create(AgentSpec(workdir=project, endpoint=server.url, approval="never"))
        assert set(await limits_seen(agent, "hello")) == {12288}
        fixed = manager.create(AgentSpec(workdir=project, profile="fixed", approval="never"))
        assert set(await limits_seen(fixed, "hello")) == {4096}
        await manager.aclose()


@pytest.mark.slow
async def test_llama_server_per_slot_context_comes_from_props(
    tmp_path: Path, llama_server: Any
) -> None:
    gguf = write_synthetic(tmp_path / "tiny.gguf", "tiny", "f32", seed=1)
    with llama_server(gguf, extra_args=["-c", "4096", "-np", "2", "-t", "1"]) as server:
        client = LLMClient(f"{server.base_url}/v1")
        try:
            await client.resolve_model()
            assert await client.endpoint_context_size() == 2048
        finally:
            await client.aclose()

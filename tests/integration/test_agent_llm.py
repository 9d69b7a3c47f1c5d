"""The OpenAI-compatible client against the scripted server: streamed deltas, tool-call
assembly, usage, the key header, and no silent replay of a stream that broke half way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.llm import LLMClient, LLMError
from tests.support.scripted_server import ScriptedServer


async def test_stream_assembles_deltas_tool_calls_and_usage(tmp_path: Path) -> None:
    calls = [
        {
            "name": "edit_file",
            "id": "call_a",
            "arguments": {"path": "x.py", "old_string": "a" * 40, "new_string": "b"},
        },
        {"name": "list_dir", "id": "call_b", "arguments": {}},
    ]
    script = [{"reasoning": "thinking hard", "content": "Two edits.", "tool_calls": calls}]
    with ScriptedServer(script, tmp_path / "srv") as server:
        client = LLMClient(server.url, api_key="sk-test")
        deltas: list[tuple[str, str]] = []
        done = await client.stream_chat(
            [{"role": "user", "content": "hi"}], on_delta=lambda k, t: deltas.append((k, t))
        )
        await client.aclose()
        request = server.requests()[0]
        headers = server.headers()[0]
    assert request["model"] == "scripted-model" and request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert headers["authorization"] == "Bearer sk-test"
    assert "".join(t for k, t in deltas if k == "reasoning") == "thinking hard"
    assert "".join(t for k, t in deltas if k == "content") == "Two edits."
    assert (done.content, done.reasoning, done.finish_reason) == (
        "Two edits.",
        "thinking hard",
        "tool_calls",
    )
    assert [c["id"] for c in done.tool_calls] == ["call_a", "call_b"]
    assert json.loads(done.tool_calls[0]["function"]["arguments"]) == calls[0]["arguments"]
    assert done.tool_calls[1]["function"] == {"name": "list_dir", "arguments": "{}"}
    assert done.prompt_tokens > 0 and done.completion_tokens > 0


async def test_a_broken_stream_is_an_error_and_is_not_replayed(tmp_path: Path) -> None:
    script = [{"content": "half an answer", "break": True}, {"content": "should not be asked for"}]
    with ScriptedServer(script, tmp_path / "srv") as server:
        client = LLMClient(server.url, "m", backoff_s=0.01)
        with pytest.raises(LLMError, match=r"connection to .* failed"):
            await client.stream_chat([{"role": "user", "content": "hi"}])
        await client.aclose()
        assert len(server.requests()) == 1


async def test_retries_give_up_with_the_servers_message(tmp_path: Path) -> None:
    script = [{"status": 503, "error": "overloaded"}] * 3
    with ScriptedServer(script, tmp_path / "srv") as server:
        client = LLMClient(server.url, "m", retries=2, backoff_s=0.01)
        with pytest.raises(LLMError, match="answered 503: overloaded"):
            await client.stream_chat([{"role": "user", "content": "hi"}])
        await client.aclose()
        assert len(server.requests()) == 3


async def test_unauthorized_points_at_the_key(tmp_path: Path) -> None:
    with ScriptedServer([{"status": 401, "error": "bad key"}], tmp_path / "srv") as server:
        client = LLMClient(server.url, "m", api_key="sk-wrong")
        with pytest.raises(LLMError) as caught:
            await client.stream_chat([{"role": "user", "content": "hi"}])
        await client.aclose()
    assert "401: bad key" in str(caught.value) and "openjet login" in str(caught.value)
    assert "sk-wrong" not in str(caught.value)

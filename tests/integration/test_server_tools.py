"""Tool calls, reasoning and stop strings through the real server and reference backend.

Random weights never write a tool call, so the sampler is replaced by a script: the backend,
scheduler, detokenizer, parser and HTTP layers are all real, only the token choices are fixed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import engine.reference_backend
import engine.sampling
from engine.reference_backend import ReferenceBackend
from tests.integration.test_server import serving, streamed_chunks, tiny_model_path

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
            },
        },
    }
]
OUTPUT = (
    "plan the read\n</think>\n\nReading it.\n\n<tool_call>\n<function=read_file>\n"
    "<parameter=path>\nsrc/a.py\n</parameter>\n<parameter=limit>\n20\n</parameter>\n"
    "</function>\n</tool_call>"
)


@pytest.fixture(scope="module")
def backend() -> ReferenceBackend:
    return ReferenceBackend.from_gguf(tiny_model_path(), n_slots=2, kv_tokens=2048)


@pytest.fixture
def scripted(backend: ReferenceBackend, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Make the sampler emit OUTPUT then <|im_end|>, one token per call (speculation off)."""
    tokenizer = backend.tokenizer
    script = [*tokenizer.encode(OUTPUT), tokenizer.special_ids["<|im_end|>"]]
    calls = {"n": 0}

    def sample(logits: Any, params: Any, position: int, context: Any = ()) -> int:
        token = script[min(calls["n"], len(script) - 1)]
        calls["n"] += 1
        return token

    monkeypatch.setattr(engine.reference_backend, "sample", sample)
    monkeypatch.setattr(engine.sampling, "sample", sample)
    yield script
    calls["n"] = 0


BODY = {
    "messages": [{"role": "user", "content": "read src/a.py"}],
    "tools": TOOLS,
    "temperature": 0,
}


def test_tool_call_in_a_whole_response(backend: ReferenceBackend, scripted: list[int]) -> None:
    with serving(backend, speculation="off") as base:
        reply = httpx.post(f"{base}/v1/chat/completions", json=BODY, timeout=120).json()
    choice = reply["choices"][0]
    message = choice["message"]
    assert choice["finish_reason"] == "tool_calls"
    assert message["reasoning_content"] == "plan the read"
    assert message["content"] == "Reading it."
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["id"]
    assert call["function"]["name"] == "read_file"
    assert json.loads(call["function"]["arguments"]) == {"path": "src/a.py", "limit": 20}
    assert reply["usage"]["completion_tokens"] == len(scripted) - 1  # <|im_end|> is not counted


def test_tool_call_streamed_as_deltas(backend: ReferenceBackend, scripted: list[int]) -> None:
    with serving(backend, speculation="off") as base:
        chunks = streamed_chunks(base, "/v1/chat/completions", {**BODY, "stream": True})
    deltas = [c["choices"][0]["delta"] for c in chunks]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    assert reasoning == "plan the read" and content == "Reading it."
    assert calls[0]["function"]["name"] == "read_file" and calls[0]["id"]
    arguments = "".join(call["function"]["arguments"] for call in calls)
    assert json.loads(arguments) == {"path": "src/a.py", "limit": 20}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_stop_string_cuts_the_text(backend: ReferenceBackend, scripted: list[int]) -> None:
    with serving(backend, speculation="off") as base:
        body = {"prompt": "x", "max_tokens": 40, "stop": ["</think>"], "temperature": 0}
        reply = httpx.post(f"{base}/v1/completions", json=body, timeout=120).json()
    assert reply["choices"][0]["text"] == "plan the read\n"
    assert reply["choices"][0]["finish_reason"] == "stop"

"""The context window: request layout, budget estimate, condensing boundary and fallback."""

from __future__ import annotations

import socket
from typing import Any

from agent.context import SUMMARY_PREFIX, ContextWindow, fallback_summary, for_request
from agent.llm import LLMClient
from agent.sessions import SessionStore
from agent.tools import TOOL_SCHEMAS


def window(context_size: int = 4096) -> ContextWindow:
    store = SessionStore()
    sid = store.create(
        title="", workdir="/w", endpoint="e", model="m", profile="p", approval="ask"
    ).id
    return ContextWindow(store, sid, "SYSTEM", TOOL_SCHEMAS, context_size)


def add(win: ContextWindow, *messages: dict[str, Any]) -> None:
    for message in messages:
        win.store.append_message(win.session_id, message)


def turn(i: int, output: str = "out") -> list[dict[str, Any]]:
    call = {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a"}'},
    }
    return [
        {"role": "user", "content": f"request {i}"},
        {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": "hmm"},
        {"role": "tool", "tool_call_id": f"c{i}", "name": "read_file", "content": output},
        {"role": "assistant", "content": f"answer {i}"},
    ]


def closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def test_request_layout_strips_bookkeeping() -> None:
    win = window()
    add(win, *turn(1))
    messages = win.request_messages()
    assert messages[0] == {"role": "system", "content": "SYSTEM"}
    assert "reasoning_content" not in messages[2]
    assert for_request({"role": "assistant", "content": "x", "cancelled": True}) == {
        "role": "assistant",
        "content": "x",
    }


def test_reasoning_of_the_current_turn_only_is_sent_back_when_asked() -> None:
    win = window()
    add(win, *turn(1), *turn(2))
    assert all("reasoning_content" not in m for m in win.request_messages())
    win.send_reasoning = True
    sent = win.request_messages()
    assert [i for i, m in enumerate(sent) if "reasoning_content" in m] == [6]  # turn 2's call
    assert sent[6]["reasoning_content"] == "hmm"


def test_estimate_grows_and_uses_server_counts() -> None:
    win = window()
    add(win, *turn(1))
    before = win.estimate()
    add(win, *turn(2, "y" * 3000))
    assert win.estimate() >= before + 1000
    win.note_usage(prompt_tokens=5000, completion_tokens=10)
    assert win.estimate() == 5010
    add(win, {"role": "user", "content": "z" * 300})
    assert 5090 < win.estimate() < 5150
    assert win.over_budget()


async def test_condense_falls_back_when_the_model_is_unreachable() -> None:
    win = window()
    for i in range(1, 4):
        add(win, *turn(i, "long output " * 200))
    llm = LLMClient(closed_port_url(), "m", retries=0)
    assert await win.condense(llm) == "fallback"
    await llm.aclose()
    summary, kept = win.active()
    assert [m.get("content") for _, m in kept] == [
        "request 3",
        None,
        "long output " * 200,
        "answer 3",
    ]
    assert summary is not None and "request 1" in summary and "request 2" in summary
    assert "called read_file" in summary
    messages = win.request_messages()
    assert messages[1]["content"].startswith(SUMMARY_PREFIX)
    assert messages[2] == {"role": "user", "content": "request 3"}
    assert win.store.events(win.session_id)[-1] == ("condensed", {"upto_seq": 8, "how": "fallback"})


async def test_one_long_turn_is_cut_between_steps_not_inside_a_call() -> None:
    win = window(context_size=2000)
    add(win, {"role": "user", "content": "one big task"})
    for i in range(10):
        add(win, *turn(i, "x" * 400)[1:3])
    llm = LLMClient(closed_port_url(), "m", retries=0)
    await win.condense(llm)
    await llm.aclose()
    _, kept = win.active()
    assert kept[0][1]["role"] == "assistant"  # a tool result never loses its call
    assert len(kept) <= 6


def test_clear_empties_the_active_conversation_but_keeps_the_record() -> None:
    win = window()
    add(win, *turn(1))
    win.clear()
    assert win.request_messages() == [{"role": "system", "content": "SYSTEM"}]
    assert len(win.store.messages(win.session_id)) == 4


def test_fallback_summary_is_deterministic_and_bounded() -> None:
    messages = turn(1, "line one\nline two") + turn(2)
    first = fallback_summary("old summary", messages, max_chars=10_000)
    assert first == fallback_summary("old summary", messages, max_chars=10_000)
    assert first.startswith("old summary\n- user: request 1")
    assert "line two" not in first
    assert len(fallback_summary(None, messages * 50, max_chars=500)) <= 506

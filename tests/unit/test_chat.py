"""Chat template rendering (our Qwen3.5-style template, llama.cpp's normalisation and tojson) and
the streaming tool-call parser, including random truncations. (Equality with llama-server's
rendering is tested in tests/integration/test_chat_llamacpp.py.)
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.chat import ChatTemplate, ChatTemplateError, ParseEvent, ToolCallParser, to_json
from engine.synthetic_vocab import chat_template_text

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "mode": {"type": "integer"},
                    "options": {"type": "object"},
                    "flag": {"type": ["boolean", "string"]},
                },
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "list_dir", "parameters": {"type": "object", "properties": {}}},
    },
]

OUTPUT = (
    "The user wants a file.\nI'll write it.\n</think>\n\nWriting `a.py` now.\n\n"
    "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n"
    "<parameter=content>\ndef f():\n    return '<tool_call>'  # ünïcode 😀\n\n</parameter>\n"
    '<parameter=mode>\n420\n</parameter>\n<parameter=options>\n{"x": [1, 2]}\n</parameter>\n'
    "<parameter=flag>\nmaybe\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=list_dir>\n</function>\n</tool_call>"
)


@cache
def template() -> ChatTemplate:
    return ChatTemplate(chat_template_text())


def test_tojson_writes_like_llamacpp() -> None:
    value = {"b": [1, 2.5, True, None], "a": 'ü\n"', "c": {}, "d": 1e-7}
    assert to_json(value) == '{"b": [1, 2.5, true, null], "a": "ü\\n\\"", "c": {}, "d": 1e-07}'
    assert to_json([1, {"k": 2}], indent=2) == '[\n  1,\n  {\n    "k": 2\n  }\n]'
    assert to_json({"k": [1, 2]}, separators=(",", ":")) == '{"k":[1,2]}'


def test_system_tools_history_and_thinking_prompt() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "old answer", "reasoning_content": "old thought"},
        {"role": "user", "content": "second"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "new thought",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": '{"path": "a", "mode": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "also ok"},
    ]
    text = template().render(messages, tools=TOOLS)
    assert text.startswith(
        "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    )
    assert (
        '{"type": "function", "function": {"name": "write_file", "description": "Write a file.", "parameters": {'
        in text
    )
    assert "</IMPORTANT>\n\nBe brief.<|im_end|>\n<|im_start|>user\nfirst<|im_end|>\n" in text
    assert (
        "<|im_start|>assistant\nold answer<|im_end|>\n" in text
    )  # reasoning before the last query dropped
    assert (
        "<|im_start|>assistant\n<think>\nnew thought\n</think>\n\n<tool_call>\n<function=write_file>\n"
        "<parameter=path>\na\n</parameter>\n<parameter=mode>\n1\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
    ) in text
    assert text.endswith(
        "<|im_start|>user\n<tool_response>\nok\n</tool_response>\n<tool_response>\nalso ok\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )


def test_thinking_off_and_no_generation_prompt() -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert template().render(messages, enable_thinking=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert (
        template().render(messages, add_generation_prompt=False)
        == "<|im_start|>user\nhi<|im_end|>\n"
    )


def test_bad_conversations_are_clear_errors() -> None:
    with pytest.raises(ChatTemplateError, match="no user query"):
        template().render([{"role": "system", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="first message may be a system"):
        template().render([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])
    with pytest.raises(ChatTemplateError, match="not JSON"):
        call = {"type": "function", "function": {"name": "f", "arguments": "{bad"}}
        template().render(
            [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [call]}]
        )
    with pytest.raises(ChatTemplateError, match="'role'"):
        template().render([{"content": "a"}])
    with pytest.raises(ChatTemplateError, match="line"):
        ChatTemplate("{% if %}")


def test_from_gguf_uses_the_embedded_template(tmp_path: Path) -> None:
    meta = {
        "tokenizer.chat_template": chat_template_text(),
        "tokenizer.ggml.tokens": ["a", "b", "<|im_end|>"],
        "tokenizer.ggml.eos_token_id": 2,
    }
    chat = ChatTemplate.from_gguf(SimpleNamespace(path=tmp_path, metadata=meta))  # type: ignore[arg-type]
    assert chat.eos_token == "<|im_end|>" and chat.bos_token == ""
    assert chat.supports_thinking
    with pytest.raises(ChatTemplateError, match=r"no tokenizer\.chat_template"):
        ChatTemplate.from_gguf(SimpleNamespace(path=tmp_path, metadata={}))  # type: ignore[arg-type]


def parse(text: str, chunk: int, thinking: bool = True) -> tuple[list[ParseEvent], Any]:
    parser = ToolCallParser(TOOLS, thinking=thinking, id_factory=lambda i: f"call_{i}")
    events: list[ParseEvent] = []
    for start in range(0, len(text), chunk):
        events += parser.feed(text[start : start + chunk])
    return events, parser.finish()


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, len(OUTPUT)])
def test_streaming_parse_is_the_same_for_any_chunking(chunk: int) -> None:
    events, message = parse(OUTPUT, chunk)
    assert message.errors == []
    assert message.reasoning_content == "The user wants a file.\nI'll write it."
    assert message.content == "Writing `a.py` now."
    assert [c["function"]["name"] for c in message.tool_calls] == ["write_file", "list_dir"]
    args = json.loads(message.tool_calls[0]["function"]["arguments"])
    assert args == {
        "path": "a.py",
        "content": "def f():\n    return '<tool_call>'  # ünïcode 😀\n",
        "mode": 420,
        "options": {"x": [1, 2]},
        "flag": "maybe",
    }
    assert message.tool_calls[1]["function"]["arguments"] == "{}"
    assert "".join(e.text for e in events if e.kind == "reasoning") == message.reasoning_content
    assert "".join(e.text for e in events if e.kind == "content") == message.content
    assert_stream_matches(events, message.tool_calls)


def assert_stream_matches(events: list[ParseEvent], calls: list[dict[str, Any]]) -> None:
    """Accumulating the OpenAI deltas the way a client does gives the final tool calls."""
    built: dict[int, dict[str, Any]] = {}
    for event in events:
        for delta in event.to_delta().get("tool_calls", []):
            call = built.setdefault(delta["index"], {"id": None, "name": "", "arguments": ""})
            call["id"] = delta.get("id", call["id"])
            call["name"] += delta["function"].get("name", "")
            call["arguments"] += delta["function"]["arguments"]
    for final in calls:
        streamed = next(c for c in built.values() if c["id"] == final["id"])
        assert streamed["name"] == final["function"]["name"]
        assert streamed["arguments"] == final["function"]["arguments"]


def test_without_thinking_and_with_a_self_opened_think_block() -> None:
    _, plain = parse("  Just an answer.  \n", 3, thinking=False)
    assert (plain.content, plain.reasoning_content) == ("Just an answer.", "")
    _, opened = parse("<think>\nhmm\n</think>\n\nanswer", 2, thinking=False)
    assert (opened.content, opened.reasoning_content) == ("answer", "hmm")


def test_tool_call_right_after_reasoning_ends_the_reasoning() -> None:
    _, message = parse("thinking\n<tool_call>\n<function=list_dir>\n</function>\n</tool_call>", 5)
    assert message.reasoning_content == "thinking"
    assert message.content == ""
    assert len(message.tool_calls) == 1


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("<tool_call>\nwrite_file(path='a')\n</tool_call>", "expected <function=NAME>"),
        (
            "<tool_call>\n<function=write_file>\n<oops>\n</function>\n</tool_call>",
            "expected <parameter=NAME>",
        ),
        ("<tool_call>\n<function=bad name<x>\n</function>\n</tool_call>", "bad function name"),
    ],
)
def test_malformed_calls_become_errors_and_later_calls_still_parse(body: str, problem: str) -> None:
    good = "\n<tool_call>\n<function=list_dir>\n</function>\n</tool_call>"
    _, message = parse("</think>" + body + good, 4)
    assert len(message.errors) == 1 and problem in message.errors[0]
    assert [c["function"]["name"] for c in message.tool_calls] == ["list_dir"]


def test_random_truncations_never_crash_and_stay_consistent() -> None:
    rng = random.Random(1234)
    for _ in range(300):
        cut = rng.randrange(len(OUTPUT) + 1)
        events, message = parse(OUTPUT[:cut], rng.randint(1, 9))
        for call in message.tool_calls:
            json.loads(call["function"]["arguments"])
        assert_stream_matches(events, message.tool_calls)
        started = {e.index for e in events if e.call_id is not None}
        # Every call that was announced either completed or is reported as cut off.
        assert len(started) <= len(message.tool_calls) + len(message.errors)
        assert all("was cut off" in error for error in message.errors)
    _, whole = parse(OUTPUT, 5)
    assert whole.errors == []


def test_rendered_history_parses_back_to_the_same_calls() -> None:
    calls = [
        {
            "id": "call_0",
            "type": "function",
            "function": {
                "name": "write_file",
                "arguments": json.dumps({"path": "x.txt", "content": "two\nlines", "mode": 7}),
            },
        },
        {"id": "call_1", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}},
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Sure.", "tool_calls": calls},
    ]
    text = template().render(messages, add_generation_prompt=False)
    assistant = text.split("<|im_start|>assistant\n", 1)[1].removesuffix("<|im_end|>\n")
    _, message = parse(assistant, 5, thinking=False)
    assert message.content == "Sure."
    assert message.tool_calls == calls


def test_string_values_stream_before_they_are_complete() -> None:
    parser = ToolCallParser(TOOLS, thinking=False, id_factory=lambda i: f"call_{i}")
    head = "<tool_call>\n<function=write_file>\n<parameter=mode>\n42"
    events = parser.feed(head + "\n</parameter>\n<parameter=content>\nline one\nline tw")
    fragments = [e.arguments for e in events if e.kind == "tool_call"]
    assert fragments == ["", '{"mode": 42', ', "content": "line one\\nline tw']
    events = parser.feed("o\n</parameter>\n</function>\n</tool_call>")
    assert [e.arguments for e in events] == ['o"', "}"]
    assert json.loads(parser.finish().tool_calls[0]["function"]["arguments"]) == {
        "mode": 42,
        "content": "line one\nline two",
    }


def test_bad_tools_and_content_are_clear_errors() -> None:
    user = [{"role": "user", "content": "a"}]
    with pytest.raises(ChatTemplateError, match="tool 0 must be"):
        template().render(user, tools=["not a tool"])  # type: ignore[list-item]
    with pytest.raises(ChatTemplateError, match=r"needs function\.name"):
        template().render(user, tools=[{"type": "function", "function": {}}])
    with pytest.raises(ChatTemplateError, match="only text content parts"):
        template().render([{"role": "user", "content": [{"type": "image_url"}]}])


def test_parsed_message_is_an_openai_assistant_message() -> None:
    _, message = parse(OUTPUT, 50)
    as_dict = message.to_message()
    assert as_dict["role"] == "assistant" and as_dict["content"] == "Writing `a.py` now."
    assert as_dict["reasoning_content"].startswith("The user wants")
    assert len(as_dict["tool_calls"]) == 2
    assert ParseEvent("content", "x").to_delta() == {"content": "x"}
    assert ParseEvent("reasoning", "y").to_delta() == {"reasoning_content": "y"}


VALUE_PIECES = [
    "a",
    "ü",
    "😀",
    " ",
    "\n",
    "\t",
    '"',
    "\\",
    "</parameter>",
    "<tool_call>",
    "</function>",
    "{",
    "1",
]


def test_random_rendered_calls_round_trip_through_the_parser() -> None:
    rng = random.Random(99)
    for _ in range(150):
        calls: list[dict[str, Any]] = []
        for index in range(rng.randint(1, 3)):
            arguments: dict[str, Any] = {}
            for _ in range(rng.randint(0, 3)):
                value = "".join(rng.choices(VALUE_PIECES, k=rng.randint(0, 12)))
                if "\n</parameter>" in "\n" + value:  # text a value cannot hold
                    continue
                arguments[rng.choice(["path", "content", "x"])] = value
            arguments["mode"] = rng.randint(-5, 500)
            calls.append(
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {
                        "name": "write_file",
                        "arguments": json.dumps(arguments, ensure_ascii=False),
                    },
                }
            )
        content = rng.choice(["", "Doing it.", "Some <b>text</b>\n\nwith lines"])
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": content, "tool_calls": calls},
        ]
        text = template().render(messages, add_generation_prompt=False)
        assistant = text.split("<|im_start|>assistant\n", 1)[1].removesuffix("<|im_end|>\n")
        events, message = parse(assistant, rng.randint(1, 12), thinking=False)
        assert message.errors == []
        assert message.content == content.strip()
        assert [json.loads(c["function"]["arguments"]) for c in message.tool_calls] == [
            json.loads(c["function"]["arguments"]) for c in calls
        ]
        assert_stream_matches(events, message.tool_calls)


GARBAGE_PIECES = [
    *["<tool_call>", "</tool_call>", "<function=", "write_file>", "</function>", "<parameter="],
    *["path>", "mode>", "</parameter>", "<think>", "</think>", "\n", " ", "x", "42", "{", ">"],
]


@pytest.mark.parametrize("thinking", [True, False])
def test_random_tag_soup_never_crashes(thinking: bool) -> None:
    rng = random.Random(7 + thinking)
    for _ in range(300):
        text = "".join(rng.choices(GARBAGE_PIECES, k=rng.randint(0, 40)))
        events, message = parse(text, rng.randint(1, 6), thinking=thinking)
        for call in message.tool_calls:
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
        assert_stream_matches(events, message.tool_calls)
        assert "".join(e.text for e in events if e.kind == "content") == message.content
        assert "".join(e.text for e in events if e.kind == "reasoning") == message.reasoning_content

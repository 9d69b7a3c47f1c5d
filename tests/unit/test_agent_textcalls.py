"""Tool calls left in the message text (servers without a tool parser)."""

from __future__ import annotations

import json

from agent.textcalls import ThinkSplitter, extract_text_calls, split_thinking


def test_qwen_xml_function_calls() -> None:
    content = (
        "I will edit it.\n<tool_call>\n<function=edit_file>\n<parameter=path>\nsrc/a.py\n</parameter>\n"
        "<parameter=old_string>\n    x = 1\n</parameter>\n<parameter=new_string>\n    x = 2\n</parameter>\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=read_file>\n<parameter=path>\nb.py\n</parameter>\n"
        "<parameter=start_line>\n5\n</parameter>\n</function>\n</tool_call>"
    )
    text, calls = extract_text_calls(content)
    assert text == "I will edit it."
    assert [c["function"]["name"] for c in calls] == ["edit_file", "read_file"]
    assert json.loads(calls[0]["function"]["arguments"]) == {
        "path": "src/a.py",
        "old_string": "    x = 1",
        "new_string": "    x = 2",
    }
    assert json.loads(calls[1]["function"]["arguments"]) == {"path": "b.py", "start_line": 5}
    assert calls[0]["id"] != calls[1]["id"]


def test_json_tool_call_form() -> None:
    text, calls = extract_text_calls(
        '<tool_call>\n{"name": "glob", "arguments": {"pattern": "*.py"}}\n</tool_call>'
    )
    assert text == ""
    assert calls[0]["function"] == {"name": "glob", "arguments": '{"pattern": "*.py"}'}


def test_plain_text_and_broken_blocks_are_left_alone() -> None:
    assert extract_text_calls("no calls here") == ("no calls here", [])
    assert extract_text_calls("<tool_call>not json</tool_call>") == (
        "<tool_call>not json</tool_call>",
        [],
    )


def test_unclosed_call_at_the_end_of_a_stream_still_parses() -> None:
    _, calls = extract_text_calls("<tool_call>\n<function=list_dir>\n<parameter=path>\nsrc\n")
    assert json.loads(calls[0]["function"]["arguments"]) == {"path": "src"}


def test_split_thinking() -> None:
    assert split_thinking("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_thinking("answer") == ("", "answer")


def split_stream(chunks: list[str]) -> list[tuple[str, str]]:
    splitter = ThinkSplitter()
    pieces = [p for chunk in chunks for p in splitter.feed(chunk)] + splitter.flush()
    merged: list[tuple[str, str]] = []
    for kind, text in pieces:  # adjacent pieces of one kind read as one
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged


def test_streamed_thinking_is_routed_to_reasoning_even_with_split_tags() -> None:
    text = "<think>\nweigh options\n</think>\n\nThe answer."
    expected = [("reasoning", "\nweigh options\n"), ("content", "The answer.")]
    for size in (1, 2, 3, 5, 8, len(text)):
        assert split_stream([text[i : i + size] for i in range(0, len(text), size)]) == expected


def test_plain_content_streams_unchanged() -> None:
    assert split_stream(["<thi", "s is not thinking"]) == [("content", "<this is not thinking")]
    assert split_stream(["Hello", " there"]) == [("content", "Hello there")]
    assert split_stream(["<think>cut off"]) == [("reasoning", "cut off")]

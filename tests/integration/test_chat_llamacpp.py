"""Our chat-template rendering against llama.cpp's, for real: llama-server `--jinja`
`POST /apply-template` on the same conversations (system, users, assistants with reasoning and
tool calls, tool results, typed content, thinking on and off, with and without tools).

Two templates: our own Qwen3.5-style template embedded in a synthetic GGUF, and the real
Qwen3.5 template that ships with llama.cpp's sources (models/templates/Qwen3.5-4B.jinja, passed
with `--chat-template-file`) when the provisioned source tree is in the cache.

The tool-call parser is checked against llama.cpp's own qwen3-coder parser too: an output is
handed to llama-server as an assistant message to continue, EOS is forced, and the parsed
reasoning, content and tool calls it returns must mean the same as ours.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.chat import ChatTemplate
from engine.gguf_file import open_gguf
from engine.synthetic import write_synthetic
from tests.conftest import REAL_CACHE_DIR

# --no-prefill-assistant: a trailing assistant message is rendered as a finished turn (by
# default llama-server would continue it, a server feature outside the template).
SERVER_ARGS = [
    "--jinja",
    "--no-prefill-assistant",
    "-c",
    "256",
    "-np",
    "1",
    "-t",
    "1",
    "--no-warmup",
]

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file — overwrites it. Ünïcode ok.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Relative path."},
                    "content": {"type": "string"},
                    "mode": {"type": "integer", "default": 420},
                    "ratio": {"type": "number", "default": 0.5},
                    "tags": {"type": "array", "items": {"type": "string"}},
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


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


CONVERSATIONS: list[tuple[str, list[dict[str, Any]], bool]] = [
    ("single user", [{"role": "user", "content": "Hi there!"}], False),
    (
        "system and user",
        [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Why?\n"}],
        False,
    ),
    (
        "tools and a whole agent turn",
        [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Make a.py"},
            {
                "role": "assistant",
                "content": "I'll write it.",
                "reasoning_content": "Need to write a file.",
                "tool_calls": [
                    call(
                        "c1",
                        "write_file",
                        {
                            "path": "a.py",
                            "content": "print('hi')\n",
                            "mode": 420,
                            "tags": ["x", "ü"],
                        },
                    ),
                    call("c2", "list_dir", {}),
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "wrote 12 bytes"},
            {"role": "tool", "tool_call_id": "c2", "content": "a.py\nb.txt"},
        ],
        True,
    ),
    (
        "reasoning kept only after the last query",
        [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "first", "reasoning_content": "old thoughts"},
            {"role": "user", "content": "two"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("c3", "list_dir", {})],
                "reasoning_content": "new",
            },
            {"role": "tool", "tool_call_id": "c3", "content": "[]"},
            {"role": "assistant", "content": "<think>\ninline thoughts\n</think>\n\nDone."},
        ],
        True,
    ),
    (
        "argument values of every JSON type",
        [
            {"role": "user", "content": "Edge cases ✓"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    call(
                        "c4",
                        "write_file",
                        {
                            "path": "dir/ü.txt",
                            "content": 'tabs\tand "quotes" and <tags> and \\ backslash\n',
                            "mode": 0,
                            "ratio": 0.1,
                            "tiny": 1e-7,
                            "big": 123456789.0,
                            "flag": True,
                            "nothing": None,
                            "nested": {"a": [1, 2.5, {"b": False}], "ü": "ß"},
                        },
                    )
                ],
            },
            {"role": "tool", "tool_call_id": "c4", "content": "  padded result  \n"},
        ],
        True,
    ),
    (
        "typed content parts",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "part one"},
                    {"type": "text", "text": "part two"},
                ],
            }
        ],
        False,
    ),
]


def server_render(
    client: httpx.Client,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    **kwargs: Any,
) -> str:
    body: dict[str, Any] = {"messages": messages, **kwargs}
    if tools:
        body["tools"] = tools
    response = client.post("/apply-template", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["prompt"])


def render_variants(client: httpx.Client, template: ChatTemplate) -> list[tuple[str, str, str]]:
    """(case, ours, llama.cpp) for every conversation × thinking on/off × generation prompt."""
    results = []
    for name, messages, with_tools in CONVERSATIONS:
        tools = TOOLS if with_tools else None
        for thinking in (True, False):
            for add_prompt in (True, False):
                theirs = server_render(
                    client,
                    messages,
                    tools,
                    add_generation_prompt=add_prompt,
                    chat_template_kwargs={"enable_thinking": thinking},
                )
                ours = template.render(
                    messages,
                    tools=tools,
                    add_generation_prompt=add_prompt,
                    enable_thinking=thinking,
                )
                results.append((f"{name} thinking={thinking} prompt={add_prompt}", ours, theirs))
    return results


def assert_same(results: list[tuple[str, str, str]]) -> None:
    wrong = [(case, ours, theirs) for case, ours, theirs in results if ours != theirs]
    for case, ours, theirs in wrong:
        print(f"--- {case}\nours:\n{ours!r}\nllama.cpp:\n{theirs!r}")
    assert [case for case, _, _ in wrong] == []


def test_our_template_renders_like_llamacpp(
    tmp_path: Path, llama_server: Callable[..., Any]
) -> None:
    path = write_synthetic(tmp_path / "tiny.gguf", "tiny", "f32", 0)
    template = ChatTemplate.from_gguf(open_gguf(path))
    with (
        llama_server(path, extra_args=SERVER_ARGS) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as client,
    ):
        assert_same(render_variants(client, template))


def qwen35_reference_template() -> Path | None:
    found = sorted((REAL_CACHE_DIR / "llama.cpp").glob("*/**/models/templates/Qwen3.5-4B.jinja"))
    return found[0] if found else None


def test_real_qwen35_template_renders_like_llamacpp(
    tmp_path: Path, llama_server: Callable[..., Any]
) -> None:
    source = qwen35_reference_template()
    if source is None:
        pytest.skip("llama.cpp's source tree (models/templates) is not in the cache")
    path = write_synthetic(tmp_path / "tiny.gguf", "tiny", "f32", 0)
    template = ChatTemplate(source.read_text(encoding="utf-8"))
    args = [*SERVER_ARGS, "--chat-template-file", str(source)]
    with (
        llama_server(path, extra_args=args) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as client,
    ):
        assert_same(render_variants(client, template))


def xml_call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


# (reasoning, text after </think>): outputs in the exact format the model is trained on, with
# the required parameters first (llama.cpp's parser takes them in any order but before the
# optional ones, and rejects a call that lacks one; ours accepts both and leaves the check to
# the tool).
OUTPUTS: list[tuple[str, str]] = [
    (
        "Plan: write it.",
        "Writing now.\n\n" + xml_call("write_file", path="a b.py", content="x = 1"),
    ),
    (
        "Two calls.",
        xml_call(
            "write_file", content="", path="ü/😀.txt", mode="420", tags='["a", "b"]', ratio="0.25"
        )
        + "\n"
        + xml_call("list_dir"),
    ),
    (
        "Tricky values.",
        xml_call(
            "write_file",
            path="p",
            content='\nline one\n  "quoted" \\ back</parameter> inline\n<tool_call> too\n',
        ),
    ),
    ("Just an answer.", "The answer is 42.\n\nNo tools needed."),
]


def server_parse(client: httpx.Client, reasoning: str, text: str, eos_id: int) -> dict[str, Any]:
    """llama.cpp's own parse of an output: it is given as an assistant message to continue
    (llama-server parses the continued prefix with the output) and EOS is forced at once."""
    body = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": text, "reasoning_content": reasoning},
        ],
        "tools": TOOLS,
        "parallel_tool_calls": True,
        "max_tokens": 1,
        "temperature": 0,
        "logit_bias": [[eos_id, 100]],
    }
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json()["choices"][0]["message"])


def meaning(message: dict[str, Any]) -> tuple[str, str, list[tuple[str, Any]]]:
    """What a client acts on: trimmed texts and each call's name and decoded arguments."""
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    return (
        (message.get("reasoning_content") or "").strip(),
        (message.get("content") or "").strip(),
        calls,
    )


def test_tool_call_parser_agrees_with_llamacpp(
    tmp_path: Path, llama_server: Callable[..., Any]
) -> None:
    from engine.chat import ToolCallParser
    from engine.tokenizer import Tokenizer

    path = write_synthetic(tmp_path / "tiny.gguf", "tiny", "f32", 0)
    eos_id = Tokenizer.from_gguf(open_gguf(path)).eos_id
    assert eos_id is not None
    args = ["--jinja", "-c", "2048", "-np", "1", "-t", "2", "--no-warmup"]
    with (
        llama_server(path, extra_args=args) as server,
        httpx.Client(base_url=server.base_url, timeout=120) as client,
    ):
        for reasoning, text in OUTPUTS:
            theirs = meaning(server_parse(client, reasoning, text, eos_id))
            parser = ToolCallParser(TOOLS, thinking=True)
            parser.feed(f"{reasoning}\n</think>\n\n{text}")
            message = parser.finish()
            assert message.errors == []
            assert meaning(message.to_message()) == theirs, text

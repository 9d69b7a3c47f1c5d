"""Chat prompts: render the GGUF's own Jinja chat template the way llama.cpp does.

The template runs in a sandboxed Jinja environment with the helpers Hugging Face templates
expect (`raise_exception`, `strftime_now`, `tojson`, loop controls, trim/lstrip blocks).
Messages and tools are first normalised exactly as llama-server normalises an OpenAI request
before it renders (content `null` → `""`, typed text parts kept as parts, tool-call `arguments` given as a
JSON string → an object, tools reduced to `{type, function: {name, description, parameters}}`),
so the same request gives the same prompt text as llama-server with `--jinja`.

Parsing the model's output back into content, reasoning and tool calls lives in
`engine.tool_call_parser` (re-exported here).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.tool_call_events import ParsedMessage, ParseEvent
from engine.tool_call_parser import ToolCallParser

if TYPE_CHECKING:
    from engine.gguf_file import GGUFModel

__all__ = ["ChatTemplate", "ChatTemplateError", "ParseEvent", "ParsedMessage", "ToolCallParser"]


class ChatTemplateError(ValueError):
    """The template or the conversation cannot be rendered; the message says why."""


def to_json(value: Any, indent: int | None = None, separators: Sequence[str] | None = None) -> str:
    """JSON text as llama.cpp's Jinja `tojson` writes it (key order kept, non-ASCII kept)."""
    item_sep, key_sep = (", " if indent is None else ","), ": "
    if separators:
        item_sep = separators[0]
        key_sep = separators[1] if len(separators) > 1 else key_sep
    return _json_text(value, 0, indent, item_sep, key_sep)


def _json_text(value: Any, level: int, indent: int | None, item_sep: str, key_sep: str) -> str:
    if isinstance(value, Mapping):
        items = [
            _json_text(str(k), level + 1, indent, item_sep, key_sep)
            + key_sep
            + _json_text(v, level + 1, indent, item_sep, key_sep)
            for k, v in value.items()
        ]
        return _join_json(items, "{", "}", level, indent, item_sep)
    if isinstance(value, list | tuple):
        items = [_json_text(v, level + 1, indent, item_sep, key_sep) for v in value]
        return _join_json(items, "[", "]", level, indent, item_sep)
    if isinstance(value, float):
        # C++ `ostream << double`: %g with 6 significant digits (llama.cpp's value_to_json).
        return "null" if math.isnan(value) or math.isinf(value) else f"{value:g}"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None or isinstance(value, jinja2.Undefined):
        return "null"
    return json.dumps(value)


def _join_json(
    items: list[str], open_: str, close: str, level: int, indent: int | None, sep: str
) -> str:
    if not items:
        return open_ + close
    if indent is None:
        return open_ + sep.join(items) + close
    pad = " " * (indent * (level + 1))
    return (
        open_
        + "\n"
        + (sep + "\n").join(pad + i for i in items)
        + "\n"
        + " " * (indent * level)
        + close
    )


def _string(value: Any) -> str:
    # llama.cpp's `string` filter writes floats as JSON does (C++ %g), not as Python's str().
    if isinstance(value, float):
        return to_json(value)
    return str(value)


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = to_json
    env.filters["string"] = _string
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template plus the special-token texts it may refer to."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(f"chat template line {exc.lineno}: {exc.message}") from exc
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    @classmethod
    def from_gguf(cls, model: GGUFModel) -> ChatTemplate:
        meta = model.metadata
        source = meta.get("tokenizer.chat_template")
        if not source:
            raise ChatTemplateError(f"{model.path}: the GGUF has no tokenizer.chat_template")
        tokens = meta.get("tokenizer.ggml.tokens", [])
        return cls(
            str(source),
            bos_token=_token_text(tokens, meta.get("tokenizer.ggml.bos_token_id")),
            eos_token=_token_text(tokens, meta.get("tokenizer.ggml.eos_token_id")),
        )

    @property
    def supports_thinking(self) -> bool:
        return "<think>" in self.source

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        enable_thinking: bool = True,
        **extra: Any,
    ) -> str:
        """The prompt text for an OpenAI-style conversation (see module doc)."""
        context: dict[str, Any] = {
            "messages": normalize_messages(messages),
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "enable_thinking": enable_thinking,
            "add_generation_prompt": add_generation_prompt,
        }
        if tools:
            context["tools"] = normalize_tools(tools)
        context.update(extra)
        try:
            return self._template.render(context)
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"the chat template failed: {exc}") from exc
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
            raise ChatTemplateError(
                f"the chat template failed on this conversation: {exc}"
            ) from exc


def _token_text(tokens: Sequence[Any], token_id: Any) -> str:
    if token_id is None or not 0 <= int(token_id) < len(tokens):
        return ""
    token = tokens[int(token_id)]
    return token.decode("utf-8") if isinstance(token, bytes) else str(token)


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as llama-server hands them to the template."""
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        raise ChatTemplateError("messages must be a list of objects")
    return [_normalize_message(i, m) for i, m in enumerate(messages)]


def _normalize_message(index: int, message: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise ChatTemplateError(f"message {index} must be an object with a string 'role'")
    if "content" not in message and "tool_calls" not in message:
        raise ChatTemplateError(f"message {index} needs 'content' or 'tool_calls'")
    out: dict[str, Any] = {
        "role": message["role"],
        "content": _content_text(index, message.get("content")),
    }
    if message.get("reasoning_content"):
        out["reasoning_content"] = str(message["reasoning_content"])
    for key in ("name", "tool_call_id"):
        if message.get(key):
            out[key] = str(message[key])
    if message.get("tool_calls"):
        out["tool_calls"] = [_normalize_call(index, c) for c in message["tool_calls"]]
    return out


def _content_text(index: int, content: Any) -> str | list[dict[str, str]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Typed parts stay a list (llama-server passes them through to templates that take
        # both forms, as Qwen's do); only text parts exist in a text-only engine.
        parts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise ChatTemplateError(f"message {index}: only text content parts are supported")
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        return parts
    raise ChatTemplateError(f"message {index}: content must be a string, a list of parts or null")


def _normalize_call(index: int, call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ChatTemplateError(f"message {index}: a tool call needs function.name")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ChatTemplateError(
                f"message {index}: tool call {function['name']!r} has arguments that are not JSON: {exc}"
            ) from exc
    out: dict[str, Any] = {
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }
    if call.get("id"):
        out["id"] = str(call["id"])
    return out


def normalize_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool definitions as llama-server hands them to the template."""
    out = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or tool.get("type") != "function":
            raise ChatTemplateError(
                f"tool {index} must be {{'type': 'function', 'function': {{...}}}}"
            )
        if not isinstance(function.get("name"), str):
            raise ChatTemplateError(f"tool {index} needs function.name")
        out.append(
            {
                "type": "function",
                "function": {
                    "name": function["name"],
                    "description": str(function.get("description", "")),
                    "parameters": function.get("parameters", {}),
                },
            }
        )
    return out

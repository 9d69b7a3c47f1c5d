"""Parsing and validating the bodies of the HTTP API (OpenAI-compatible).

Every problem becomes an `ApiError` carrying the HTTP status and the OpenAI error object
(`{"error": {"message", "type", "param", "code"}}`), so a client always learns what was wrong:
malformed JSON, a known field of the wrong type or out of range, an unknown model. Fields this
engine does not know are ignored, as OpenAI-compatible servers do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.backend import SamplingParams


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (
            status,
            message,
            param,
            code,
            kind,
        )

    def body(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
        return {"error": error}


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(
            400, f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return body


_NUMBER = "a number"
_INTEGER = "an integer"
_BOOL = "true or false"
_STRING = "a string"


def _is(value: Any, expected: str) -> bool:
    if expected == _NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected == _INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == _BOOL:
        return isinstance(value, bool)
    return isinstance(value, str)


def field_of(body: dict[str, Any], name: str, expected: str, default: Any = None) -> Any:
    """The field's value (or default when absent or null); 400 when it has the wrong type."""
    value = body.get(name)
    if value is None:
        return default
    if not _is(value, expected):
        raise ApiError(
            400, f"'{name}' must be {expected}, got {json.dumps(value)[:80]}", param=name
        )
    return value


def sampling_from(body: dict[str, Any], seed: int) -> SamplingParams:
    """Sampling parameters of a request (llama-server's defaults where it is silent)."""
    defaults = SamplingParams()
    repetition = field_of(body, "repetition_penalty", _NUMBER)
    if repetition is None:
        repetition = field_of(body, "repeat_penalty", _NUMBER, defaults.repetition_penalty)
    params = SamplingParams(
        temperature=float(field_of(body, "temperature", _NUMBER, defaults.temperature)),
        top_k=int(field_of(body, "top_k", _INTEGER, defaults.top_k)),
        top_p=float(field_of(body, "top_p", _NUMBER, defaults.top_p)),
        min_p=float(field_of(body, "min_p", _NUMBER, defaults.min_p)),
        presence_penalty=float(field_of(body, "presence_penalty", _NUMBER, 0.0)),
        frequency_penalty=float(field_of(body, "frequency_penalty", _NUMBER, 0.0)),
        repetition_penalty=float(repetition),
        penalty_last_n=int(field_of(body, "repeat_last_n", _INTEGER, defaults.penalty_last_n)),
        seed=int(field_of(body, "seed", _INTEGER, seed)) & ((1 << 63) - 1),
    )
    problems = params.problems()
    if problems:
        raise ApiError(400, "; ".join(problems), param=problems[0].split()[0])
    return params


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 16:
        return [s for s in stop if s]
    raise ApiError(400, "'stop' must be a string or a list of at most 16 strings", param="stop")


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = field_of(body, "max_completion_tokens", _INTEGER)
    if value is None:
        value = field_of(body, "max_tokens", _INTEGER)
    if value is None:
        value = field_of(body, "n_predict", _INTEGER)
    if value is not None and value < 1:
        raise ApiError(400, f"'max_tokens' must be at least 1, got {value}", param="max_tokens")
    return value


def _check_model(body: dict[str, Any], model_ids: frozenset[str]) -> str:
    model = field_of(body, "model", _STRING, "")
    if model and model not in model_ids:
        known = ", ".join(sorted(model_ids))
        raise ApiError(
            404,
            f"the model '{model}' does not exist; this server serves: {known}",
            "model",
            "model_not_found",
        )
    return str(model)


@dataclass
class GenerationOptions:
    """What chat and text completions share."""

    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    stops: list[str]
    sampling: SamplingParams
    n_draft: int | None
    # llama-server's extension: a streamed chunk for every generated token, text or not, with
    # the count so far in `timings.predicted_n` (clients and benchmarks time tokens by it)
    timings_per_token: bool = False
    # llama-server's extension: end-of-generation tokens do not stop the reply (benchmarks that
    # must generate exactly max_tokens); the stop strings still do
    ignore_eos: bool = False


def _options(body: dict[str, Any], model_ids: frozenset[str], seed: int) -> GenerationOptions:
    model = _check_model(body, model_ids)
    n = field_of(body, "n", _INTEGER, 1)
    if n != 1:
        raise ApiError(400, "only n = 1 is supported", param="n")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    n_draft = field_of(body, "n_draft", _INTEGER)
    if n_draft is not None and not 0 <= n_draft <= 4:
        raise ApiError(400, "'n_draft' must be between 0 and 4", param="n_draft")
    return GenerationOptions(
        model=model,
        stream=bool(field_of(body, "stream", _BOOL, False)),
        include_usage=bool(field_of(stream_options, "include_usage", _BOOL, False)),
        max_tokens=_max_tokens(body),
        stops=_stops(body),
        sampling=sampling_from(body, seed),
        n_draft=n_draft,
        timings_per_token=bool(field_of(body, "timings_per_token", _BOOL, False)),
        ignore_eos=bool(field_of(body, "ignore_eos", _BOOL, False)),
    )


@dataclass
class ChatRequest:
    options: GenerationOptions
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    enable_thinking: bool = True


def parse_chat(body: dict[str, Any], model_ids: frozenset[str], seed: int) -> ChatRequest:
    options = _options(body, model_ids, seed)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(
            400, "'messages' must be a non-empty list of message objects", param="messages"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(
                400, f"messages[{index}] must be an object with a string 'role'", param="messages"
            )
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ApiError(400, "'tools' must be a list of tool objects", param="tools")
    if body.get("tool_choice") == "none":
        tools = []
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ApiError(
            400, "'chat_template_kwargs' must be an object", param="chat_template_kwargs"
        )
    thinking = field_of(kwargs, "enable_thinking", _BOOL, True)
    return ChatRequest(options, messages, tools, bool(thinking))


@dataclass
class CompletionRequest:
    options: GenerationOptions
    prompt: str | list[int]
    return_tokens: bool = False


def parse_completion(
    body: dict[str, Any], model_ids: frozenset[str], seed: int
) -> CompletionRequest:
    options = _options(body, model_ids, seed)
    return_tokens = bool(field_of(body, "return_tokens", _BOOL, False))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return CompletionRequest(options, prompt, return_tokens)
    if isinstance(prompt, list) and prompt and all(_is(t, _INTEGER) for t in prompt):
        return CompletionRequest(options, [int(t) for t in prompt], return_tokens)
    raise ApiError(
        400, "'prompt' must be a non-empty string or a list of token ids", param="prompt"
    )

"""The OpenAI-compatible client: streamed chat completions with tool calls, retries, usage.

One `LLMClient` per agent. `stream_chat` posts `/chat/completions` with `stream: true`, parses
the server-sent events, hands each content or reasoning delta to a callback as it arrives, and
returns the whole message with its tool calls assembled from their deltas. Connection errors,
429 and 5xx are retried with exponential backoff, but only before the first byte of a response:
a stream that broke half way is an error, never silently replayed. Cancelling the calling task
closes the stream (httpx closes the connection on exit from its context).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

DeltaCallback = Callable[[str, str], None]  # (kind: "content" | "reasoning", text)
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class LLMError(Exception):
    """The model call failed; the message says why in words (never includes the key)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status when the server answered with an error

    @property
    def context_overflow(self) -> bool:
        """The request was too long for the model's context window."""
        text = str(self).lower()
        return (
            self.status == 400
            and "context" in text
            and any(
                word in text
                for word in ("exceed", "longer", "too long", "too many", "window", "length")
            )
        )


@dataclass
class Completion:
    """One finished assistant message and what it cost."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI shape
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_second: float = 0.0


@dataclass
class _Assembly:
    """Accumulates one streamed response."""

    completion: Completion = field(default_factory=Completion)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    first_token_at: float | None = None
    n_chunks: int = 0

    def add_tool_delta(self, delta: dict[str, Any]) -> None:
        call = self.calls.setdefault(
            int(delta.get("index", len(self.calls))),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        call["id"] = delta.get("id") or call["id"]
        function = delta.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""


class LLMClient:
    """Talks to one OpenAI-compatible endpoint for one agent."""

    def __init__(
        self,
        endpoint: str,
        model: str = "",
        api_key: str | None = None,
        retries: int = 4,
        backoff_s: float = 0.5,
        timeout_s: float = 600.0,
        max_tokens: int | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.model = model
        self.retries = retries
        self.max_tokens = max_tokens  # per reply, unless a call gives its own
        self.backoff_s = backoff_s
        self._models_doc: Any = None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0)
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def resolve_model(self) -> str:
        """The model name to send: the configured one, else the endpoint's first model."""
        if self.model:
            return self.model
        models = await self._models()
        data = models.get("data") if isinstance(models, dict) else None
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
        self.model = str(first.get("id") or "default")
        return self.model

    async def endpoint_context_size(self) -> int | None:
        """The context window the endpoint reports, or None when it says nothing.

        Our engine (`meta.n_ctx` in /models), vLLM and SGLang (`max_model_len`), OpenRouter
        (`context_length`), and llama-server (`/props`: the per-slot `n_ctx`).
        """
        models = await self._models()
        data = models.get("data") if isinstance(models, dict) else None
        entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
        named = [e for e in entries if e.get("id") == self.model]
        for entry in named or (entries if len(entries) == 1 else []):
            meta = entry.get("meta")
            n_ctx = meta.get("n_ctx") if isinstance(meta, dict) else None
            for value in (entry.get("max_model_len"), entry.get("context_length"), n_ctx):
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
        root = self.endpoint.removesuffix("/v1")
        props = await self._get_json(f"{root}/props")
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None

    async def _models(self) -> Any:
        """The endpoint's /models document, fetched once (model name and context size use it)."""
        if self._models_doc is None:
            self._models_doc = await self._get_json(f"{self.endpoint}/models") or {}
        return self._models_doc

    async def _get_json(self, url: str) -> Any:
        """GET a JSON document; None when the endpoint does not answer it."""
        try:
            response = await self._client.get(url)
            return response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    async def stream_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_delta: DeltaCallback | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """One streamed chat completion; raises LLMError with a readable reason."""
        body: dict[str, Any] = {
            "model": await self.resolve_model(),
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = tools
        if max_tokens or self.max_tokens:
            body["max_tokens"] = max_tokens or self.max_tokens
        started = time.monotonic()
        for attempt in range(self.retries + 1):
            try:
                async with self._client.stream(
                    "POST", f"{self.endpoint}/chat/completions", json=body
                ) as response:
                    if response.status_code in RETRY_STATUS and attempt < self.retries:
                        await response.aread()
                    else:
                        await _raise_for_status(response, self.endpoint)
                        if response.headers.get("content-type", "").startswith("application/json"):
                            return _whole_response(json.loads(await response.aread()), on_delta)
                        return await self._read_stream(response, on_delta, started)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt >= self.retries:
                    raise LLMError(
                        f"cannot reach the model server at {self.endpoint}: {exc}"
                    ) from exc
            except httpx.HTTPError as exc:
                raise LLMError(f"the connection to {self.endpoint} failed: {exc!r}") from exc
            await asyncio.sleep(self.backoff_s * 2**attempt)
        raise LLMError(f"the model server at {self.endpoint} kept failing")  # pragma: no cover

    async def _read_stream(
        self, response: httpx.Response, on_delta: DeltaCallback | None, started: float
    ) -> Completion:
        state = _Assembly()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            try:
                chunk = json.loads(payload)
            except json.JSONDecodeError as exc:
                raise LLMError(f"the model server sent a malformed event: {payload[:200]}") from exc
            if "error" in chunk:
                raise LLMError(f"the model server reported an error: {_error_text(chunk)}")
            _apply_chunk(state, chunk, on_delta)
        return _finish(state, started)


def _apply_chunk(state: _Assembly, chunk: dict[str, Any], on_delta: DeltaCallback | None) -> None:
    usage = chunk.get("usage")
    if usage:
        state.completion.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        state.completion.completion_tokens = int(usage.get("completion_tokens") or 0)
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if choice.get("finish_reason"):
            state.completion.finish_reason = choice["finish_reason"]
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        content = delta.get("content") or ""
        if reasoning or content or delta.get("tool_calls"):
            state.n_chunks += 1
            state.first_token_at = state.first_token_at or time.monotonic()
        if reasoning:
            state.completion.reasoning += reasoning
            if on_delta:
                on_delta("reasoning", reasoning)
        if content:
            state.completion.content += content
            if on_delta:
                on_delta("content", content)
        for tool_delta in delta.get("tool_calls") or []:
            state.add_tool_delta(tool_delta)


def _finish(state: _Assembly, started: float) -> Completion:
    completion = state.completion
    completion.tool_calls = [state.calls[i] for i in sorted(state.calls)]
    if not completion.completion_tokens:
        completion.completion_tokens = state.n_chunks  # servers without usage: ~1 token a chunk
    first = state.first_token_at or started
    elapsed = time.monotonic() - first
    if elapsed > 0 and completion.completion_tokens > 1:
        completion.tokens_per_second = (completion.completion_tokens - 1) / elapsed
    return completion


def _error_text(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    return str(body)


async def _raise_for_status(response: httpx.Response, endpoint: str) -> None:
    if response.status_code < 400:
        return
    raw = (await response.aread()).decode("utf-8", "replace")
    try:
        detail = _error_text(json.loads(raw))
    except json.JSONDecodeError:
        detail = raw[:500]
    hint = ""
    if response.status_code in (401, 403):
        hint = " (check the profile's API key: `openjet login`)"
    raise LLMError(
        f"{endpoint} answered {response.status_code}: {detail}{hint}", response.status_code
    )


def _whole_response(body: dict[str, Any], on_delta: DeltaCallback | None) -> Completion:
    """A server that ignored `stream: true` and answered with one JSON completion."""
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    usage = body.get("usage") or {}
    completion = Completion(
        content=message.get("content") or "",
        reasoning=message.get("reasoning_content") or message.get("reasoning") or "",
        tool_calls=list(message.get("tool_calls") or []),
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
    )
    for kind, text in (("reasoning", completion.reasoning), ("content", completion.content)):
        if text and on_delta:
            on_delta(kind, text)
    return completion

"""The orchestrator client: one non-streamed chat completion at a time, with bounded waits.

Rate limits (429) are retried after the server's `Retry-After` (seconds or an HTTP date) when
that wait is within `max_wait_s`, else the call fails at once saying how long the server asked
for; 5xx and connection errors are retried with a short backoff; a timeout fails the call.
Every error message is scrubbed of the API key, and the key only ever travels in the
Authorization header to the endpoint it belongs to.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from agent.context import estimate_tokens

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class CloudError(Exception):
    """The orchestrator call failed; `kind` is timeout, rate_limited, http, connection or reply."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class CloudReply:
    content: str
    prompt_tokens: int
    completion_tokens: int
    estimated: bool  # True when the server sent no `usage` and the tokens were counted here


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` as seconds from now (delta-seconds or an HTTP date); None when absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def reply_from_body(body: Any, messages: list[dict[str, Any]]) -> CloudReply:
    """The reply text and its token counts (the server's `usage`, else an estimate)."""
    try:
        message = body["choices"][0]["message"]
        content = message.get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        raise CloudError("the orchestrator's answer has no choices[0].message", "reply") from None
    if not isinstance(content, str):
        content = json.dumps(content)
    usage = body.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0) if isinstance(usage, dict) else 0
    completion = int(usage.get("completion_tokens") or 0) if isinstance(usage, dict) else 0
    if prompt and completion:
        return CloudReply(content, prompt, completion, estimated=False)
    return CloudReply(
        content,
        prompt or estimate_tokens(messages),
        completion or estimate_tokens(content),
        estimated=True,
    )


class OrchestratorClient:
    """Talks to one OpenAI-compatible orchestrator endpoint."""

    def __init__(
        self,
        endpoint: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 180.0,
        max_wait_s: float = 60.0,
        attempts: int = 3,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.max_wait_s = max_wait_s
        self.attempts = attempts
        self._key = api_key or ""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout_s))

    async def aclose(self) -> None:
        await self._client.aclose()

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _fail(self, message: str, kind: str) -> CloudError:
        return CloudError(self._scrub(message), kind)

    async def resolve_model(self) -> str:
        if not self.model:
            try:
                response = await self._client.get(f"{self.endpoint}/models")
                self.model = str(response.json()["data"][0]["id"])
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                raise self._fail(
                    f"no orchestrator model configured and {self.endpoint}/models did not name "
                    "one; set slipstream.model (openjet config set slipstream.model NAME)",
                    "reply",
                ) from exc
        return self.model

    async def chat(self, messages: list[dict[str, Any]]) -> CloudReply:
        body = {"model": await self.resolve_model(), "messages": messages, "stream": False}
        for attempt in range(1, self.attempts + 1):
            try:
                response = await self._client.post(f"{self.endpoint}/chat/completions", json=body)
            except httpx.TimeoutException as exc:
                raise self._fail(
                    f"the orchestrator at {self.endpoint} did not answer within "
                    f"{self.timeout_s:g}s ({type(exc).__name__})",
                    "timeout",
                ) from None
            except httpx.HTTPError as exc:
                if attempt == self.attempts:
                    raise self._fail(
                        f"cannot reach the orchestrator at {self.endpoint}: {exc}", "connection"
                    ) from None
                await asyncio.sleep(0.5 * attempt)
                continue
            if response.status_code < 400:
                try:
                    return reply_from_body(response.json(), messages)
                except ValueError:
                    raise self._fail(
                        f"the orchestrator at {self.endpoint} answered with something that is not JSON",
                        "reply",
                    ) from None
            await self._wait_or_raise(response, attempt)
        raise self._fail(f"the orchestrator at {self.endpoint} kept failing", "http")

    async def _wait_or_raise(self, response: httpx.Response, attempt: int) -> None:
        status = response.status_code
        detail = _error_detail(response)
        if status not in RETRY_STATUS or attempt == self.attempts:
            kind = "rate_limited" if status == 429 else "http"
            hint = " (check the key: openjet login)" if status in (401, 403) else ""
            raise self._fail(
                f"the orchestrator at {self.endpoint} answered {status}: {detail}{hint}", kind
            )
        wait = retry_after_seconds(response.headers.get("retry-after"))
        if wait is None:
            wait = 1.0 * attempt
        if wait > self.max_wait_s:
            raise self._fail(
                f"the orchestrator at {self.endpoint} is rate-limiting and asks to wait "
                f"{wait:.0f}s, longer than the {self.max_wait_s:g}s Slipstream waits",
                "rate_limited",
            )
        await asyncio.sleep(wait)


def _error_detail(response: httpx.Response) -> str:
    try:
        body = response.json()
        error = body.get("error", body) if isinstance(body, dict) else body
        text = error.get("message", error) if isinstance(error, dict) else error
        return str(text)[:300]
    except ValueError:
        return response.text[:300]

"""Live engine statistics for the engine panel: fetch and parse `GET /v1/slots`.

Headless (no textual). The engine panel polls `EngineMonitor.poll` once a second from a
worker; each poll gives an `EngineReading` — the parsed stats, or why there are none (the
endpoint is not ours, or it is down) — and appends the aggregate tok/s to a short history for
the sparkline. Endpoints that are not an OpenJet engine (llama-server, Ollama, vLLM) answer 404
here; the panel then shows what the agents report themselves.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx

from agent.profiles import is_loopback

HISTORY_LENGTH = 60  # one sample a second: the last minute
NOT_OURS = "not an OpenJet engine (no /v1/slots)"


@dataclass(frozen=True)
class SlotStats:
    """One engine slot (one agent's request at a time)."""

    id: int
    state: str
    tokens_per_second: float
    context_used: int
    context_limit: int
    cached_tokens: int
    drafts_proposed: int
    drafts_accepted: int
    request_id: str | None


@dataclass(frozen=True)
class EngineStats:
    """The whole `/v1/slots` answer."""

    kind: str
    model: str
    fallback_reason: str | None
    vram_used_bytes: int | None
    vram_total_bytes: int | None
    kv_pool_tokens: int
    kv_pool_used: int
    tokens_per_second: float
    slots: tuple[SlotStats, ...]
    queued: int

    @property
    def drafts_proposed(self) -> int:
        return sum(slot.drafts_proposed for slot in self.slots)

    @property
    def drafts_accepted(self) -> int:
        return sum(slot.drafts_accepted for slot in self.slots)

    @property
    def draft_acceptance(self) -> float | None:
        """Accepted / proposed draft tokens over all slots; None before any draft."""
        proposed = self.drafts_proposed
        return self.drafts_accepted / proposed if proposed else None


@dataclass(frozen=True)
class EngineReading:
    """One poll: stats when the endpoint is an OpenJet engine, else the reason there are none."""

    stats: EngineStats | None
    problem: str | None = None


def is_local(endpoint: str) -> bool:
    """True for endpoints on this machine: only those are polled (never a cloud provider)."""
    return is_loopback(endpoint)


def slots_url(endpoint: str) -> str:
    """`http://host:port/v1` -> `http://host:port/v1/slots` (a bare `http://host:port` too)."""
    base = endpoint.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/slots"


def _int(value: Any, field: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{field}: expected a number, got {value!r}")
    return int(value)


def _slot(raw: dict[str, Any]) -> SlotStats:
    return SlotStats(
        id=_int(raw.get("id"), "slots[].id"),
        state=str(raw.get("state", "idle")),
        tokens_per_second=float(raw.get("tokens_per_second") or 0.0),
        context_used=_int(raw.get("context_used", 0), "slots[].context_used"),
        context_limit=_int(raw.get("context_limit", 0), "slots[].context_limit"),
        cached_tokens=_int(raw.get("cached_tokens", 0), "slots[].cached_tokens"),
        drafts_proposed=_int(raw.get("drafts_proposed", 0), "slots[].drafts_proposed"),
        drafts_accepted=_int(raw.get("drafts_accepted", 0), "slots[].drafts_accepted"),
        request_id=raw.get("request_id"),
    )


def parse_slots(payload: Any) -> EngineStats:
    """Validate and convert a `/v1/slots` JSON body; ValueError names the field that is wrong."""
    if not isinstance(payload, dict) or not isinstance(payload.get("engine"), dict):
        raise ValueError("expected an object with an 'engine' object")
    engine = payload["engine"]
    slots = payload.get("slots", [])
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        raise ValueError("slots: expected a list of objects")
    return EngineStats(
        kind=str(engine.get("kind", "unknown")),
        model=str(engine.get("model", "")),
        fallback_reason=engine.get("fallback_reason") or None,
        vram_used_bytes=_int(engine.get("vram_used_bytes"), "vram_used_bytes", optional=True),
        vram_total_bytes=_int(engine.get("vram_total_bytes"), "vram_total_bytes", optional=True),
        kv_pool_tokens=_int(engine.get("kv_pool_tokens", 0), "kv_pool_tokens"),
        kv_pool_used=_int(engine.get("kv_pool_used", 0), "kv_pool_used"),
        tokens_per_second=float(engine.get("tokens_per_second") or 0.0),
        slots=tuple(_slot(s) for s in slots),
        queued=_int(payload.get("queued", 0), "queued"),
    )


class EngineMonitor:
    """Polls one endpoint's `/v1/slots` and keeps the recent aggregate tok/s."""

    def __init__(self, endpoint: str, timeout: float = 2.0) -> None:
        self.endpoint = endpoint
        self.url = slots_url(endpoint)
        self.timeout = timeout
        self.history: deque[float] = deque([0.0] * HISTORY_LENGTH, maxlen=HISTORY_LENGTH)

    async def poll(self, client: httpx.AsyncClient) -> EngineReading:
        """Fetch once; never raises for network or format problems (they become `problem`)."""
        try:
            response = await client.get(self.url, timeout=self.timeout)
        except httpx.HTTPError as exc:
            return EngineReading(None, f"no answer from {self.url}: {type(exc).__name__}")
        if response.status_code == 404:
            return EngineReading(None, NOT_OURS)
        if response.status_code != 200:
            return EngineReading(None, f"{self.url} answered HTTP {response.status_code}")
        try:
            stats = parse_slots(response.json())
        except ValueError as exc:
            return EngineReading(None, f"unexpected /v1/slots answer: {exc}")
        return EngineReading(stats)

    def record(self, tokens_per_second: float) -> None:
        """Add this second's aggregate tok/s to the sparkline history."""
        self.history.append(max(0.0, tokens_per_second))

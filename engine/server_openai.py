"""OpenAI response shapes: chat and text completions, whole and as streaming chunks, usage,
and the `/v1/slots` and `/metrics` views of the engine's statistics.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from engine.scheduler_events import EngineSnapshot, Usage


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def usage_json(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {
            "accepted_prediction_tokens": usage.drafts_accepted,
            "rejected_prediction_tokens": usage.drafts_proposed - usage.drafts_accepted,
        },
    }


def timings_json(usage: Usage) -> dict[str, float]:
    """llama-server-style timings (the TUI and benchmarks read tok/s from them)."""
    processed = usage.prompt_tokens - usage.cached_tokens
    decode_rate = (
        (usage.completion_tokens - 1) / usage.decode_seconds if usage.decode_seconds > 0 else 0.0
    )
    return {
        "prompt_n": processed,
        "prompt_ms": round(usage.prompt_seconds * 1000, 3),
        "predicted_n": usage.completion_tokens,
        "predicted_ms": round(usage.decode_seconds * 1000, 3),
        "predicted_per_second": round(max(decode_rate, 0.0), 3),
        "draft_n": usage.drafts_proposed,
        "draft_n_accepted": usage.drafts_accepted,
    }


class ChunkMaker:
    """Builds the `chat.completion.chunk` / `text_completion` objects of one response."""

    def __init__(self, model: str, chat: bool) -> None:
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        self.model = model
        self.chat = chat

    def _base(self) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        chunk = self._base()
        if self.chat:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {
                "index": 0,
                "text": delta.get("content", ""),
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        chunk["choices"] = [choice]
        return chunk

    def usage(self, usage: Usage) -> dict[str, Any]:
        chunk = self._base()
        chunk["choices"] = []
        chunk["usage"] = usage_json(usage)
        chunk["timings"] = timings_json(usage)
        return chunk

    def whole(self, message: dict[str, Any], finish_reason: str, usage: Usage) -> dict[str, Any]:
        body = self._base()
        body["object"] = "chat.completion" if self.chat else "text_completion"
        if self.chat:
            body["choices"] = [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
            ]
        else:
            body["choices"] = [
                {
                    "index": 0,
                    "text": message.get("content") or "",
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ]
        body["usage"] = usage_json(usage)
        body["timings"] = timings_json(usage)
        return body


def slots_json(
    snapshot: EngineSnapshot,
    kind: str,
    model: str,
    fallback_reason: str | None,
    vram: tuple[int | None, int | None],
) -> dict[str, Any]:
    """The `/v1/slots` document (shape agreed in the shared contracts)."""
    engine = {
        "kind": kind,
        "model": model,
        "fallback_reason": fallback_reason,
        "vram_used_bytes": vram[0],
        "vram_total_bytes": vram[1],
        "kv_pool_tokens": snapshot.kv_pool_tokens,
        "kv_pool_used": snapshot.kv_pool_used,
        "tokens_per_second": snapshot.tokens_per_second,
    }
    slots = [
        {
            "id": s.id,
            "state": s.state,
            "tokens_per_second": s.tokens_per_second,
            "context_used": s.context_used,
            "context_limit": s.context_limit,
            "cached_tokens": s.cached_tokens,
            "drafts_proposed": s.drafts_proposed,
            "drafts_accepted": s.drafts_accepted,
            "request_id": s.request_id,
        }
        for s in snapshot.slots
    ]
    return {"engine": engine, "slots": slots, "queued": snapshot.queued}


_COUNTERS = {
    "requests": "requests finished",
    "prompt_tokens": "prompt tokens received",
    "cached_tokens": "prompt tokens served from the prefix cache",
    "generated_tokens": "tokens generated",
    "drafts_proposed": "speculative draft tokens proposed",
    "drafts_accepted": "speculative draft tokens accepted",
    "steps": "backend steps run",
    "rows": "rows processed by backend steps",
    "evictions": "idle caches evicted to make room in the KV pool",
}


def metrics_text(snapshot: EngineSnapshot) -> str:
    """Prometheus exposition text of the engine's counters and gauges."""
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP openjet_{name} {help_text}")
        lines.append(f"# TYPE openjet_{name} {kind}")
        lines.extend(f"openjet_{name}{labels} {value:g}" for labels, value in samples)

    for key, help_text in _COUNTERS.items():
        metric(f"{key}_total", "counter", help_text, [("", snapshot.counters.get(key, 0.0))])
    metric(
        "tokens_per_second",
        "gauge",
        "tokens generated per second, all slots",
        [("", snapshot.tokens_per_second)],
    )
    metric("requests_queued", "gauge", "requests waiting for a slot", [("", snapshot.queued)])
    metric(
        "kv_pool_tokens",
        "gauge",
        "size of the shared KV pool in tokens",
        [("", snapshot.kv_pool_tokens)],
    )
    metric("kv_pool_used_tokens", "gauge", "KV pool tokens in use", [("", snapshot.kv_pool_used)])
    metric("checkpoints", "gauge", "saved prefix checkpoints", [("", snapshot.checkpoints)])
    metric(
        "slot_context_used",
        "gauge",
        "tokens held by each slot",
        [(f'{{slot="{s.id}"}}', s.context_used) for s in snapshot.slots],
    )
    metric(
        "slot_busy",
        "gauge",
        "1 while a slot serves a request",
        [
            (f'{{slot="{s.id}",state="{s.state}"}}', 0.0 if s.state == "idle" else 1.0)
            for s in snapshot.slots
        ],
    )
    return "\n".join(lines) + "\n"

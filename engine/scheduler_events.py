"""The scheduler's public data: what a request is, what it streams back, and live statistics.

A `GenerationRequest` is tokens in, tokens out — the scheduler knows nothing of chat, text or
agents. Each request streams `Queued`, `Started`, `TokensOut` (one or more) and exactly one
`Finished` to the sink it was submitted with; the sink is called on the engine thread, so the
server's sink hands events over to its event loop. `EngineSnapshot` is what `/v1/slots`,
`/metrics` and `openjet top` show.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.backend import GREEDY, SamplingParams
from engine.drafting import DraftProvider

_ids = itertools.count(1)


def new_request_id() -> str:
    return f"req-{next(_ids)}"


@dataclass
class GenerationRequest:
    """One generation: the prompt tokens, how to sample, and when to stop."""

    prompt: list[int]
    sampling: SamplingParams = GREEDY
    max_tokens: int = 256
    stop_ids: frozenset[int] = frozenset()  # end-of-generation tokens (not emitted)
    id: str = field(default_factory=new_request_id)
    n_draft: int | None = None  # None: the scheduler's configured value
    draft_provider: DraftProvider | None = None  # overrides the scheduler's draft policy


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose state was reused (not processed)
    drafts_proposed: int = 0
    drafts_accepted: int = 0
    prompt_seconds: float = 0.0
    decode_seconds: float = 0.0


@dataclass(frozen=True)
class Queued:
    position: int  # 1 = next to get a slot


@dataclass(frozen=True)
class Started:
    slot: int
    cached_tokens: int


@dataclass(frozen=True)
class TokensOut:
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Finished:
    reason: str  # "stop" | "length" | "cancelled" | "error"
    usage: Usage
    error: str | None = None


RequestEvent = Queued | Started | TokensOut | Finished
EventSink = Callable[[RequestEvent], None]


@dataclass(frozen=True)
class SlotStats:
    id: int
    state: str  # "idle" | "prefill" | "decode"
    tokens_per_second: float
    context_used: int
    context_limit: int
    cached_tokens: int
    drafts_proposed: int
    drafts_accepted: int
    request_id: str | None


@dataclass(frozen=True)
class EngineSnapshot:
    slots: tuple[SlotStats, ...] = ()
    queued: int = 0
    kv_pool_tokens: int = 0
    kv_pool_used: int = 0
    tokens_per_second: float = 0.0
    checkpoints: int = 0
    counters: dict[str, float] = field(default_factory=dict)  # monotonic totals for /metrics

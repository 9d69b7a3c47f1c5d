"""Live statistics of the scheduler: counters, token rates, and the published snapshot.

The engine thread updates a `StatsBook` as it works and publishes an immutable
`EngineSnapshot` after every iteration; HTTP handlers read the latest one without locking
(replacing a reference is atomic in CPython).
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

from engine.scheduler_events import EngineSnapshot, SlotStats

if TYPE_CHECKING:
    from engine.scheduler import Scheduler

RATE_WINDOW_S = 3.0


class StatsBook:
    def __init__(self) -> None:
        self.latest = EngineSnapshot()
        self._counters: dict[str, float] = defaultdict(float)
        self._recent: deque[tuple[float, int]] = deque()  # (time, tokens emitted)
        self._recent_sum = 0  # tokens in _recent
        self._slot_rate: dict[int, float] = {}
        self._slot_drafts: dict[int, tuple[int, int]] = defaultdict(lambda: (0, 0))

    def count(self, name: str, amount: float) -> None:
        self._counters[name] += amount

    def tokens_out(self, n: int, now: float) -> None:
        self._recent.append((now, n))
        self._recent_sum += n
        self._counters["generated_tokens"] += n

    def slot_done(self, slot_id: int, rate: float, job: Any) -> None:
        """Fold a finished request into its slot's lasting figures."""
        if rate > 0:
            self._slot_rate[slot_id] = rate
        proposed, accepted = self._slot_drafts[slot_id]
        self._slot_drafts[slot_id] = (proposed + job.proposed, accepted + job.accepted)

    def aggregate_rate(self, now: float) -> float:
        while self._recent and self._recent[0][0] < now - RATE_WINDOW_S:
            self._recent_sum -= self._recent.popleft()[1]
        if not self._recent:
            return 0.0
        span = max(now - self._recent[0][0], 0.25)
        return self._recent_sum / span

    def publish(self, scheduler: Scheduler, queued: int) -> None:
        now = time.monotonic()
        n_ctx = scheduler.backend.n_ctx
        slots = []
        for slot in scheduler.slots:
            job = slot.job
            proposed, accepted = self._slot_drafts[slot.id]
            rate = self._slot_rate.get(slot.id, 0.0)
            if job is not None:
                proposed, accepted = proposed + job.proposed, accepted + job.accepted
                if job.first_token_at and len(job.generated) > 1 and now > job.first_token_at:
                    rate = (len(job.generated) - 1) / (now - job.first_token_at)
            slots.append(
                SlotStats(
                    id=slot.id,
                    state="idle" if job is None else job.phase,
                    tokens_per_second=round(rate, 2),
                    context_used=len(slot.tokens),
                    context_limit=n_ctx,
                    cached_tokens=job.cached if job else 0,
                    drafts_proposed=proposed,
                    drafts_accepted=accepted,
                    request_id=job.request.id if job else None,
                )
            )
        pool = scheduler.backend.pool
        self.latest = EngineSnapshot(
            slots=tuple(slots),
            queued=queued,
            kv_pool_tokens=pool.total_tokens,
            kv_pool_used=pool.used_tokens,
            tokens_per_second=round(self.aggregate_rate(now), 2),
            checkpoints=len(scheduler.cache.index),
            counters=dict(self._counters),
        )

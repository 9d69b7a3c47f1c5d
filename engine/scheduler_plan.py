"""The scheduler's bookkeeping records and the pure helpers its planning uses.

`Job` is one request's progress (prompt position, pending decode group, counters); `SlotRecord`
is what the scheduler knows of a backend slot (the tokens whose state it holds, its job).
`share_rows` splits a step's prefill budget fairly between the slots that have prompt left.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.scheduler_events import EventSink, GenerationRequest, Usage


@dataclass
class Job:
    request: GenerationRequest
    sink: EventSink
    slot: int = -1
    phase: str = "queued"  # queued | prefill | decode
    queue_position: int = 0
    prompt_pos: int = 0  # prompt tokens whose state the slot holds
    cuts: list[int] = field(default_factory=list)  # slot lengths at which to save checkpoints
    group: list[int] = field(default_factory=list)  # next decode group: [pending token, *drafts]
    generated: list[int] = field(default_factory=list)
    cached: int = 0
    proposed: int = 0
    accepted: int = 0
    admitted_at: float = 0.0
    first_token_at: float = 0.0


@dataclass
class SlotRecord:
    id: int
    tokens: list[int] = field(default_factory=list)  # tokens whose state the backend holds
    job: Job | None = None
    last_used: float = 0.0


def share_rows(wants: list[int], budget: int) -> list[int]:
    """Rows for each claimant: equal shares of the budget, what one cannot use going to the
    others, earlier claimants taking the remainder (callers rotate the order for fairness)."""
    sizes = [0] * len(wants)
    while budget > 0:
        hungry = [i for i, want in enumerate(wants) if sizes[i] < want]
        if not hungry:
            break
        share = max(1, budget // len(hungry))
        for i in hungry:
            take = min(share, budget, wants[i] - sizes[i])
            sizes[i] += take
            budget -= take
    return sizes


def usage_of(job: Job) -> Usage:
    now = time.monotonic()
    prompt_s = (job.first_token_at or now) - job.admitted_at if job.admitted_at else 0.0
    decode_s = now - job.first_token_at if job.first_token_at else 0.0
    return Usage(
        prompt_tokens=len(job.request.prompt),
        completion_tokens=len(job.generated),
        cached_tokens=job.cached,
        drafts_proposed=job.proposed,
        drafts_accepted=job.accepted,
        prompt_seconds=prompt_s,
        decode_seconds=decode_s,
    )


def rate_of(job: Job) -> float:
    """Decode tokens per second of a job so far (0 before its second token)."""
    if not job.first_token_at or len(job.generated) < 2:
        return 0.0
    elapsed = time.monotonic() - job.first_token_at
    return (len(job.generated) - 1) / elapsed if elapsed > 0 else 0.0

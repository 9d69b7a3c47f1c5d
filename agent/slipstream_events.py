"""What a Slipstream run reports to its consumer (the TUI, a CLI), and its token accounting.

Events are frozen dataclasses carrying the `run_id` (= the Slipstream session's id). The
worker's own agent events are passed through inside `WorkerEvent`, approvals included: answer
them with `SlipstreamRun.resolve_approval`. `CloudActivity(active=True)` is sent before every
request that carries data to the orchestrator and `active=False` when it is over, so a consumer
can show plainly while data goes to the cloud.

Accounting counts tokens sent to and received from each side (the server's `usage`, else an
estimate) per bucket — "plan", "step 1", "step 2", …, "final" — and the orchestrator's share of
all tokens; the design aims at 20% or less.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agent.events import AgentEvent
from agent.slipstream_protocol import PlanStep

Side = Literal["orchestrator", "local"]
RunEndReason = Literal["done", "incomplete", "local_only", "cancelled", "error"]


@dataclass(frozen=True)
class PlanReady:
    run_id: str
    steps: tuple[PlanStep, ...]
    first_step: int  # the index (0-based) the plan starts at; earlier steps were accepted


@dataclass(frozen=True)
class StepStarted:
    run_id: str
    index: int  # 0-based
    title: str
    attempt: int  # 1 for the first run, 2.. for revisions
    worker_id: str  # the worker agent's session id


@dataclass(frozen=True)
class WorkerEvent:
    run_id: str
    index: int
    event: AgentEvent


@dataclass(frozen=True)
class StepReported:
    run_id: str
    index: int
    attempt: int
    report: str  # exactly what the orchestrator receives


@dataclass(frozen=True)
class ReviewVerdict:
    run_id: str
    index: int
    verdict: str  # accept | revise | replan | local (accepted without review: cloud unavailable)
    feedback: str


@dataclass(frozen=True)
class FinalReview:
    run_id: str
    verdict: str  # done | incomplete
    summary: str


@dataclass(frozen=True)
class AccountingUpdated:
    run_id: str
    orchestrator_tokens: int
    local_tokens: int
    share: float  # orchestrator / (orchestrator + local), 0.0 when nothing was counted


@dataclass(frozen=True)
class CloudActivity:
    run_id: str
    active: bool
    endpoint: str


@dataclass(frozen=True)
class CloudFailed:
    run_id: str
    message: str
    continuing_locally: bool


@dataclass(frozen=True)
class RunFinished:
    run_id: str
    reason: RunEndReason
    message: str


SlipstreamEvent = (
    PlanReady
    | StepStarted
    | WorkerEvent
    | StepReported
    | ReviewVerdict
    | FinalReview
    | AccountingUpdated
    | CloudActivity
    | CloudFailed
    | RunFinished
)


@dataclass
class TokenCount:
    sent: int = 0
    received: int = 0

    @property
    def total(self) -> int:
        return self.sent + self.received


@dataclass
class Accounting:
    """Tokens per bucket and side; built from the session's `slipstream_tokens` events."""

    buckets: dict[str, dict[str, TokenCount]] = field(default_factory=dict)

    def add(self, bucket: str, side: Side, sent: int, received: int) -> None:
        count = self.buckets.setdefault(bucket, {}).setdefault(side, TokenCount())
        count.sent += sent
        count.received += received

    def side_total(self, side: Side, bucket: str | None = None) -> int:
        buckets = [self.buckets.get(bucket, {})] if bucket else list(self.buckets.values())
        return sum(b[side].total for b in buckets if side in b)

    @property
    def orchestrator_tokens(self) -> int:
        return self.side_total("orchestrator")

    @property
    def local_tokens(self) -> int:
        return self.side_total("local")

    def share(self, bucket: str | None = None) -> float:
        cloud = self.side_total("orchestrator", bucket)
        total = cloud + self.side_total("local", bucket)
        return cloud / total if total else 0.0

    def lines(self) -> list[str]:
        """One line per bucket, in the order they were first counted."""
        return [
            f"{name}: orchestrator {self.side_total('orchestrator', name)}, "
            f"local {self.side_total('local', name)} ({round(self.share(name) * 100)}%)"
            for name in self.buckets
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            "orchestrator_tokens": self.orchestrator_tokens,
            "local_tokens": self.local_tokens,
            "share": round(self.share(), 4),
            "buckets": {
                name: {side: {"sent": c.sent, "received": c.received} for side, c in sides.items()}
                for name, sides in self.buckets.items()
            },
        }

    @classmethod
    def from_events(cls, events: list[tuple[str, dict[str, Any]]]) -> Accounting:
        accounting = cls()
        for kind, data in events:
            if kind == "slipstream_tokens":
                accounting.add(data["bucket"], data["side"], data["sent"], data["received"])
        return accounting


def is_slipstream_session(events: list[tuple[str, dict[str, Any]]]) -> bool:
    return any(kind == "slipstream_started" for kind, _ in events)


def share_label(accounting: Accounting) -> str:
    """The footer text: "Orchestrator 14%"."""
    return f"Orchestrator {round(accounting.share() * 100)}%"

"""Where a Slipstream run stands, rebuilt from its session's append-only events.

Every decision of a run is an event in the Slipstream session (`slipstream_started`, `_plan`,
`_step_started`, `_report`, `_review`, `_local_only`, `_cloud_retry`, `_final`, `_finished`,
`_tokens`), written before the run acts on it. Replaying them gives the plan, the next step to
run, the attempt and feedback of a revision in progress, and whether the cloud is still in use —
so a resumed run continues at the step it stopped, never redoing an accepted step or a finished
worker turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.slipstream_events import Accounting
from agent.slipstream_protocol import PlanStep, steps_from_json


@dataclass
class Attempt:
    index: int
    attempt: int
    worker_id: str
    prompt: str = ""  # what the worker is sent (empty: continue its interrupted turn)
    seq_before: int = 0  # the worker session's last message seq when the attempt began
    report: str | None = None  # set once the worker's report was built
    reviewed: bool = False


@dataclass
class RunState:
    task: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    plan: list[PlanStep] = field(default_factory=list)
    next_index: int = 0  # the first step not yet accepted
    attempt: Attempt | None = None  # the latest attempt of the step at next_index
    feedback: str = ""  # the orchestrator's feedback for the next attempt (after "revise")
    revisions: int = 0  # of the step at next_index
    replans: int = 0
    local_only: bool = False
    local_reason: str = ""
    final: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None
    accounting: Accounting = field(default_factory=Accounting)
    worker_ids: dict[int, str] = field(default_factory=dict)  # step index -> worker session

    def apply(self, kind: str, data: dict[str, Any]) -> None:
        handler = getattr(self, "_on_" + kind.removeprefix("slipstream_"), None)
        if kind.startswith("slipstream_") and handler is not None:
            handler(data)

    def _on_started(self, data: dict[str, Any]) -> None:
        self.task = data["task"]
        self.settings = data

    def _on_approval(self, data: dict[str, Any]) -> None:
        self.settings = {**self.settings, "approval": data["approval"]}

    def _on_plan(self, data: dict[str, Any]) -> None:
        self.plan = list(steps_from_json(data["steps"]))
        self.replans += 1 if data.get("replan") else 0
        self.final = None  # more steps after a final review: that review is superseded

    def _on_step_started(self, data: dict[str, Any]) -> None:
        self.attempt = Attempt(
            data["index"],
            data["attempt"],
            data["worker_id"],
            data.get("prompt", ""),
            data.get("seq_before", 0),
        )
        self.worker_ids[data["index"]] = data["worker_id"]

    def _on_report(self, data: dict[str, Any]) -> None:
        if self.attempt and self.attempt.index == data["index"]:
            self.attempt.report = data["report"]

    def _on_review(self, data: dict[str, Any]) -> None:
        if self.attempt:
            self.attempt.reviewed = True
        verdict = data["verdict"]
        if verdict == "revise":
            self.feedback = data.get("feedback", "")
            self.revisions += 1
            return
        self.next_index = data["index"] + 1
        self.feedback, self.revisions, self.attempt = "", 0, None

    def _on_local_only(self, data: dict[str, Any]) -> None:
        self.local_only = True
        self.local_reason = data.get("reason", "")

    def _on_cloud_retry(self, data: dict[str, Any]) -> None:
        self.local_only, self.local_reason = False, ""

    def _on_final(self, data: dict[str, Any]) -> None:
        self.final = data

    def _on_finished(self, data: dict[str, Any]) -> None:
        self.finished = data

    def _on_tokens(self, data: dict[str, Any]) -> None:
        self.accounting.add(data["bucket"], data["side"], data["sent"], data["received"])

    @classmethod
    def from_events(cls, events: list[tuple[str, dict[str, Any]]]) -> RunState:
        state = cls()
        for kind, data in events:
            state.apply(kind, data)
        return state

    def pending_attempt(self) -> Attempt | None:
        """The attempt of the current step that started but was not reviewed yet, if any."""
        a = self.attempt
        if a and a.index == self.next_index and not a.reviewed:
            return a
        return None

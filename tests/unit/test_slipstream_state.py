"""Replaying a Slipstream session's events: where a resumed run continues, and the accounting;
what a worker's report keeps (exit codes) and leaves out (tool output)."""

from __future__ import annotations

from typing import Any

from agent.events import ToolCallFinished, ToolCallStarted, TurnFinished, UsageUpdated
from agent.slipstream_events import Accounting, share_label
from agent.slipstream_protocol import PlanStep
from agent.slipstream_state import RunState
from agent.slipstream_worker import UsageMeter, WorkLog, build_report
from agent.slipstream_workspace import ChangeSet

STEP = {"title": "t", "instructions": "i", "acceptance": ["a"]}


def ev(kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
    return f"slipstream_{kind}", data


def test_revision_then_accept_then_replan() -> None:
    events = [
        ev("started", task="T"),
        ev("plan", steps=[STEP, STEP]),
        ev("step_started", index=0, attempt=1, worker_id="w1", prompt="p", seq_before=0),
        ev("report", index=0, attempt=1, report="r1"),
        ev("review", index=0, verdict="revise", feedback="fix"),
    ]
    state = RunState.from_events(events)
    assert (state.task, state.next_index, state.feedback, state.revisions) == ("T", 0, "fix", 1)
    assert state.pending_attempt() is None  # the next attempt is a revision, not a resume
    events += [
        ev("step_started", index=0, attempt=2, worker_id="w1", prompt="fix it", seq_before=6),
    ]
    pending = RunState.from_events(events).pending_attempt()
    assert pending and (pending.attempt, pending.prompt, pending.seq_before, pending.report) == (
        2,
        "fix it",
        6,
        None,
    )
    events += [ev("report", index=0, attempt=2, report="r2")]
    pending = RunState.from_events(events).pending_attempt()
    assert pending and pending.report == "r2"  # resume goes straight to the review
    events += [
        ev("review", index=0, verdict="accept", feedback=""),
        ev("step_started", index=1, attempt=1, worker_id="w2"),
        ev("report", index=1, attempt=1, report="r3"),
        ev("review", index=1, verdict="replan", feedback="more"),
        ev("plan", steps=[STEP, STEP, STEP], replan=True),
    ]
    state = RunState.from_events(events)
    assert (state.next_index, len(state.plan), state.replans, state.revisions) == (2, 3, 1, 0)
    assert state.worker_ids == {0: "w1", 1: "w2"} and state.pending_attempt() is None
    assert not state.local_only and state.finished is None
    state.apply("slipstream_local_only", {"reason": "timeout"})
    state.apply("slipstream_finished", {"reason": "local_only", "message": "m"})
    assert state.local_only and state.local_reason == "timeout" and state.finished


def test_accounting_per_bucket_and_share() -> None:
    def tokens(bucket: str, side: str, sent: int, received: int) -> tuple[str, dict[str, Any]]:
        return "slipstream_tokens", {
            "bucket": bucket,
            "side": side,
            "sent": sent,
            "received": received,
        }

    events = [
        tokens("plan", "orchestrator", 100, 50),
        tokens("step 1", "local", 800, 200),
        tokens("step 1", "orchestrator", 40, 10),
        ("usage", {"prompt_tokens": 999}),
    ]
    accounting = Accounting.from_events(events)
    assert (accounting.orchestrator_tokens, accounting.local_tokens) == (200, 1000)
    assert accounting.share() == 200 / 1200 and accounting.share("step 1") == 50 / 1050
    assert accounting.share("final") == 0.0 and share_label(accounting) == "Orchestrator 17%"
    assert accounting.as_json()["buckets"]["step 1"]["local"] == {"sent": 800, "received": 200}
    assert accounting.lines() == [
        "plan: orchestrator 150, local 0 (100%)",
        "step 1: orchestrator 50, local 1000 (5%)",
    ]
    assert Accounting().share() == 0.0


def test_usage_meter_deltas_and_estimate_without_usage() -> None:
    meter = UsageMeter(100, 10)
    assert meter.delta(UsageUpdated("w", 300, 30, 5.0, 220, 32768)) == (200, 20)
    # a server that sent no usage: prompt unchanged, the context estimate stands in
    assert meter.delta(UsageUpdated("w", 300, 45, 5.0, 515, 32768)) == (500, 15)


def test_report_keeps_exit_codes_not_output() -> None:
    log = WorkLog()
    log.note(ToolCallStarted("w", "c1", "run_shell", {"command": "pytest  -q"}))
    log.note(ToolCallFinished("w", "c1", "run_shell", True, "exit code 1\nFAILED SECRET_OUTPUT"))
    log.note(ToolCallStarted("w", "c2", "run_shell", {"command": "make"}))
    log.note(ToolCallFinished("w", "c2", "run_shell", False, "the user denied this call."))
    log.note(ToolCallStarted("w", "c3", "read_file", {"path": "a.py"}))
    log.note(ToolCallFinished("w", "c3", "read_file", True, "a.py:\nFILE_SECRET"))
    log.note(TurnFinished("w", "step_limit", "Stopped.\nOpen problems: tests fail"))
    step = PlanStep("Fix tests", "i", ("a",))
    report = build_report(step, 0, 2, log, ChangeSet(" a.py | +1 -0", "+x\n", 1))
    assert 'Report for step 1 "Fix tests" (attempt 2).' in report
    assert "The worker's turn ended early: step_limit." in report
    assert "- `pytest -q` -> exit code 1" in report
    assert "- `make` -> not run (refused)" in report
    assert "Open problems: tests fail" in report and "```diff\n+x\n```" in report
    assert (
        "SECRET_OUTPUT" not in report and "FILE_SECRET" not in report and "read_file" not in report
    )

"""The flow of a Slipstream run: plan, steps (worker, report, review), final review.

A step's worker is an ordinary agent in its own session, created for the step's first attempt
(after a snapshot of the workspace is saved, to diff against) and continued with the
orchestrator's feedback for a revision. An attempt interrupted by a crash or a cancel is
continued by the same worker when the run is resumed; one whose report was already stored goes
straight to the review.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

from agent.api import Agent, AgentSpec
from agent.context import load_prompt
from agent.events import UsageUpdated
from agent.slipstream_events import (
    FinalReview,
    PlanReady,
    ReviewVerdict,
    RunFinished,
    SlipstreamEvent,
    StepReported,
    StepStarted,
    WorkerEvent,
)
from agent.slipstream_protocol import PlanStep, parse_final, parse_plan, parse_review
from agent.slipstream_session import Answer, RunBase, RunCancelled, RunStopped
from agent.slipstream_worker import (
    UsageMeter,
    WorkLog,
    build_report,
    revision_prompt,
    worker_prompt,
)
from agent.slipstream_workspace import Snapshot, compare, repository_summary
from openjet import paths

MAX_REVISIONS = 2  # per step; a further "revise" is taken as accepted (noted in the session)
MAX_REPLANS = 2
CONTINUE_PROMPT = "Continue this step where you stopped; when done, answer with the concise report."


class SlipstreamRun(RunBase):
    """One Slipstream task bound to its session; iterate `run()` to drive it."""

    # --- the run -----------------------------------------------------------------------------
    async def _drive(self) -> AsyncGenerator[SlipstreamEvent, None]:
        st = self.state
        if st.finished:
            yield RunFinished(self.id, st.finished["reason"], str(st.finished["message"]))
            return
        if not st.plan:
            async for event in self._plan():
                yield event
        else:
            yield PlanReady(self.id, tuple(st.plan), st.next_index)
        while True:
            while st.next_index < len(st.plan):
                async for event in self._step(st.next_index):
                    yield event
            if st.final:  # reviewed before the last process stopped: only the ending is missing
                yield self._finish(st.final["verdict"], st.final["summary"])
                return
            if st.local_only:
                yield self._finish(
                    "local_only", f"finished without the orchestrator: {st.local_reason}"
                )
                return
            async for event in self._final_review():
                yield event
            if st.finished:
                return

    async def _plan(self) -> AsyncGenerator[SlipstreamEvent, None]:
        st = self.state
        if not st.local_only:
            text = load_prompt(
                "slipstream_plan", task=st.task, summary=repository_summary(self.workdir)
            )
            async for item in self._consult("plan", -1, text, parse_plan):
                if isinstance(item, Answer):
                    if item.value:
                        self._record(
                            "slipstream_plan", {"steps": [s.as_json() for s in item.value]}
                        )
                else:
                    yield item
        if not st.plan:  # the cloud failed: one local step does the whole task
            whole = PlanStep("the whole task", st.task, ("the task is done",))
            self._record("slipstream_plan", {"steps": [whole.as_json()], "local": True})
        yield PlanReady(self.id, tuple(st.plan), 0)

    async def _step(self, index: int) -> AsyncGenerator[SlipstreamEvent, None]:
        st = self.state
        pending = st.pending_attempt()
        report = pending.report if pending else None
        if report is None:
            async for item in self._work(index):
                if isinstance(item, Answer):
                    report = item.value
                else:
                    yield item
        assert report is not None
        review = None
        if not st.local_only:
            text = load_prompt("slipstream_review", report=report)
            async for item in self._consult("review", index, text, parse_review):
                if isinstance(item, Answer):
                    review = item.value
                else:
                    yield item
        verdict, feedback = (review.verdict, review.feedback) if review else ("local", "")
        if verdict == "revise" and st.revisions >= MAX_REVISIONS:
            verdict, feedback = "accept", f"(revision limit reached) {feedback}"
        if verdict == "replan" and st.replans >= MAX_REPLANS:
            verdict, feedback = "accept", f"(re-plan limit reached) {feedback}"
        self._record(
            "slipstream_review", {"index": index, "verdict": verdict, "feedback": feedback}
        )
        yield ReviewVerdict(self.id, index, verdict, feedback)
        if verdict == "replan" and review is not None:
            steps = [s.as_json() for s in (*st.plan[: index + 1], *review.steps)]
            self._record("slipstream_plan", {"steps": steps, "replan": True})
            yield PlanReady(self.id, tuple(st.plan), index + 1)
        if verdict != "revise":
            self.manager.close(st.worker_ids.get(index, ""))

    def _snapshot_path(self, index: int) -> Path:
        return paths.data_dir() / "slipstream" / self.id / f"step-{index + 1}.json"

    def _open_worker(self, index: int) -> tuple[Agent, int, str]:
        """The worker agent for this step, its attempt number, and what to send it."""
        st = self.state
        pending = st.pending_attempt()
        if pending:  # an interrupted attempt: the same worker continues it
            agent = self.manager.resume(pending.worker_id)
            stored = self.store.messages(agent.id)
            if not stored or stored[-1][0] <= pending.seq_before:
                return agent, pending.attempt, pending.prompt  # its turn never began
            last = stored[-1][1]
            if (
                last.get("role") == "assistant"
                and not last.get("tool_calls")
                and not last.get("cancelled")
            ):
                return agent, pending.attempt, ""  # it had answered: only the report is missing
            return agent, pending.attempt, "" if agent.can_continue else CONTINUE_PROMPT
        if st.attempt and st.attempt.index == index:  # a revision: the same worker, with feedback
            agent = self.manager.resume(st.attempt.worker_id)
            attempt, text = st.attempt.attempt + 1, revision_prompt(st.feedback)
        else:
            Snapshot.take(self.workdir).save(self._snapshot_path(index))
            s = self.settings
            spec = AgentSpec(
                workdir=self.workdir,
                approval=s.get("approval"),
                profile=s.get("worker_profile"),
                endpoint=s.get("worker_endpoint"),
                model=s.get("worker_model"),
                title=f"Slipstream step {index + 1}: {st.plan[index].title}"[:60],
            )
            agent = self.manager.create(spec)
            attempt, text = 1, worker_prompt(st.task, st.plan[index], index, len(st.plan))
        stored = self.store.messages(agent.id)
        started = {"index": index, "attempt": attempt, "worker_id": agent.id, "prompt": text,
                   "seq_before": stored[-1][0] if stored else 0}  # fmt: skip
        self._record("slipstream_step_started", started)
        return agent, attempt, text

    async def _work(self, index: int) -> AsyncGenerator[SlipstreamEvent | Answer, None]:
        agent, attempt, text = self._open_worker(index)
        self.worker = agent
        step = self.state.plan[index]
        yield StepStarted(self.id, index, step.title, attempt, agent.id)
        record = self.store.get(agent.id)
        meter = UsageMeter(record.prompt_tokens, record.completion_tokens)
        log = WorkLog()
        if self._cancelled:  # cancelled while the consumer handled StepStarted
            raise RunCancelled()
        if text or agent.can_continue:
            async for event in agent.run_turn(text):
                log.note(event)
                yield WorkerEvent(self.id, index, event)
                if isinstance(event, UsageUpdated):
                    yield self._count(f"step {index + 1}", "local", *meter.delta(event))
        else:
            log.reason, log.answer = (
                "answer",
                str(self.store.messages(agent.id)[-1][1]["content"] or ""),
            )
        if self._cancelled:
            raise RunCancelled()
        if log.reason == "error":  # the local model failed: nothing to review; resume retries
            raise RunStopped(f"the local worker of step {index + 1} failed: {log.answer}")
        path = self._snapshot_path(index)
        before = Snapshot.load(path) if path.is_file() else Snapshot()
        report = build_report(
            step, index, attempt, log, compare(before, Snapshot.take(self.workdir))
        )
        self._record("slipstream_report", {"index": index, "attempt": attempt, "report": report})
        yield StepReported(self.id, index, attempt, report)
        yield Answer(report)

    async def _final_review(self) -> AsyncGenerator[SlipstreamEvent, None]:
        st = self.state
        steps = "\n".join(f"{i + 1}. {s.title}" for i, s in enumerate(st.plan))
        first = self._snapshot_path(0)
        before = Snapshot.load(first) if first.is_file() else Snapshot()
        stat = compare(before, Snapshot.take(self.workdir)).stat
        text = load_prompt("slipstream_final", steps=steps, stat=stat)
        final = None
        async for item in self._consult("final", len(st.plan), text, parse_final):
            if isinstance(item, Answer):
                final = item.value
            else:
                yield item
        if final is None:
            return  # now local only: the caller finishes the run
        self._record("slipstream_final", {"verdict": final.verdict, "summary": final.summary})
        yield FinalReview(self.id, final.verdict, final.summary)
        if final.verdict == "incomplete" and final.steps and st.replans < MAX_REPLANS:
            start = len(st.plan)
            steps_json = [s.as_json() for s in (*st.plan, *final.steps)]
            self._record("slipstream_plan", {"steps": steps_json, "replan": True})
            yield PlanReady(self.id, tuple(st.plan), start)
            return
        yield self._finish(final.verdict, final.summary)

"""How a pane shows a Slipstream run: the plan with each step's progress, step headers, the
report exactly as the orchestrator receives it (folded), review verdicts, the final review,
the orchestrator's token share, and a plain line saying where data goes to the cloud.

The worker's own activity (answers, tool calls, approvals, usage) is shown by the pane's usual
handlers: `tui.messages.from_slipstream_event` turns a `WorkerEvent` into those messages.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Collapsible, Static

from agent.slipstream_events import (
    AccountingUpdated,
    CloudActivity,
    CloudFailed,
    FinalReview,
    PlanReady,
    ReviewVerdict,
    RunFinished,
    SlipstreamEvent,
    StepReported,
    StepStarted,
)
from agent.slipstream_protocol import PlanStep
from tui.widgets.status_line import StatusLine
from tui.widgets.transcript import Transcript

STEP_MARKS = {
    "todo": ("·", "dim"),
    "running": ("▶", "bold cyan"),
    "revise": ("↻", "bold yellow"),
    "accept": ("✓", "bold green"),
    "local": ("✓", "green"),  # accepted without review: the cloud was unavailable
    "replan": ("✗", "yellow"),
}
VERDICT_NOTICES = {
    "accept": ("accepted", "info"),
    "revise": ("asks for a revision", "warning"),
    "replan": ("re-plans the rest", "warning"),
    "local": ("not reviewed (the orchestrator is unavailable); taken as done", "warning"),
}
RUN_END_NOTICES = {
    "done": ("Slipstream run finished", "info"),
    "incomplete": ("Slipstream run finished incomplete", "warning"),
    "local_only": ("Slipstream run finished by the local model alone", "warning"),
    "cancelled": ("Slipstream run stopped — Enter continues it", "warning"),
    "error": ("Slipstream run stopped — Enter retries this step", "error"),
}


def share_text(share: float) -> str:
    """As `agent.slipstream_events.share_label` writes it: "Orchestrator 14%"."""
    return f"Orchestrator {round(share * 100)}%"


class PlanView(Static):
    """The orchestrator's plan, one line per step with its state."""

    def __init__(self, steps: tuple[PlanStep, ...], first_step: int) -> None:
        super().__init__(classes="slipstream-plan")
        self.steps = steps
        self.first_step = first_step
        self.states = ["accept" if i < first_step else "todo" for i in range(len(steps))]
        self.attempts = [1] * len(steps)

    def on_mount(self) -> None:
        self.update(self.render_plan())

    def mark(self, index: int, state: str, attempt: int | None = None) -> None:
        if 0 <= index < len(self.states):
            self.states[index] = state
            if attempt is not None:
                self.attempts[index] = attempt
            self.update(self.render_plan())

    def render_plan(self) -> Text:
        heading = "Plan" if self.first_step == 0 else f"Plan (from step {self.first_step + 1})"
        text = Text(f"{heading} — {len(self.steps)} steps from the orchestrator", style="bold")
        for index, (step, state) in enumerate(zip(self.steps, self.states, strict=True)):
            mark, style = STEP_MARKS.get(state, ("·", ""))
            text.append(f"\n {mark} ", style)
            text.append(f"{index + 1}. {step.title}")
            if self.attempts[index] > 1:
                text.append(f"  (attempt {self.attempts[index]})", "dim")
        return text


class CloudLine(Static):
    """Shown from the moment a pane is in Slipstream mode: what goes to the cloud, and where;
    while a request is in flight it says so in a strong colour."""

    host: reactive[str] = reactive("")
    sending: reactive[bool] = reactive(False)

    def watch_host(self, host: str) -> None:
        self.display = bool(host)

    def render(self) -> Text:
        if self.sending:
            return Text(f"⇡ SENDING to the cloud: {self.host}", style="bold black on yellow")
        return Text(
            f"☁ Slipstream: task, plan, step reports and diffs go to {self.host}", style="yellow"
        )


class SlipstreamLog:
    """Applies one pane's Slipstream events to its transcript, status line and cloud line."""

    def __init__(self, transcript: Transcript, status: StatusLine, cloud: CloudLine) -> None:
        self.transcript = transcript
        self.status = status
        self.cloud = cloud
        self.plan: PlanView | None = None

    async def apply(self, event: SlipstreamEvent) -> None:
        transcript = self.transcript
        match event:
            case PlanReady(steps=steps, first_step=first):
                self.plan = PlanView(steps, first)
                await transcript.add_block(self.plan)
            case StepStarted(index=index, title=title, attempt=attempt):
                total = len(self.plan.steps) if self.plan else index + 1
                if self.plan:
                    self.plan.mark(index, "running", attempt)
                self.status.plan_step = f"{index + 1}/{total}"
                again = (
                    f" — attempt {attempt}, with the orchestrator's feedback" if attempt > 1 else ""
                )
                await transcript.add_block(
                    Static(
                        Text(f"▶ Step {index + 1}/{total}: {title}{again}"), classes="step-header"
                    )
                )
            case StepReported(index=index, attempt=attempt, report=report):
                body = Static(Text(report), classes="report-text")
                title = f"report sent to the orchestrator (step {index + 1}, attempt {attempt})"
                await transcript.add_block(Collapsible(body, title=title, classes="report"))
            case ReviewVerdict(index=index, verdict=verdict, feedback=feedback):
                if self.plan:
                    self.plan.mark(index, verdict)
                what, kind = VERDICT_NOTICES.get(verdict, (verdict, "info"))
                line = f"orchestrator: step {index + 1} {what}"
                await transcript.add_notice(f"{line} — {feedback}" if feedback else line, kind)
            case FinalReview(verdict=verdict, summary=summary):
                kind = "info" if verdict == "done" else "warning"
                await transcript.add_notice(f"final review: {verdict} — {summary}", kind)
            case AccountingUpdated(share=share):
                self.status.orchestrator = share_text(share)
            case CloudActivity(active=active):
                self.cloud.sending = active
            case CloudFailed(message=message):
                await transcript.add_notice(f"the orchestrator failed: {message}", "error")
            case RunFinished(reason=reason, message=message):
                self.cloud.sending = False
                text, kind = RUN_END_NOTICES.get(reason, (f"Slipstream run: {reason}", "info"))
                detail = message if reason in ("error", "local_only") else ""
                await transcript.add_notice(f"{text}: {detail}" if detail else text, kind)

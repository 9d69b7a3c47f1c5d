"""One line under an agent's input: what it is doing, its step, tok/s, context and approval mode;
for a Slipstream pane the plan step instead of the model step, and the orchestrator's share."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from tui.formatting import format_count, format_rate

ACTIVITY_STYLE = {
    "idle": "dim",
    "thinking": "bold cyan",
    "answering": "bold cyan",
    "running tool": "bold yellow",
    "waiting for approval": "bold magenta",
    "error": "bold red",
    "planning": "bold cyan",
    "orchestrator": "bold black on yellow",  # a request to the cloud is in flight
}


class StatusLine(Static):
    """Re-renders whenever one of its reactive fields changes."""

    activity: reactive[str] = reactive("idle")
    step: reactive[int] = reactive(0)
    tokens_per_second: reactive[float] = reactive(0.0)
    context_used: reactive[int] = reactive(0)
    context_limit: reactive[int] = reactive(0)
    approval_mode: reactive[str] = reactive("ask")
    detail: reactive[str] = reactive("")
    plan_step: reactive[str] = reactive("")  # Slipstream: "2/3", the step of the plan
    orchestrator: reactive[str] = reactive("")  # Slipstream: "Orchestrator 14%"

    def render(self) -> Text:
        line = Text()
        line.append(f"● {self.activity}", ACTIVITY_STYLE.get(self.activity, "bold"))
        if self.detail:
            line.append(f" {self.detail}", "dim")
        if self.plan_step:
            line.append(f"  plan {self.plan_step}")
        if self.orchestrator:  # early in the line: panes are narrow, the share must show
            line.append(f"  {self.orchestrator}", "bold yellow")
        if not self.plan_step:
            line.append(f"  step {self.step}" if self.step else "  step –")
        line.append(f"  {format_rate(self.tokens_per_second)}")
        limit = format_count(self.context_limit) if self.context_limit else "?"
        line.append(f"  ctx {format_count(self.context_used)}/{limit}")
        line.append(
            f"  approve: {self.approval_mode}", "bold" if self.approval_mode == "all" else ""
        )
        return line

"""One Slipstream step on the local side: a worker agent's turn, and its concise report.

The worker is an ordinary agent (full tool set, the person's approvals) in its own session.
While it works, its events are collected only into what the report needs: the commands it ran
and their exit status, the tokens it used, and its final answer. The report is the only thing
of the worker's that reaches the orchestrator: its answer (bounded), the change stat and diff
computed from a snapshot of the workspace taken when the step began, the commands and their
outcome — never tool outputs or the contents of files the worker read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.context import load_prompt
from agent.events import AgentEvent, ToolCallFinished, ToolCallStarted, TurnFinished, UsageUpdated
from agent.slipstream_protocol import PlanStep
from agent.slipstream_workspace import ChangeSet

MAX_ANSWER_CHARS = 3000
MAX_COMMANDS = 25
MAX_COMMAND_CHARS = 200


@dataclass
class UsageMeter:
    """Per-call token deltas from a worker's cumulative `UsageUpdated` events."""

    prompt_seen: int = 0
    completion_seen: int = 0

    def delta(self, event: UsageUpdated) -> tuple[int, int]:
        sent = max(0, event.prompt_tokens - self.prompt_seen)
        received = max(0, event.completion_tokens - self.completion_seen)
        self.prompt_seen, self.completion_seen = event.prompt_tokens, event.completion_tokens
        if not sent:  # a server without `usage`: the window's estimate of what was sent
            sent = max(0, event.context_used - received)
        return sent, received


@dataclass
class WorkLog:
    """What a worker turn did, as far as the report is concerned."""

    commands: dict[str, list[str]] = field(default_factory=dict)  # call id -> [command, outcome]
    answer: str = ""
    reason: str = ""

    def note(self, event: AgentEvent) -> None:
        if isinstance(event, ToolCallStarted) and event.name == "run_shell":
            command = " ".join(str(event.arguments.get("command", "")).split())
            self.commands[event.call_id] = [command[:MAX_COMMAND_CHARS], "not run"]
        elif isinstance(event, ToolCallFinished) and event.call_id in self.commands:
            self.commands[event.call_id][1] = _outcome(event)
        elif isinstance(event, TurnFinished):
            self.reason, self.answer = event.reason, event.message


def _outcome(event: ToolCallFinished) -> str:
    """The command's exit status only: its output is the worker's business, not the cloud's."""
    first = event.output.split("\n", 1)[0].strip()
    if first.startswith("exit code "):
        return first
    if "timed out" in first:
        return "timed out"
    if "denied" in first.lower() or "refused" in first.lower():
        return "not run (refused)"
    return "failed" if not event.ok else "ok"


def worker_prompt(task: str, step: PlanStep, index: int, n_steps: int) -> str:
    checks = "\n".join(f"- {check}" for check in step.acceptance)
    return load_prompt(
        "slipstream_worker",
        task=task,
        number=str(index + 1),
        n_steps=str(n_steps),
        title=step.title,
        instructions=step.instructions,
        checks=checks,
    )


def revision_prompt(feedback: str) -> str:
    return load_prompt("slipstream_revise", feedback=feedback)


def _bounded(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


def build_report(step: PlanStep, index: int, attempt: int, log: WorkLog, changes: ChangeSet) -> str:
    """The concise report the orchestrator reviews."""
    lines = [f'Report for step {index + 1} "{step.title}" (attempt {attempt}).']
    if log.reason and log.reason != "answer":
        lines.append(f"The worker's turn ended early: {log.reason}.")
    lines += ["", "Worker's summary:", _bounded(log.answer, MAX_ANSWER_CHARS) or "(none)", ""]
    lines += ["Changes (diff stat):", changes.stat, ""]
    commands = list(log.commands.values())
    lines.append(
        "Commands run (this attempt):" if commands else "Commands run (this attempt): none"
    )
    lines += [f"- `{command}` -> {outcome}" for command, outcome in commands[:MAX_COMMANDS]]
    if len(commands) > MAX_COMMANDS:
        lines.append(f"- ... and {len(commands) - MAX_COMMANDS} more")
    if changes.diff:
        lines += ["", "Diff:", "```diff", changes.diff.rstrip("\n"), "```"]
    return "\n".join(lines)

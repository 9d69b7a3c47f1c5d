"""`openjet run` (one agent, headless) and `openjet sessions list|show|delete`.

`openjet run` prints the agent's answer as it streams and one line per tool call, or with
`--json` one JSON object per line per event: `session` (first, with the session id), `message`,
`reasoning`, `tool_call`, `approval`, `tool_result`, `usage`, `error`, and `done` (last, with the
session id and why the turn ended). Exit status: 0 when the agent answered, 3 when it hit the
step limit, 130 when cancelled (Ctrl-C), 1 on an error, 2 for bad input. In `ask` mode it needs
a terminal to answer approvals and refuses without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import typer

from agent.api import Agent, AgentManager, AgentSpec
from agent.events import (
    AgentError,
    AgentEvent,
    ApprovalChoice,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    AssistantDelta,
    ReasoningDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    UsageUpdated,
)
from agent.profiles import ProfileError
from agent.sessions import SessionNotFound, SessionStore
from agent.slipstream_events import Accounting, is_slipstream_session, share_label
from openjet.config import ConfigError

EXIT_CODES = {"answer": 0, "step_limit": 3, "cancelled": 130, "error": 1}
sessions_app = typer.Typer(help="List, show and delete saved agent sessions.", no_args_is_help=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


class Printer:
    """Writes events for a person (streamed text) or a program (JSON lines)."""

    def __init__(self, as_json: bool, session_id: str) -> None:
        self.as_json = as_json
        self.session_id = session_id
        self.buffers = {"message": "", "reasoning": ""}

    def emit(self, kind: str, **data: Any) -> None:
        if self.as_json:
            self.flush()
            sys.stdout.write(
                json.dumps({"type": kind, "session_id": self.session_id, **data}) + "\n"
            )
            sys.stdout.flush()

    def flush(self) -> None:
        for kind, text in self.buffers.items():
            if text:
                self.buffers[kind] = ""
                sys.stdout.write(
                    json.dumps({"type": kind, "session_id": self.session_id, "text": text}) + "\n"
                )
        sys.stdout.flush()

    def show(self, event: AgentEvent) -> None:
        if isinstance(event, AssistantDelta | ReasoningDelta):
            kind = "message" if isinstance(event, AssistantDelta) else "reasoning"
            if self.as_json:
                self.buffers[kind] += event.text
            elif kind == "message":
                typer.echo(event.text, nl=False)
        elif self.as_json:
            self._json(event)
        else:
            self._text(event)

    def _json(self, event: AgentEvent) -> None:
        if isinstance(event, ToolCallStarted):
            self.emit(
                "tool_call", call_id=event.call_id, name=event.name, arguments=event.arguments
            )
        elif isinstance(event, ToolCallFinished):
            self.emit(
                "tool_result",
                call_id=event.call_id,
                name=event.name,
                ok=event.ok,
                output=event.output,
                diff=event.diff,
            )
        elif isinstance(event, UsageUpdated):
            self.emit("usage", prompt_tokens=event.prompt_tokens, completion_tokens=event.completion_tokens,
                      tokens_per_second=round(event.tokens_per_second, 2), context_used=event.context_used,
                      context_limit=event.context_limit)  # fmt: skip
        elif isinstance(event, AgentError):
            self.emit("error", message=event.message)
        elif isinstance(event, TurnFinished):
            self.emit("done", reason=event.reason, message=event.message)

    def _text(self, event: AgentEvent) -> None:
        if isinstance(event, ToolCallStarted):
            typer.secho(
                f"\n→ {event.name} {json.dumps(event.arguments)[:200]}", fg="cyan", err=True
            )
        elif isinstance(event, ToolCallFinished):
            first = event.output.strip().splitlines()[0] if event.output.strip() else ""
            typer.secho(
                f"  {'ok' if event.ok else 'failed'}: {first[:200]}",
                fg="green" if event.ok else "red",
                err=True,
            )
        elif isinstance(event, AgentError):
            typer.secho(f"error: {event.message}", fg="red", err=True)
        elif isinstance(event, TurnFinished):
            typer.echo("")
            if event.reason != "answer":
                typer.secho(f"[{event.reason}] {event.message}", fg="yellow", err=True)
            typer.secho(f"session {self.session_id}", dim=True, err=True)


async def _ask_person(request: ApprovalRequest) -> ApprovalDecision:
    """Ask on the terminal; only a person typing can answer."""
    typer.secho(f"\n{request.summary}", bold=True, err=True)
    if request.diff:
        typer.echo(request.diff, err=True)
    options = "[y] once  [n] deny"
    if request.command:
        options += (
            f"  [a] allow `{request.suggested_prefix}` for this agent  [p] ... for this project"
        )
    answer = (await asyncio.to_thread(_read_line, f"Approve? {options}: ")).strip().lower()
    choices = {"y": ApprovalChoice.APPROVE_ONCE, "yes": ApprovalChoice.APPROVE_ONCE}
    if request.command:
        choices |= {
            "a": ApprovalChoice.ALLOW_PREFIX_AGENT,
            "p": ApprovalChoice.ALLOW_PREFIX_PROJECT,
        }
    choice = choices.get(answer, ApprovalChoice.DENY)
    reason = ""
    if choice is ApprovalChoice.DENY:
        reason = (await asyncio.to_thread(_read_line, "Reason for the agent (optional): ")).strip()
    return ApprovalDecision(choice, reason)


def _read_line(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline()


async def _drive(agent: Agent, task: str, printer: Printer) -> str:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGINT, agent.cancel)
    reason = "error"
    async for event in agent.run_turn(task):
        printer.show(event)
        if isinstance(event, ApprovalRequested):
            printer.emit("approval", id=event.request.id, tool=event.request.tool, summary=event.request.summary,
                         command=event.request.command, path=event.request.path)  # fmt: skip
            agent.resolve_approval(event.request.id, await _ask_person(event.request))
        elif isinstance(event, TurnFinished):
            reason = event.reason
    printer.flush()
    return reason


def _open_agent(manager: AgentManager, task: str, resume: str | None, spec: AgentSpec) -> Agent:
    if resume:
        agent = manager.resume(resume)
        if spec.approval:
            agent.set_approval_mode(spec.approval)
        if not task.strip() and not agent.can_continue:
            raise ValueError(f"session {resume} has no interrupted turn to continue; give a TASK")
        return agent
    if not task.strip():
        raise ValueError("give a TASK (or --resume ID to continue a session)")
    return manager.create(spec)


async def _run(task: str, resume: str | None, spec: AgentSpec, as_json: bool) -> int:
    manager = AgentManager()
    try:
        agent = _open_agent(manager, task, resume, spec)
        if agent.approval_mode == "ask" and not sys.stdin.isatty():
            raise ValueError(
                "approval mode 'ask' needs a terminal to answer approvals and stdin is not one; "
                "use --approve never, auto-edits or all"
            )
        printer = Printer(as_json, agent.id)
        printer.emit(
            "session",
            workdir=str(agent.workdir),
            endpoint=agent.endpoint,
            approval=agent.approval_mode,
        )
        return EXIT_CODES[await _drive(agent, task, printer)]
    finally:
        await manager.aclose()


def run(
    task: str = typer.Argument(
        "", help="What the agent should do (empty with --resume: continue)."
    ),
    workdir: str = typer.Option(".", "--workdir", "-C", help="The workspace the agent works in."),
    endpoint: str | None = typer.Option(
        None, help="OpenAI-compatible base URL (overrides the profile)."
    ),
    model: str | None = typer.Option(None, help="Model name sent to the endpoint."),
    profile: str | None = typer.Option(None, help="Model profile from the config."),
    approve: str | None = typer.Option(None, "--approve", help="never | ask | auto-edits | all"),
    resume: str | None = typer.Option(None, help="Continue the session with this id."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line per event."),
) -> None:
    """Run one agent headless on TASK."""
    spec = AgentSpec(
        workdir=Path(workdir), approval=approve, profile=profile, endpoint=endpoint, model=model
    )
    try:
        code = asyncio.run(_run(task, resume, spec, as_json))
    except (ConfigError, ProfileError, ValueError, SessionNotFound) as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(code)


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


@sessions_app.command("list")
def list_sessions(
    query: str | None = typer.Argument(
        None, help="Only sessions whose title, folder or id contains this."
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Saved sessions, most recent first."""
    records = SessionStore().sessions(query)
    if as_json:
        typer.echo(json.dumps([r.__dict__ for r in records], indent=2))
        return
    if not records:
        typer.echo("no sessions")
    for r in records:
        tokens = r.prompt_tokens + r.completion_tokens
        typer.echo(
            f"{r.id}  {_when(r.updated)}  {r.status:<11} {tokens:>8} tok  {r.title or '(untitled)'}  [{r.workdir}]"
        )


@sessions_app.command("show")
def show_session(session_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """A session's details and conversation."""
    store = SessionStore()
    try:
        record = store.get(session_id)
    except SessionNotFound as exc:
        raise _fail(str(exc)) from None
    messages = [m for _, m in store.messages(session_id)]
    events = store.events(session_id)
    slipstream = Accounting.from_events(events) if is_slipstream_session(events) else None
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "session": record.__dict__,
                    "messages": messages,
                    "events": events,
                    "slipstream": slipstream.as_json() if slipstream else None,
                },
                indent=2,
            )
        )
        return
    typer.echo(
        f"{record.id}  {record.title or '(untitled)'}\n{record.workdir}  {record.endpoint}  {record.model}"
    )
    typer.echo(
        f"status {record.status}, approval {record.approval}, {record.prompt_tokens}+{record.completion_tokens} tokens\n"
    )
    if slipstream:
        typer.echo(
            f"Slipstream: {share_label(slipstream)} ({slipstream.orchestrator_tokens} orchestrator, {slipstream.local_tokens} local tokens)"
        )
        typer.echo("".join(f"  {line}\n" for line in slipstream.lines()))
    for message in messages:
        text = str(message.get("content") or "")
        calls = ", ".join(c["function"]["name"] for c in message.get("tool_calls") or [])
        typer.echo(f"[{message['role']}] {text[:500]}" + (f" (calls: {calls})" if calls else ""))


@sessions_app.command("delete")
def delete_session(session_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """Delete a session and its messages."""
    try:
        SessionStore().delete(session_id)
    except SessionNotFound as exc:
        raise _fail(str(exc)) from None
    typer.echo(json.dumps({"deleted": session_id}) if as_json else f"deleted {session_id}")


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.add_typer(sessions_app, name="sessions")

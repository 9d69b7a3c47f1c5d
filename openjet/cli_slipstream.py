"""`openjet slipstream TASK`: a headless Slipstream run (a cloud orchestrator plans and reviews,
local worker agents implement), printed as it goes or as JSON lines.

Text mode prints the plan, each step's start, the worker's tool calls (one line each), the
verdicts, a plain "sending to <endpoint>" line whenever data goes to the orchestrator, and the
orchestrator's token share at the end. `--json` prints one object per line: `session`, `plan`,
`step`, `tool_call`, `approval`, `report`, `review`, `final`, `accounting`, `cloud`,
`cloud_failed`, `done`. Exit status: 0 done, 3 incomplete, 4 finished by the local model alone
(the cloud failed), 130 cancelled (resume with --resume ID), 1 error, 2 bad input.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import Any

import typer

from agent.api import AgentManager
from agent.events import ApprovalRequested, ToolCallStarted
from agent.profiles import ProfileError
from agent.sessions import SessionNotFound
from agent.slipstream import Slipstream, SlipstreamRun, SlipstreamSpec
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
    WorkerEvent,
    share_label,
)
from openjet.cli_agent import _ask_person
from openjet.cli_login import login
from openjet.config import ConfigError

EXIT_CODES = {"done": 0, "incomplete": 3, "local_only": 4, "cancelled": 130, "error": 1}


def _emit(as_json: bool, run_id: str, kind: str, text: str, **data: Any) -> None:
    if as_json:
        sys.stdout.write(json.dumps({"type": kind, "session_id": run_id, **data}) + "\n")
        sys.stdout.flush()
    elif text:
        typer.echo(text)


def _show(event: SlipstreamEvent, as_json: bool) -> None:
    rid = event.run_id
    if isinstance(event, PlanReady):
        steps = [s.as_json() for s in event.steps]
        text = "\n".join(f"  {i + 1}. {s.title}" for i, s in enumerate(event.steps))
        _emit(as_json, rid, "plan", f"Plan:\n{text}", steps=steps, first_step=event.first_step)
    elif isinstance(event, StepStarted):
        text = f"\n== step {event.index + 1}: {event.title} (attempt {event.attempt})"
        _emit(as_json, rid, "step", text, index=event.index, attempt=event.attempt,
              title=event.title, worker_id=event.worker_id)  # fmt: skip
    elif isinstance(event, WorkerEvent) and isinstance(event.event, ToolCallStarted):
        call = event.event
        text = f"  → {call.name} {json.dumps(call.arguments)[:160]}"
        _emit(as_json, rid, "tool_call", text, index=event.index, name=call.name)
    elif isinstance(event, StepReported):
        _emit(as_json, rid, "report", "", index=event.index, report=event.report)
    elif isinstance(event, ReviewVerdict):
        text = f"  review: {event.verdict}" + (f" — {event.feedback}" if event.feedback else "")
        _emit(as_json, rid, "review", text, index=event.index, verdict=event.verdict,
              feedback=event.feedback)  # fmt: skip
    elif isinstance(event, FinalReview):
        text = f"\nFinal review: {event.verdict}\n{event.summary}"
        _emit(as_json, rid, "final", text, verdict=event.verdict, summary=event.summary)
    elif isinstance(event, AccountingUpdated):
        _emit(as_json, rid, "accounting", "", orchestrator_tokens=event.orchestrator_tokens,
              local_tokens=event.local_tokens, share=round(event.share, 4))  # fmt: skip
    elif isinstance(event, CloudActivity):
        text = f"  (sending to {event.endpoint} ...)" if event.active else ""
        _emit(as_json, rid, "cloud", text, active=event.active, endpoint=event.endpoint)
    elif isinstance(event, CloudFailed):
        _emit(as_json, rid, "cloud_failed", f"! {event.message}", message=event.message)


async def _drive(run: SlipstreamRun, as_json: bool) -> str:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGINT, run.cancel)
    reason = "error"
    async for event in run.run():
        _show(event, as_json)
        if isinstance(event, WorkerEvent) and isinstance(event.event, ApprovalRequested):
            request = event.event.request
            _emit(as_json, run.id, "approval", "", id=request.id, summary=request.summary)
            run.resolve_approval(request.id, await _ask_person(request))
        elif isinstance(event, RunFinished):
            reason = event.reason
            text = f"\n[{event.reason}] {event.message}\n{share_label(run.accounting)}"
            _emit(as_json, run.id, "done", text, reason=event.reason, message=event.message,
                  accounting=run.accounting.as_json())  # fmt: skip
    return reason


async def _run(
    task: str, resume: str | None, retry_cloud: bool, spec: SlipstreamSpec, as_json: bool
) -> int:
    manager = AgentManager()
    run: SlipstreamRun | None = None
    try:
        slipstream = Slipstream(manager)
        approval = spec.approval or str(manager.config.get("agent.approval"))
        if resume:
            run = slipstream.resume(resume, retry_cloud)
            approval = str(run.settings.get("approval"))
        if approval == "ask" and not sys.stdin.isatty():
            raise ValueError(
                "approval mode 'ask' needs a terminal to answer approvals and stdin is not one; "
                "use --approve never, auto-edits or all"
            )
        run = run or slipstream.start(spec)
        _emit(as_json, run.id, "session", f"slipstream session {run.id} → {run.orchestrator_endpoint}",
              orchestrator=run.orchestrator_endpoint, workdir=str(run.workdir))  # fmt: skip
        return EXIT_CODES[await _drive(run, as_json)]
    finally:
        if run is not None:
            await run.aclose()
        await manager.aclose()


def slipstream(
    task: str = typer.Argument("", help="What to do (empty with --resume)."),
    workdir: str = typer.Option(".", "--workdir", "-C", help="The workspace."),
    orchestrator: str | None = typer.Option(
        None, help="Orchestrator profile (default: slipstream.profile, i.e. openrouter)."
    ),
    orchestrator_endpoint: str | None = typer.Option(
        None, help="Any OpenAI-compatible orchestrator URL (overrides the profile's)."
    ),
    orchestrator_model: str | None = typer.Option(
        None, help="Orchestrator model (default: slipstream.model)."
    ),
    endpoint: str | None = typer.Option(None, help="The local worker model's URL."),
    approve: str | None = typer.Option(None, "--approve", help="never | ask | auto-edits | all"),
    resume: str | None = typer.Option(None, help="Continue the Slipstream session with this id."),
    retry_cloud: bool = typer.Option(
        False, help="With --resume after a cloud failure: use the orchestrator again."
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line per event."),
) -> None:
    """Run TASK with a cloud orchestrator planning and reviewing and local workers implementing."""
    if not resume and not task.strip():
        typer.echo("error: give a TASK (or --resume ID)", err=True)
        raise typer.Exit(2)
    spec = SlipstreamSpec(
        Path(workdir),
        task,
        orchestrator_profile=orchestrator,
        orchestrator_endpoint=orchestrator_endpoint,
        orchestrator_model=orchestrator_model,
        worker_endpoint=endpoint,
        approval=approve,
    )
    try:
        code = asyncio.run(_run(task, resume, retry_cloud, spec, as_json))
    except (ConfigError, ProfileError, ValueError, SessionNotFound) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("slipstream")(slipstream)
    app.command("login")(login)

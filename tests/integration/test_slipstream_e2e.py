"""Slipstream end to end: a scripted orchestrator and a scripted worker model, both real HTTP
servers on loopback, run a two-step task with one revision and a final review; then a run is
cancelled mid-plan and resumed at the step it stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agent.api import AgentManager
from agent.events import ApprovalChoice, ApprovalDecision, ApprovalRequested
from agent.slipstream import Slipstream, SlipstreamRun, SlipstreamSpec
from agent.slipstream_events import (
    CloudActivity,
    PlanReady,
    ReviewVerdict,
    RunFinished,
    SlipstreamEvent,
    StepReported,
    StepStarted,
    WorkerEvent,
)
from openjet.cli import app
from tests.support.scripted_server import ScriptedServer

SECRET_READ = "WORKER_ONLY_SECRET_4711"  # in a file the worker reads: must stay local
COMMAND_OUTPUT = "CMD_OUTPUT_42"  # printed by a command the worker runs: must stay local
TASK = "Add a greeting module with a test."
GREET = 'def greet(name):\n    return "Hi " + name\n\n\nif __name__ == "__main__":\n    print(greet("you"))\n'


def orchestrator_reply(value: dict[str, Any]) -> dict[str, Any]:
    return {"content": json.dumps(value)}


PLAN = {
    "steps": [
        {
            "title": "Greeting module",
            "instructions": "Create greet.py with greet(name).",
            "acceptance": ["python3 greet.py prints a greeting"],
        },
        {
            "title": "Test",
            "instructions": "Add test_greet.py.",
            "acceptance": ["the test covers greet"],
        },
    ]
}


def make_project(root: Path) -> Path:
    project = root / "project"
    (project / "data").mkdir(parents=True)
    (project / "README.md").write_text("# Demo\nA tiny demo project.\n")
    (project / "data" / "notes.txt").write_text(f"private notes: {SECRET_READ}\n")
    return project


def worker_script() -> list[dict[str, Any]]:
    step1, step2 = "Step 1 of 2", "Step 2 of 2"
    return [
        {"match": step1, "tool_calls": [{"name": "read_file", "arguments": {"path": "data/notes.txt"}}]},
        {"match": step1, "tool_calls": [{"name": "write_file", "arguments": {"path": "greet.py", "content": GREET}}]},
        {"match": step1, "tool_calls": [{"name": "run_shell", "arguments": {"command": "python3 greet.py && echo CMD_OUTPUT_$((6*7))"}}]},
        {"match": step1, "content": "Created greet.py; python3 greet.py exits 0.\nOpen problems: none"},
        {"match": step1, "expect": {"last_role": "user", "last_contains": "module docstring"},
         "tool_calls": [{"name": "edit_file", "arguments": {"path": "greet.py", "old_string": "def greet", "new_string": '"""Greetings."""\n\n\ndef greet'}}]},
        {"match": step1, "content": "Added the docstring.\nOpen problems: none"},
        {"match": step2, "tool_calls": [{"name": "write_file", "arguments": {"path": "test_greet.py", "content": "from greet import greet\n\n\ndef test_greet():\n    assert greet('a') == 'Hi a'\n"}}]},
        {"match": step2, "content": "Added test_greet.py.\nOpen problems: none"},
    ]  # fmt: skip


async def drive(
    run: SlipstreamRun, stop_at: tuple[int, int] | None = None
) -> list[SlipstreamEvent]:
    """Run to the end, approving every worker request; `stop_at` (step, attempt) cancels there."""
    events: list[SlipstreamEvent] = []
    async for event in run.run():
        events.append(event)
        if isinstance(event, WorkerEvent) and isinstance(event.event, ApprovalRequested):
            run.resolve_approval(
                event.event.request.id, ApprovalDecision(ApprovalChoice.APPROVE_ONCE)
            )
        if isinstance(event, StepStarted) and (event.index, event.attempt) == stop_at:
            run.cancel()
    return events


def scripted_run(
    manager: AgentManager,
    project: Path,
    task: str,
    cloud: ScriptedServer,
    worker: ScriptedServer,
    approval: str = "all",
) -> SlipstreamRun:
    """A run whose orchestrator and worker models are the two scripted servers."""
    spec = SlipstreamSpec(
        project,
        task,
        orchestrator_endpoint=cloud.url,
        orchestrator_model="m",
        worker_endpoint=worker.url,
        approval=approval,
    )
    return Slipstream(manager).start(spec)


def all_text(requests: list[dict[str, Any]]) -> str:
    return json.dumps(requests)


async def test_plan_two_steps_one_revision_and_final_review(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    cloud_script = [
        orchestrator_reply(PLAN),
        orchestrator_reply(
            {"verdict": "revise", "feedback": "Add a module docstring to greet.py."}
        ),
        orchestrator_reply({"verdict": "accept", "feedback": "good"}),
        orchestrator_reply({"verdict": "accept"}),
        orchestrator_reply({"verdict": "done", "summary": "Greeting module and test added."}),
    ]
    with (
        ScriptedServer(cloud_script, tmp_path / "cloud") as cloud,
        ScriptedServer(worker_script(), tmp_path / "worker") as worker,
    ):
        manager = AgentManager()
        spec = SlipstreamSpec(project, TASK, orchestrator_endpoint=cloud.url,
                              orchestrator_model="planner", worker_endpoint=worker.url, approval="ask")  # fmt: skip
        run = Slipstream(manager).start(spec)
        events = await drive(run)
        await run.aclose()
        await manager.aclose()
        cloud_requests, worker_requests = cloud.requests(), worker.requests()
        assert cloud.problems() == [] and worker.problems() == []

    finished = [e for e in events if isinstance(e, RunFinished)]
    assert [(f.reason, f.message) for f in finished] == [
        ("done", "Greeting module and test added.")
    ]
    verdicts = [(e.index, e.verdict) for e in events if isinstance(e, ReviewVerdict)]
    assert verdicts == [(0, "revise"), (0, "accept"), (1, "accept")]
    started = [(e.index, e.attempt) for e in events if isinstance(e, StepStarted)]
    assert started == [(0, 1), (0, 2), (1, 1)]
    assert len([e for e in events if isinstance(e, PlanReady)]) == 1
    activity = [e.active for e in events if isinstance(e, CloudActivity)]
    assert activity == [True, False] * 5  # shown around each of the 5 orchestrator calls
    assert (project / "greet.py").read_text().startswith('"""Greetings."""')

    # Handoffs: the plan request has the task and the summary; reviews get the reports.
    assert len(cloud_requests) == 5
    assert all(r["model"] == "planner" and r["stream"] is False for r in cloud_requests)
    first = cloud_requests[0]["messages"]
    assert first[0]["role"] == "system" and TASK in first[1]["content"]
    assert "README.md" in first[1]["content"] and "A tiny demo project." in first[1]["content"]
    report_1 = cloud_requests[1]["messages"][-1]["content"]
    assert 'Report for step 1 "Greeting module" (attempt 1)' in report_1
    assert "greet.py (new) | +6 -0" in report_1
    assert "`python3 greet.py && echo CMD_OUTPUT_$((6*7))` -> exit code 0" in report_1
    assert "Open problems: none" in report_1 and "+def greet(name):" in report_1
    report_2 = cloud_requests[2]["messages"][-1]["content"]
    assert "(attempt 2)" in report_2 and '+"""Greetings."""' in report_2
    earlier = cloud_requests[2]["messages"][3]["content"]  # attempt 1's report, sent again
    assert "(attempt 1)" in earlier and "Diff: [omitted here" in earlier
    assert "+def greet" not in earlier and "greet.py (new) | +6 -0" in earlier
    assert "test_greet.py (new)" in cloud_requests[3]["messages"][-1]["content"]
    assert "Every step of the plan was accepted" in cloud_requests[4]["messages"][-1]["content"]
    reported = [e.report for e in events if isinstance(e, StepReported)]
    assert report_1.startswith(reported[0] + "\n\n")  # the consumer sees what the cloud got

    # No worker transcript reaches the orchestrator: not the file it read, not command output.
    worker_saw = all_text(worker_requests)
    assert SECRET_READ in worker_saw and COMMAND_OUTPUT in worker_saw  # they were there to leak
    assert SECRET_READ not in all_text(cloud_requests)
    assert COMMAND_OUTPUT not in all_text(cloud_requests)
    # The revision's feedback reached the same worker, which kept its context.
    revision = [r for r in worker_requests if "module docstring" in json.dumps(r["messages"])]
    assert revision and SECRET_READ in json.dumps(revision[0]["messages"])

    # Accounting: the scripted orchestrator reports usage 10+10 per call; local = worker sessions.
    store = AgentManager().store
    accounting = run.accounting
    assert accounting.orchestrator_tokens == 5 * 20
    worker_ids = {e.worker_id for e in events if isinstance(e, StepStarted)}
    assert len(worker_ids) == 2
    local = sum(store.get(w).prompt_tokens + store.get(w).completion_tokens for w in worker_ids)
    assert local > 0 and accounting.local_tokens == local
    assert accounting.share() == 100 / (100 + local)
    assert accounting.side_total("orchestrator", "step 1") == 40
    assert accounting.side_total("orchestrator", "plan") == 20
    assert (
        accounting.side_total("local", "step 1") + accounting.side_total("local", "step 2") == local
    )

    # The session holds every exchange; `openjet sessions show` prints the share.
    messages = [m for _, m in store.messages(run.id)]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 5
    shown = CliRunner().invoke(app, ["sessions", "show", run.id])
    assert shown.exit_code == 0, shown.output
    assert f"Orchestrator {round(100 * 100 / (100 + local))}%" in shown.output
    as_json = json.loads(CliRunner().invoke(app, ["sessions", "show", run.id, "--json"]).output)
    assert as_json["slipstream"]["orchestrator_tokens"] == 100
    assert store.get(run.id).status == "done"
    store.close()


async def test_cancelled_run_resumes_at_the_step_it_stopped(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    cloud_script = [
        orchestrator_reply(PLAN),
        orchestrator_reply({"verdict": "accept"}),
        orchestrator_reply({"verdict": "accept"}),
        orchestrator_reply({"verdict": "done", "summary": "all done"}),
    ]
    script = [e for e in worker_script() if "expect" not in e]  # no revision this time
    script = [e for e in script if e.get("content") != "Added the docstring.\nOpen problems: none"]
    with (
        ScriptedServer(cloud_script, tmp_path / "cloud") as cloud,
        ScriptedServer(script, tmp_path / "worker") as worker,
    ):
        manager = AgentManager()
        spec = SlipstreamSpec(project, TASK, orchestrator_endpoint=cloud.url,
                              worker_endpoint=worker.url, approval="all")  # fmt: skip
        run = Slipstream(manager).start(spec)
        events = await drive(run, stop_at=(1, 1))
        assert isinstance(events[-1], RunFinished) and events[-1].reason == "cancelled"
        assert len(cloud.requests()) == 2  # plan + review of step 1
        await run.aclose()
        await manager.aclose()

        manager = AgentManager()  # as a new process would
        resumed = Slipstream(manager).resume(run.id)
        assert resumed.steps[0].title == "Greeting module"
        events = await drive(resumed)
        await resumed.aclose()
        await manager.aclose()
        requests = cloud.requests()
        assert cloud.problems() == [] and worker.problems() == []

    assert isinstance(events[-1], RunFinished) and events[-1].reason == "done"
    plan = next(e for e in events if isinstance(e, PlanReady))
    assert plan.first_step == 1  # resumed at step 2, step 1 not redone
    assert [(e.index, e.attempt) for e in events if isinstance(e, StepStarted)] == [(1, 1)]
    assert len(requests) == 4
    assert "Report for step 2" in requests[2]["messages"][-1]["content"]
    assert [m["role"] for m in requests[3]["messages"]] == ["system"] + [
        "user",
        "assistant",
    ] * 3 + ["user"]
    assert (project / "test_greet.py").is_file()

"""Resuming a Slipstream session from the picker: it opens through Slipstream (not as a plain
agent) with its plan, verdicts and accounting, and Enter continues the stopped run to its end
against the scripted orchestrator and worker (real HTTP on loopback)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console
from textual.widgets import Static

from agent.api import AgentManager
from agent.slipstream import Slipstream, SlipstreamSpec
from agent.slipstream_events import Accounting, StepStarted, share_label
from tests.tui.conftest import (
    first_pane,
    make_app,
    pane_text,
    panes,
    send_text,
    type_text,
    wait_until,
)
from tests.tui.test_slipstream_run import use_orchestrator
from tui.screens.resume import ResumeScreen
from tui.widgets.slipstream_log import PlanView

PLAN = {
    "steps": [
        {"title": "First file", "instructions": "Write a.txt.", "acceptance": ["a.txt exists"]},
        {"title": "Second file", "instructions": "Write b.txt.", "acceptance": ["b.txt exists"]},
    ]
}


def write(path: str) -> list[dict[str, object]]:
    return [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": "x\n"}}]},
        {"content": f"Wrote {path}.\nOpen problems: none"},
    ]


def rendered(widget: Static) -> str:
    console = Console(width=140, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


async def stopped_run(project: Path, worker_url: str) -> str:
    """A run that planned, finished step 1 and was cancelled as step 2 began."""
    manager = AgentManager()
    spec = SlipstreamSpec(project, "write two files", worker_endpoint=worker_url, approval="all")
    run = Slipstream(manager).start(spec)
    async for event in run.run():
        if isinstance(event, StepStarted) and event.index == 1:
            run.cancel()
    await run.aclose()
    await manager.aclose()
    return run.id


async def test_resume_a_stopped_run_and_continue_it(scripted, project: Path) -> None:
    cloud = scripted(
        [
            {"content": json.dumps(PLAN)},
            {"content": '{"verdict": "accept", "feedback": "a.txt is fine"}'},
        ]
    )
    worker = scripted(write("a.txt"))
    use_orchestrator(cloud.url)
    run_id = await stopped_run(project, worker.url)
    store = AgentManager().store
    before = Accounting.from_events(store.events(run_id))
    store.close()
    assert before.orchestrator_tokens == 40 and not (project / "b.txt").exists()
    cloud.add(
        [
            {"content": '{"verdict": "accept"}'},
            {"content": '{"verdict": "done", "summary": "both files written"}'},
        ]
    )
    worker.add(write("b.txt"))

    app = make_app(worker.url, project)
    async with app.run_test(size=(150, 44)) as pilot:
        await wait_until(pilot, lambda: len(panes(app)) == 1, "the pane")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, ResumeScreen), "the picker")
        picker = app.screen
        assert isinstance(picker, ResumeScreen)
        await type_text(pilot, "two files")
        await wait_until(pilot, lambda: len(picker.shown) == 1, "the search")
        preview = rendered(picker.query_one("#preview", Static))
        assert share_label(before) in preview and "40 orchestrator" in preview
        await pilot.press("enter")
        await wait_until(pilot, lambda: panes(app) and panes(app)[0].agent_id == run_id, "resume")
        pane = panes(app)[0]
        assert pane.slipstream is not None and pane.mode == "slipstream"
        await wait_until(pilot, lambda: "press Enter to continue" in pane_text(pane), "history")
        text = pane_text(pane)
        assert "write two files" in text and "step 1 accepted — a.txt is fine" in text
        plan = pane.query_one(PlanView)
        assert plan.states == ["accept", "running"]
        assert pane.orchestrator_share == share_label(before)
        assert pane.cloud.display  # the resumed pane is in Slipstream mode: data goes out

        await send_text(pilot, "")  # an empty Enter continues the stopped run
        await wait_until(pilot, lambda: "final review: done" in pane_text(pane), "the end", 30)
        await wait_until(pilot, lambda: not pane.busy, "the run to stop")
        assert (project / "b.txt").read_text() == "x\n"
        store = AgentManager().store
        after = Accounting.from_events(store.events(run_id))
        assert store.get(run_id).status == "done"
        store.close()
        assert after.orchestrator_tokens == 80
        assert pane.orchestrator_share == share_label(after)
    assert cloud.problems() == [] and worker.problems() == []


async def test_esc_during_a_worker_approval_then_enter_continues(scripted, project: Path) -> None:
    one_step = {"steps": PLAN["steps"][:1]}
    cloud = scripted(
        [
            {"content": json.dumps(one_step)},
            {"content": '{"verdict": "accept"}'},
            {"content": '{"verdict": "done", "summary": "a.txt written"}'},
        ]
    )
    shell = {"name": "run_shell", "arguments": {"command": "echo x > a.txt"}}
    worker = scripted([{"tool_calls": [shell]}, {"tool_calls": [shell]}, write("a.txt")[1]])
    use_orchestrator(cloud.url)
    app = make_app(worker.url, project)
    async with app.run_test(size=(150, 44)) as pilot:
        pane = await first_pane(pilot)
        await send_text(pilot, "/mode slipstream")
        await send_text(pilot, "write a.txt")
        await wait_until(pilot, lambda: pane.pending, "the worker's approval")
        await pilot.press("escape")  # from the input box: stops the run
        await wait_until(pilot, lambda: not pane.busy, "the run to stop")
        assert not pane.pending  # nothing waits for an answer any more
        assert "Slipstream run stopped — Enter continues it" in pane_text(pane)
        assert pane.slipstream is not None and pane.slipstream.can_continue

        await send_text(pilot, "")
        await wait_until(pilot, lambda: pane.pending, "the approval, asked again")
        pane.pending[0].focus()
        await pilot.press("a")
        await wait_until(pilot, lambda: "final review: done" in pane_text(pane), "the end", 30)
        assert (project / "a.txt").read_text() == "x\n"
    assert cloud.problems() == [] and worker.problems() == []

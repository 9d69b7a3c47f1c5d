"""Slipstream in a pane, against a scripted orchestrator and a scripted worker model (both real
HTTP servers on loopback): `/mode slipstream`, a task whose worker asks for one approval, the
plan and verdicts in the transcript, "Orchestrator N%" and the cloud indicator in the bar above
the footer; and the refusals that send nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.api import AgentManager
from agent.slipstream_events import Accounting, share_label
from openjet.config import update_values
from tests.support.memory_keyring import MemoryKeyring
from tests.tui.conftest import (
    first_pane,
    make_app,
    pane_text,
    send_text,
    wait_until,
)
from tui.widgets.approval_prompt import ApprovalPrompt
from tui.widgets.slipstream_bar import SlipstreamBar
from tui.widgets.status_line import StatusLine

SECRET = "CMD_OUT_42"  # printed by the worker's command: must never reach the orchestrator
PLAN = {
    "steps": [
        {
            "title": "Write out.txt",
            "instructions": "Run the command that writes out.txt.",
            "acceptance": ["out.txt exists"],
        }
    ]
}
WORKER = [
    {"tool_calls": [{"name": "run_shell", "arguments": {"command": "echo written > out.txt && echo CMD_OUT_$((6*7))"}}]},
    {"content": "Wrote out.txt.\nOpen problems: none", "expect": {"last_role": "tool"}},
]  # fmt: skip


def use_orchestrator(url: str, profile: str = "cloud") -> None:
    update_values(
        {
            f"profiles.{profile}.endpoint": url,
            f"profiles.{profile}.model": "planner",
            "slipstream.profile": profile,
        }
    )


def bar_text(app: Any) -> str:
    bar = app.screen.query_one(SlipstreamBar)
    return str(bar.render()) if bar.display else ""


async def test_a_slipstream_task_with_one_worker_approval(scripted, project: Path) -> None:
    cloud = scripted(
        [
            {"content": json.dumps(PLAN)},
            # Slow enough to see the indicator while the report is with the orchestrator.
            {"content": '{"verdict": "accept", "feedback": "good"}', "first_byte_delay": 1.5},
            {"content": '{"verdict": "done", "summary": "out.txt is written"}'},
        ]
    )
    worker = scripted(WORKER)
    use_orchestrator(cloud.url)
    host = cloud.url.split("//")[1].split("/")[0]
    app = make_app(worker.url, project)
    async with app.run_test(size=(150, 44)) as pilot:
        pane = await first_pane(pilot)
        assert bar_text(app) == "" and not pane.cloud.display
        await send_text(pilot, "/mode slipstream")
        await wait_until(pilot, lambda: pane.mode == "slipstream", "slipstream mode")
        # From the moment the mode is on, the pane and the bar say where data will go.
        assert pane.cloud.display and host in str(pane.cloud.render())
        await wait_until(pilot, lambda: f"Slipstream → {host}" in bar_text(app), "the bar")
        assert cloud.requests() == []  # nothing sent before a task

        await send_text(pilot, "write out.txt")
        await wait_until(pilot, lambda: pane.pending, "the worker's approval prompt")
        prompt = pane.query_one(ApprovalPrompt)
        assert "echo CMD_OUT_" in (prompt.request.command or "")
        text = pane_text(pane)
        assert "Write out.txt" in text and "Step 1/1: Write out.txt" in text
        assert pane.query_one(StatusLine).orchestrator.startswith("Orchestrator ")
        prompt.focus()
        await wait_until(pilot, lambda: app.focused is prompt, "focus on the prompt")
        await pilot.press("a")
        await wait_until(pilot, lambda: "SENDING" in bar_text(app), "the cloud indicator")
        assert f"SENDING to {host}" in bar_text(app)
        assert pane.cloud.sending and "SENDING" in str(pane.cloud.render())
        await wait_until(pilot, lambda: not pane.busy, "the run to end", timeout=30)

        text = pane_text(pane)
        assert "✓ run_shell" in text
        assert "orchestrator: step 1 accepted — good" in text
        assert "final review: done — out.txt is written" in text
        assert (project / "out.txt").read_text() == "written\n"
        assert not pane.cloud.sending
        # The bar follows once the workspace has seen the pane's last events.
        await wait_until(pilot, lambda: "SENDING" not in bar_text(app), "the bar to calm down")
        run_id = pane.agent_id
        store = AgentManager().store
        expected = share_label(Accounting.from_events(store.events(run_id)))
        store.close()
        assert expected != "Orchestrator 100%"  # the worker's tokens were counted too
        assert pane.orchestrator_share == expected
        await wait_until(pilot, lambda: expected in bar_text(app), "the share in the bar")

        # Back to normal: the next task goes to a plain agent on the local model only.
        worker.add([{"content": "Plain answer."}])
        await send_text(pilot, "/mode normal")
        await wait_until(pilot, lambda: bar_text(app) == "", "the bar to go")
        assert not pane.cloud.display
        await send_text(pilot, "just answer")
        await wait_until(pilot, lambda: "Plain answer." in pane_text(pane), "the plain answer")
        assert pane.slipstream is None and pane.agent_id != run_id
    assert cloud.problems() == [] and worker.problems() == []
    assert len(cloud.requests()) == 3
    assert SECRET in json.dumps(worker.requests())  # the worker saw the command's output
    assert SECRET not in json.dumps(cloud.requests())  # the orchestrator never did


async def test_missing_key_and_airgapped_refuse_the_mode(
    scripted, project: Path, memory_keyring: MemoryKeyring
) -> None:
    worker = scripted([])  # the keyring is empty: no key for the cloud profile
    use_orchestrator("https://cloud.invalid/v1")
    app = make_app(worker.url, project)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await first_pane(pilot)
        await send_text(pilot, "/mode slipstream")
        await wait_until(pilot, lambda: "not available" in pane_text(pane), "the refusal")
        assert "openjet login cloud" in pane_text(pane)
        assert pane.mode == "normal" and not pane.cloud.display and bar_text(app) == ""

    update_values({"airgapped": True})
    app = make_app(worker.url, project)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await first_pane(pilot)
        await send_text(pilot, "/mode slipstream")
        await wait_until(pilot, lambda: "not available" in pane_text(pane), "the refusal")
        assert "airgapped" in pane_text(pane) and pane.mode == "normal"
    assert worker.requests() == []


async def test_quitting_during_a_cloud_call_leaves_the_run_resumable(
    scripted, project: Path
) -> None:
    cloud = scripted([{"content": json.dumps(PLAN), "first_byte_delay": 3}])
    worker = scripted([])
    use_orchestrator(cloud.url)
    app = make_app(worker.url, project)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await first_pane(pilot)
        await send_text(pilot, "/mode slipstream")
        await send_text(pilot, "write out.txt")
        await wait_until(pilot, lambda: pane.cloud.sending, "the plan request")
        run_id = pane.agent_id
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: not app.is_running, "the app to quit", timeout=10)
    store = AgentManager().store
    assert store.get(run_id).status == "idle"  # stopped, not finished: resume continues it
    assert [m["role"] for _, m in store.messages(run_id)] == ["user"]
    store.close()

"""Snapshot tests of the main screens (pytest-textual-snapshot): the workspace with two agents,
an approval with a coloured diff and the engine panel; the help; the resume picker; the
new-agent dialog; a pane in Slipstream mode. Scenes are built from fixed messages and readings so they never vary.
Update after an intended change: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from agent.events import ApprovalRequest
from agent.slipstream_events import (
    AccountingUpdated,
    CloudActivity,
    PlanReady,
    ReviewVerdict,
    StepReported,
    StepStarted,
)
from agent.slipstream_protocol import PlanStep
from openjet.config import update_values
from tests.tui.conftest import make_app, panes
from tui import messages as msg
from tui.engine_monitor import EngineReading, EngineStats, SlotStats
from tui.screens.workspace import WorkspaceScreen
from tui.widgets.engine_panel import EnginePanel

SIZE = (150, 44)
NOWHERE = "http://127.0.0.1:9/v1"  # never contacted: no turn runs in these scenes
DIFF = """--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""
ANSWER = """The test fails because `add` subtracts. The fix:

```python
def add(a, b):
    return a + b
```
"""
STATS = EngineStats(
    kind="megakernel", model="Qwen3.8-27B-Q4_K_M.gguf", fallback_reason=None,
    vram_used_bytes=21 * 2**30, vram_total_bytes=24 * 2**30, kv_pool_tokens=131072,
    kv_pool_used=18500, tokens_per_second=96.0, queued=0,
    slots=(SlotStats(0, "decode", 51.0, 12345, 32768, 8000, 120, 96, "r1"),
           SlotStats(1, "decode", 45.0, 4100, 32768, 0, 80, 60, "r2")),
)  # fmt: skip


@pytest.fixture(autouse=True)
def fixed_clock_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


async def settle(pilot: Pilot[Any]) -> None:
    for _ in range(5):
        await pilot.pause(0.05)
    for box in pilot.app.screen.query(Input):  # a blinking cursor would make shots differ
        box.cursor_blink = False
    await pilot.pause()


def pressing(*keys: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await pilot.press(*keys)
        await settle(pilot)

    return run_before


async def two_agents(pilot: Pilot[Any], project: Path) -> None:
    app = pilot.app
    workspace = app.screen
    assert isinstance(workspace, WorkspaceScreen)
    other = project.parent / "webapp"
    other.mkdir(exist_ok=True)
    agent = workspace.open_agent(workspace.spec(other, "auto-edits"))
    assert agent is not None
    await workspace.add_agent(agent)
    first, second = panes(app)
    first.agent.rename("fix the failing test")
    second.agent.rename("add a dark mode")
    for pane in (first, second):
        pane.refresh_title()
    a, b = first.agent_id, second.agent_id
    for message in (
        msg.TokenDelta(a, "The test compares add(2, 2) with 4.", reasoning=True),
        msg.TokenDelta(a, ANSWER),
        msg.ToolCallStarted(a, "c1", "run_shell", {"command": "pytest -q tests/test_calc.py"}),
        msg.ToolCallFinished(a, "c1", "run_shell", False, "1 failed in 0.02s"),
        msg.ToolCallStarted(a, "c2", "edit_file", {"path": "calc.py"}),
        msg.ApprovalRequested(
            a, ApprovalRequest("q1", a, "edit_file", "edit calc.py", diff=DIFF, path="calc.py")
        ),
        msg.UsageChanged(a, 12000, 345, 51.0, 12345, 32768),
    ):
        first.post_message(message)
    for message in (
        msg.TokenDelta(b, "Reading the stylesheet first."),
        msg.ToolCallStarted(b, "d1", "read_file", {"path": "static/site.css"}),
        msg.ToolCallFinished(b, "d1", "read_file", True, "body { color: #222; }"),
        msg.UsageChanged(b, 4000, 100, 45.0, 4100, 32768),
    ):
        second.post_message(message)
    panel = workspace.query_one(EnginePanel)
    for rate in (20.0, 55.0, 80.0, 96.0, 90.0, 96.0):
        panel.show_reading(EngineReading(replace(STATS, tokens_per_second=rate)))
    await settle(pilot)
    second.focus_input()
    app.clear_notifications()  # toasts time out: a slow machine would see them or not
    await settle(pilot)


def test_workspace_with_approval_and_engine_panel(snap_compare, project: Path) -> None:
    app = make_app(NOWHERE, project)
    assert snap_compare(
        app, terminal_size=SIZE, run_before=lambda pilot: two_agents(pilot, project)
    )


def test_help_screen(snap_compare, project: Path) -> None:
    assert snap_compare(make_app(NOWHERE, project), terminal_size=SIZE, run_before=pressing("f1"))


def test_new_agent_dialog(snap_compare, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/")  # the dialog offers the current folder
    app = make_app(NOWHERE, project)
    assert snap_compare(app, terminal_size=SIZE, run_before=pressing("ctrl+n"))


async def saved_sessions(pilot: Pilot[Any]) -> None:
    workspace = pilot.app.screen
    assert isinstance(workspace, WorkspaceScreen)
    manager = workspace.manager
    await workspace.action_close_agent()  # the fresh agent (dated now) is blank: deleted
    when = time.mktime((2026, 3, 14, 9, 30, 0, 0, 0, -1))
    sessions = (("fix the failing test", "/srv/calc"), ("add a dark mode", "/srv/webapp"))
    for n, (title, folder) in enumerate(sessions):
        # The store stamps times itself; a fixed clock for these synchronous calls only.
        with patch.object(time, "time", return_value=when + n * 3600):
            record = manager.store.create(title=title, workdir=folder, endpoint=NOWHERE,
                                          model="qwen", profile="local", approval="ask")  # fmt: skip
            manager.store.add_tokens(record.id, 1200 * (n + 1), 300)
    await pilot.press("ctrl+r")
    await settle(pilot)


def test_resume_picker(snap_compare, project: Path) -> None:
    assert snap_compare(make_app(NOWHERE, project), terminal_size=SIZE, run_before=saved_sessions)


async def slipstream_pane(pilot: Pilot[Any]) -> None:
    """A pane in Slipstream mode: plan, a revision, a worker's approval, the share, the cloud."""
    (pane,) = panes(pilot.app)
    await pilot.press(*"/mode slipstream", "enter")
    await settle(pilot)
    pane.agent.rename("add a greeting module")
    pane.refresh_title()
    run, worker = pane.agent_id, "worker-1"
    steps = (
        PlanStep("Greeting module", "Create greet.py.", ("python3 greet.py prints Hi",)),
        PlanStep("Test", "Add test_greet.py.", ("pytest passes",)),
    )
    report = 'Report for step 1 "Greeting module" (attempt 1)\n\nChanged: greet.py (new) | +2 -0'
    for message in (
        msg.SlipstreamUpdate(run, AccountingUpdated(run, 20, 0, 1.0)),
        msg.SlipstreamUpdate(run, PlanReady(run, steps, 0)),
        msg.SlipstreamUpdate(run, StepStarted(run, 0, "Greeting module", 1, worker)),
        msg.ToolCallStarted(worker, "c1", "write_file", {"path": "greet.py"}),
        msg.ToolCallFinished(worker, "c1", "write_file", True, "wrote greet.py"),
        msg.TokenDelta(worker, "Created greet.py."),
        msg.SlipstreamUpdate(run, StepReported(run, 0, 1, report)),
        msg.SlipstreamUpdate(run, ReviewVerdict(run, 0, "revise", "Add a docstring.")),
        msg.SlipstreamUpdate(run, StepStarted(run, 0, "Greeting module", 2, worker)),
        msg.ToolCallStarted(worker, "c2", "edit_file", {"path": "greet.py"}),
        msg.ApprovalRequested(
            worker,
            ApprovalRequest(
                "q1", worker, "edit_file", "edit greet.py", diff=GREET_DIFF, path="greet.py"
            ),
        ),
        msg.UsageChanged(worker, 900, 60, 48.0, 960, 32768),
        msg.SlipstreamUpdate(run, AccountingUpdated(run, 40, 246, 40 / 286)),
        msg.SlipstreamUpdate(run, CloudActivity(run, True, "http://127.0.0.1:9/v1")),
    ):
        pane.post_message(message)
    await settle(pilot)
    pane.focus_input()
    pilot.app.clear_notifications()
    await settle(pilot)


GREET_DIFF = """--- a/greet.py
+++ b/greet.py
@@ -1,2 +1,4 @@
+\"\"\"Greetings.\"\"\"
+
 def greet(name):
     return "Hi " + name
"""


def test_slipstream_pane(snap_compare, project: Path) -> None:
    update_values({"profiles.cloud.endpoint": NOWHERE, "slipstream.profile": "cloud"})
    app = make_app(NOWHERE, project)
    assert snap_compare(app, terminal_size=SIZE, run_before=slipstream_pane)

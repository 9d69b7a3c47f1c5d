"""Pilot tests of the workspace against a real scripted model server: four agents streaming at
once in a 2x2 grid, and an approval that never blocks the other agents."""

from __future__ import annotations

from pathlib import Path

from textual.widgets._collapsible import CollapsibleTitle

from tests.tui.conftest import (
    focus_pane_input,
    make_app,
    open_new_agent_dialog,
    pane_text,
    panes,
    send_text,
    send_until_approval,
    wait_for_panes,
    wait_until,
)
from tui.screens.approvals import ApprovalsScreen
from tui.screens.workspace import WorkspaceScreen
from tui.widgets.agent_pane import AgentPane
from tui.widgets.approval_prompt import ApprovalPrompt
from tui.widgets.status_line import StatusLine
from tui.widgets.tool_call import ToolCallView


async def test_four_agents_stream_at_once_in_a_grid(scripted, project: Path) -> None:
    # Each answer streams, then the stream hangs: all four agents are provably busy at once,
    # whatever the speed of the machine; Esc in each pane then stops its turn.
    answers = [f"answer-{i} " + "lorem ipsum " * 6 for i in range(4)]
    server = scripted([{"content": text, "hang": True} for text in answers])
    app = make_app(server.url, project)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: len(panes(app)) == 1, "the first pane")
        for n in range(2, 5):
            await open_new_agent_dialog(pilot)
            await send_text(pilot, f"task {n}")
            await wait_for_panes(pilot, n)
        await focus_pane_input(pilot, panes(app)[0])
        await send_text(pilot, "task 1")

        def streamed(pane: AgentPane) -> list[int]:
            return [i for i in range(4) if answers[i].strip() in pane_text(pane)]

        await wait_until(pilot, lambda: all(streamed(p) for p in panes(app)), "four answers")
        assert all(p.busy for p in panes(app))
        assert all(p.query_one(StatusLine).activity == "answering" for p in panes(app))
        grid = app.screen.query_one("#grid")
        assert (grid.styles.grid_size_columns, grid.styles.grid_size_rows) == (2, 2)
        owners = [streamed(p) for p in panes(app)]
        assert sorted(i for owned in owners for i in owned) == [0, 1, 2, 3]  # no cross-talk
        for pane in panes(app):
            assert f"task {pane.number}" in pane_text(pane)
        tasks = sorted(r["messages"][-1]["content"] for r in server.requests())
        assert tasks == ["task 1", "task 2", "task 3", "task 4"]

        await pilot.press("ctrl+n")  # a fifth agent is refused with a notice
        await pilot.pause()
        assert isinstance(app.screen, WorkspaceScreen)

        for pane in panes(app):
            await focus_pane_input(pilot, pane)
            await pilot.press("escape")
        await wait_until(pilot, lambda: not any(p.busy for p in panes(app)), "all stopped")
        assert all("stopped" in pane_text(p) for p in panes(app))
        await wait_until(pilot, lambda: server.disconnects() == 4, "closed streams")


async def test_pending_approval_does_not_block_other_agents(scripted, project: Path) -> None:
    server = scripted(
        [
            {"content": "Checking.", "tool_calls": [{"name": "run_shell", "arguments": {"command": "echo approved-output"}}]},
            {"content": "agent two done"},
            {"content": "agent one done", "expect": {"last_role": "tool", "last_contains": "approved-output"}},
        ]
    )  # fmt: skip
    app = make_app(server.url, project)
    async with app.run_test(size=(180, 45)) as pilot:
        await wait_until(pilot, lambda: len(panes(app)) == 1, "the first pane")
        first = panes(app)[0]
        prompt = await send_until_approval(pilot, first, "run the echo")
        assert prompt.request.command == "echo approved-output"
        # The pane had focus, so its prompt takes it.
        await wait_until(pilot, lambda: app.focused is prompt, "focus on the prompt")
        assert first.query_one(StatusLine).activity == "waiting for approval"

        await open_new_agent_dialog(pilot)
        await send_text(pilot, "second task")
        await wait_until(pilot, lambda: len(panes(app)) == 2, "the second pane")
        second = panes(app)[1]
        await wait_until(pilot, lambda: "agent two done" in pane_text(second), "agent two")
        await wait_until(pilot, lambda: not second.busy, "agent two to finish")
        assert first.busy and first.pending  # still waiting, and it did not hold agent two up

        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalsScreen), "approvals list")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.focused, ApprovalPrompt), "prompt focus")
        await pilot.press("a")
        await wait_until(pilot, lambda: not first.busy, "agent one to finish")
        assert "agent one done" in pane_text(first)
        assert "✓ run_shell  echo approved-output" in pane_text(first)
        call = first.query_one(ToolCallView)
        assert call.collapsed  # compact by default; Enter on its title expands the output
        call.query_one(CollapsibleTitle).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert not call.collapsed and "approved-output" in str(call.body.content)
        assert not first.pending and not first.has_class("-needs-approval")
        assert server.problems() == []

"""Quit and resume: the picker finds a saved session by title, folder and date; the resumed
pane shows its history, and the next turn sends that history to the model."""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import DataTable, Input

from agent.api import AgentManager
from agent.sessions import SessionStore
from tests.tui.conftest import (
    focus_pane_input,
    make_app,
    pane_text,
    panes,
    send_text,
    wait_until,
)
from tui.screens.resume import ResumeScreen


async def test_quit_then_resume_continues_the_conversation(scripted, project: Path) -> None:
    server = scripted(
        [
            {"content": "Noted: **42**."},
            {
                "content": "It was 42.",
                "expect": {"last_role": "user", "last_contains": "which number"},
            },
        ]
    )
    app = make_app(server.url, project)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: len(panes(app)) == 1, "the pane")
        await send_text(pilot, "remember the number 42")
        await wait_until(pilot, lambda: "Noted" in pane_text(panes(app)[0]), "the answer")
        await wait_until(pilot, lambda: not panes(app)[0].busy, "the turn to end")
        await pilot.press("ctrl+q")
    assert app.return_code == 0
    manager = AgentManager()
    assert [s.title for s in manager.list_sessions()] == ["remember the number 42"]  # no blank
    await manager.aclose()

    app = make_app(server.url, project)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: len(panes(app)) == 1, "a fresh pane")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, ResumeScreen), "the picker")
        picker = app.screen
        table = picker.query_one(DataTable)
        assert table.row_count == 1  # the fresh (open) session is not offered
        search = picker.query_one("#search", Input)
        for query, rows in (
            ("remember", 1),
            ("project", 1),  # the folder
            (time.strftime("%Y-%m-%d"), 1),  # the date
            ("no such thing", 0),
        ):
            search.value = query
            await pilot.pause()
            assert table.row_count == rows, query
        search.value = "remember 42"
        await pilot.pause()
        await pilot.press("enter")
        # The resumed session takes the place of the untouched fresh agent.
        await wait_until(pilot, lambda: panes(app)[0].agent.title != "", "the resumed pane")
        assert len(panes(app)) == 1
        resumed = panes(app)[0]
        await wait_until(pilot, lambda: "Noted" in pane_text(resumed), "the history")
        assert "remember the number 42" in pane_text(resumed)
        assert "remember the number 42" in str(resumed.border_title)

        await focus_pane_input(pilot, resumed)
        await send_text(pilot, "which number was it?")
        await wait_until(pilot, lambda: "It was 42." in pane_text(resumed), "the new answer")
        last = server.requests()[-1]["messages"]
        contents = [str(m.get("content")) for m in last]
        assert "remember the number 42" in contents
        assert any("Noted: **42**." in c for c in contents)
        assert server.problems() == []


async def test_a_turn_cut_short_by_a_crash_continues_on_enter(scripted, project: Path) -> None:
    server = scripted(
        [
            {"content": "Working on it", "hang": True},
            {"content": "Finished after all.", "expect": {"last_role": "user", "last_contains": "write the report"}},
        ]
    )  # fmt: skip
    app = make_app(server.url, project)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: len(panes(app)) == 1, "the pane")
        session = panes(app)[0].agent_id
        await send_text(pilot, "write the report")
        await wait_until(pilot, lambda: "Working on it" in pane_text(panes(app)[0]), "streaming")
        await pilot.press("ctrl+q")
    # As if the process had died mid-turn: the store still says the turn is running.
    store = SessionStore()
    store.update(session, status="running")
    store.close()

    app = make_app(server.url, project, resume=session)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: len(panes(app)) == 1, "the resumed pane")
        pane = panes(app)[0]
        await wait_until(pilot, lambda: "press Enter to continue" in pane_text(pane), "notice")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "Finished after all." in pane_text(pane), "the answer")
        assert server.problems() == []

"""Keys of the workspace without a model: focus cycling, zoom, rename, close (the session
stays saved), and the engine panel toggle."""

from __future__ import annotations

from pathlib import Path

from textual.content import Content
from textual.widgets import Input

from tests.tui.conftest import make_app, open_new_agent_dialog, panes, wait_for_panes, wait_until
from tui.screens.rename import RenameScreen
from tui.widgets.engine_panel import EnginePanel

NOWHERE = "http://127.0.0.1:9/v1"


async def test_focus_zoom_rename_close(project: Path) -> None:
    app = make_app(NOWHERE, project)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for_panes(pilot, 1)
        for n in (2, 3):
            await open_new_agent_dialog(pilot)
            await pilot.press("enter")
            await wait_for_panes(pilot, n)
        first, second, third = panes(app)
        await wait_until(pilot, lambda: third.has_focus_within, "focus on the new pane")
        grid = app.screen.query_one("#grid")
        assert (grid.styles.grid_size_columns, grid.styles.grid_size_rows) == (2, 2)
        assert third.styles.column_span == 2  # the third pane fills the second row
        await wait_until(pilot, lambda: third.size.width > first.size.width, "a wide third pane")

        await pilot.press("f6")
        await wait_until(pilot, lambda: first.has_focus_within, "f6 to the first pane")
        await pilot.press("shift+f6")
        await wait_until(pilot, lambda: third.has_focus_within, "shift+f6 back to the third")

        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: not first.display and not second.display, "zoom")
        assert third.display
        await pilot.press("f6")  # cycling while zoomed shows the next pane
        await wait_until(pilot, lambda: first.display and first.has_focus_within, "next, zoomed")
        assert not third.display
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: all(p.display for p in panes(app)), "the grid again")

        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, RenameScreen), "rename")
        app.screen.query_one(Input).value = "release notes [draft]"
        await pilot.press("enter")
        await wait_until(pilot, lambda: first.agent.title == "release notes [draft]", "rename")
        shown = Content.from_markup(str(first.border_title)).plain  # the title is markup
        assert shown == "1 · release notes [draft] · project/"

        closed = first.agent_id
        await pilot.press("f8")
        await wait_for_panes(pilot, 2)
        assert closed not in app.manager.agents
        assert closed in {s.id for s in app.manager.list_sessions()}

        panel = app.screen.query_one(EnginePanel)
        await pilot.press("f4")
        await wait_until(pilot, lambda: not panel.display, "the panel hidden")
        await pilot.press("f4")
        await wait_until(pilot, lambda: panel.display, "the panel shown")

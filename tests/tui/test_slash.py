"""Slash commands typed in a pane: completion, /approve, /help, /new, /model, /mode, /compact,
/clear, /resume and /quit, and a clear error for a bad command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input

from openjet.config import update_values
from tests.tui.conftest import (
    first_pane,
    focus_pane_input,
    make_app,
    pane_text,
    panes,
    type_text,
    wait_until,
)
from tui.screens.help import HelpScreen
from tui.screens.new_agent import NewAgentScreen
from tui.screens.resume import ResumeScreen
from tui.screens.workspace import WorkspaceScreen
from tui.widgets.prompt_input import PromptInput
from tui.widgets.status_line import StatusLine


async def submit(pilot: Pilot[Any], text: str) -> None:
    """Put `text` in the focused input box and press Enter (typing it key by key is slow)."""
    await wait_until(pilot, lambda: isinstance(pilot.app.focused, Input), "an input box focus")
    box = pilot.app.focused
    assert isinstance(box, Input)
    box.value = text
    await pilot.press("enter")


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_slash_commands(scripted, project: Path, memory_keyring: object) -> None:
    # memory_keyring: an empty keyring, so the default cloud orchestrator has no key
    server = scripted([{"content": "Hello there."}, {"content": "Summary: greeted the user."}])
    update_values({"profiles.alt.endpoint": server.url, "profiles.alt.model": "alt-model"})
    app = make_app(server.url, project)
    async with app.run_test(size=(160, 45)) as pilot:
        pane = await first_pane(pilot)
        box = pane.query_one(PromptInput)

        await type_text(pilot, "/comp")
        await pilot.press("tab")
        assert box.value == "/compact"
        box.value = ""

        await type_text(pilot, "/approve al")
        await pilot.press("tab")
        assert box.value == "/approve all"
        await pilot.press("enter")
        await pilot.pause()
        assert pane.agent.approval_mode == "all"
        assert pane.query_one(StatusLine).approval_mode == "all"

        await submit(pilot, "/approve sometimes")
        await pilot.pause()
        assert pane.agent.approval_mode == "all"
        assert any("not one of never, ask, auto-edits, all" in n for n in notices(app))

        await submit(pilot, "/frobnicate")
        await pilot.pause()
        assert any("unknown command /frobnicate" in n for n in notices(app))

        await submit(pilot, "/help")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), "help closed")

        await submit(pilot, "/new write the docs")
        await wait_until(pilot, lambda: isinstance(app.screen, NewAgentScreen), "new agent")
        assert app.screen.query_one("#task", Input).value == "write the docs"
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, NewAgentScreen), "closed")
        assert len(panes(app)) == 1

        await submit(pilot, "/resume")
        await wait_until(pilot, lambda: isinstance(app.screen, ResumeScreen), "resume picker")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ResumeScreen), "closed")

        await focus_pane_input(pilot, pane)
        await submit(pilot, "/model")
        await pilot.pause()
        assert any(f"scripted-model at {server.url}" in n for n in notices(app))
        await submit(pilot, "/model cloud")
        await pilot.pause()
        assert any("No profile 'cloud'; profiles: alt, local" in n for n in notices(app))
        await submit(pilot, "/model alt")
        await wait_until(
            pilot, lambda: any("now use profile 'alt'" in n for n in notices(app)), "switched"
        )
        workspace = app.screen
        assert isinstance(workspace, WorkspaceScreen) and workspace.default_profile == "alt"
        assert pane.agent.model == "alt-model"

        await submit(pilot, "/mode slipstream")  # no key for the default cloud orchestrator
        await pilot.pause()
        assert "Slipstream is not available: no API key" in pane_text(pane)
        assert pane.mode == "normal"

        await submit(pilot, "hi")
        await wait_until(pilot, lambda: "Hello there." in pane_text(pane), "the answer")
        await wait_until(pilot, lambda: not pane.busy, "the turn to end")
        await submit(pilot, "/compact")
        await wait_until(pilot, lambda: "older turns condensed" in pane_text(pane), "compaction")
        assert len(server.requests()) == 2  # the summary came from the model

        await submit(pilot, "/clear")
        await wait_until(pilot, lambda: "conversation cleared" in pane_text(pane), "cleared")
        assert "Hello there." not in pane_text(pane)
        assert not any("Hello there." in str(m.get("content")) for m in pane.agent.history())

        await submit(pilot, "/quit")
        await wait_until(pilot, lambda: not app.is_running, "the app to quit", timeout=10)

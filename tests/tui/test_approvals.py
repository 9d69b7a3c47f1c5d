"""The approval prompt: deny with a reason, and 'always allow this prefix' for the agent."""

from __future__ import annotations

from pathlib import Path

from agent.api import AgentManager
from tests.tui.conftest import (
    first_pane,
    make_app,
    pane_text,
    send_text,
    send_until_approval,
    wait_until,
)


def shell(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "run_shell", "arguments": {"command": command}}]}


async def test_deny_with_reason_reaches_the_model(scripted, project: Path) -> None:
    server = scripted(
        [
            shell("rm -rf build"),
            {"content": "Fine, I will not.", "expect": {"last_role": "tool", "last_contains": "keep the build"}},
        ]
    )  # fmt: skip
    (project / "build").mkdir()
    app = make_app(server.url, project)
    async with app.run_test(size=(140, 40)) as pilot:
        pane = await first_pane(pilot)
        prompt = await send_until_approval(pilot, pane, "clean up")
        await wait_until(pilot, lambda: app.focused is prompt, "focus on the prompt")
        await pilot.press("d")
        await wait_until(pilot, lambda: prompt.has_class("-denying"), "the reason box")
        await pilot.press("escape")  # back from the reason: the turn is not stopped
        await wait_until(pilot, lambda: app.focused is prompt, "focus back on the prompt")
        assert not prompt.has_class("-denying") and pane.busy and pane.pending
        await pilot.press("d")
        await send_text(pilot, "keep the build")
        await wait_until(pilot, lambda: not pane.busy, "the turn to end")
        assert "denied: keep the build" in pane_text(pane)
        assert "Fine, I will not." in pane_text(pane)
        assert "✗ run_shell  rm -rf build" in pane_text(pane)
        assert (project / "build").is_dir()
        assert server.problems() == []


async def test_allow_prefix_for_the_agent_stops_asking(scripted, project: Path) -> None:
    server = scripted(
        [
            shell("git status"),
            {**shell("git status --short"), "expect": {"last_role": "tool"}},
            {"content": "Both ran.", "expect": {"last_role": "tool"}},
        ]
    )
    app = make_app(server.url, project)
    async with app.run_test(size=(140, 40)) as pilot:
        pane = await first_pane(pilot)
        prompt = await send_until_approval(pilot, pane, "status please")
        assert prompt.prefix == "git status"
        await wait_until(pilot, lambda: app.focused is prompt, "focus on the prompt")
        await pilot.press("p")
        await wait_until(pilot, lambda: not pane.busy, "the turn to end")
        assert "`git status` allowed for this agent" in pane_text(pane)
        assert "Both ran." in pane_text(pane)
        assert pane_text(pane).count("run_shell  git status") == 2  # the second never asked
        assert server.problems() == []


async def test_quit_while_an_approval_waits(scripted, project: Path) -> None:
    server = scripted([shell("make deploy")])
    app = make_app(server.url, project)
    async with app.run_test(size=(140, 40)) as pilot:
        pane = await first_pane(pilot)
        await send_until_approval(pilot, pane, "deploy it")
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: not app.is_running, "the app to quit", timeout=10)
    manager = AgentManager()
    [session] = manager.list_sessions()
    assert session.title == "deploy it"  # saved, and resumable
    await manager.aclose()

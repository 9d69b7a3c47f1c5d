"""Helpers for the TUI tests: apps wired to a real scripted model server, waiting, reading panes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input, Markdown, Static

from openjet.config import load_config
from tests.support.scripted_server import ScriptedServer
from tui.app import OpenJetApp
from tui.launcher import resolve_target
from tui.widgets.agent_pane import AgentPane
from tui.widgets.approval_prompt import ApprovalPrompt
from tui.widgets.prompt_input import PromptInput
from tui.widgets.tool_call import ToolCallView
from tui.widgets.transcript import Transcript


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The folder the agents work in."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("# demo\n")
    return folder


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Callable[[list[dict[str, Any]]], ScriptedServer]]:
    """Start scripted model servers (real processes on loopback); all stopped at the end."""
    servers: list[ScriptedServer] = []

    def start(script: list[dict[str, Any]]) -> ScriptedServer:
        server = ScriptedServer(script, tmp_path / f"server-{len(servers)}")
        servers.append(server.__enter__())
        return server

    yield start
    for server in servers:
        server.stop()


def make_app(endpoint: str, workdir: Path, **options: Any) -> OpenJetApp:
    config = load_config()
    target = resolve_target(config, endpoint, "scripted-model", None)
    return OpenJetApp(target, config, workdir=workdir, poll_engine=False, **options)


async def wait_until(
    pilot: Pilot[Any], predicate: Callable[[], object], what: str, timeout: float = 20.0
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def panes(app: App[Any]) -> list[AgentPane]:
    return list(app.screen.query(AgentPane))


async def wait_for_panes(pilot: Pilot[Any], count: int) -> None:
    await wait_until(pilot, lambda: len(panes(pilot.app)) == count, f"{count} panes")


async def open_new_agent_dialog(pilot: Pilot[Any]) -> None:
    """ctrl+n, then wait until the dialog's task box has the focus (keys go there)."""
    await pilot.press("ctrl+n")
    await wait_until(
        pilot, lambda: getattr(pilot.app.focused, "id", None) == "task", "the new-agent dialog"
    )


def pane_text(pane: AgentPane) -> str:
    """The transcript as plain text: messages, answers (Markdown source), tool-call titles."""
    parts = []
    for block in pane.query_one(Transcript).children:
        if isinstance(block, Markdown):
            parts.append(block.source)
        elif isinstance(block, ToolCallView):
            parts.append(str(block.title))
        elif isinstance(block, Static):
            parts.append(str(block.content))
        else:
            parts.append(block.__class__.__name__)
    return "\n".join(parts)


async def type_text(pilot: Pilot[Any], text: str) -> None:
    """Type into the focused input box (waiting first for an input box to have the focus)."""
    await wait_until(pilot, lambda: isinstance(pilot.app.focused, Input), "an input box focus")
    await pilot.press(*text)


async def send_text(pilot: Pilot[Any], text: str) -> None:
    """Type `text` into the focused input box and press Enter."""
    await type_text(pilot, text)
    await pilot.press("enter")


async def first_pane(pilot: Pilot[Any]) -> AgentPane:
    """Wait for the workspace's single pane and return it."""
    await wait_for_panes(pilot, 1)
    return panes(pilot.app)[0]


async def send_until_approval(pilot: Pilot[Any], pane: AgentPane, text: str) -> ApprovalPrompt:
    """Send `text` from the focused input box and wait for the pane's approval prompt."""
    await send_text(pilot, text)
    await wait_until(pilot, lambda: pane.pending, "the approval prompt")
    return pane.query_one(ApprovalPrompt)


async def focus_pane_input(pilot: Pilot[Any], pane: AgentPane) -> None:
    pane.focus_input()
    await wait_until(pilot, lambda: pane.query_one(PromptInput).has_focus, "the pane's input")

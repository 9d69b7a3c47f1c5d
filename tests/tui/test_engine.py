"""Engine start-up (progress, failure with the log's path, reuse) and the engine panel."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from textual.widgets import Label, Static

from openjet.config import update_values
from tests.tui.conftest import panes, wait_until
from tui.app import OpenJetApp
from tui.launcher import EngineProcess, resolve_target
from tui.screens.startup import StartupScreen
from tui.screens.workspace import WorkspaceScreen
from tui.widgets.engine_panel import EnginePanel

FAKE_ENGINE = str(Path(__file__).with_name("fake_engine.py"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def engine_app(port: int, command: list[str], workdir: Path, tmp_path: Path) -> OpenJetApp:
    config = update_values({"engine.kind": "reference", "engine.port": port})
    target = resolve_target(config, None, None, None)
    assert target.manage_engine
    engine = EngineProcess(command, tmp_path / "logs" / "engine.log")
    return OpenJetApp(target, config, engine=engine, workdir=workdir)


async def test_engine_starts_shows_stats_and_stops_on_quit(project: Path, tmp_path: Path) -> None:
    port = free_port()
    app = engine_app(port, [sys.executable, FAKE_ENGINE, str(port), "1.0"], project, tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, StartupScreen), "progress view")
        await wait_until(pilot, lambda: panes(app), "the workspace and its first agent")
        assert isinstance(app.screen, WorkspaceScreen)
        assert "loading weights" in (tmp_path / "logs" / "engine.log").read_text()
        panel = app.screen.query_one(EnginePanel)
        await wait_until(pilot, lambda: panel.reading and panel.reading.stats, "engine stats")
        assert panel.reading is not None and panel.reading.stats is not None
        stats = panel.reading.stats
        assert stats.kind == "llama-server"
        assert stats.draft_acceptance == 0.8
        assert panel.monitor.history[-1] == 57.5
        assert len(panes(app)) == 1
        engine = app.engine
        assert engine is not None and engine.exit_code() is None
        await pilot.press("ctrl+q")
    assert engine.exit_code() is not None  # what we started, we stopped


async def test_engine_failure_names_the_log(project: Path, tmp_path: Path) -> None:
    port = free_port()
    crash = "import sys; print('CUDA error: out of memory', flush=True); sys.exit(3)"
    app = engine_app(port, [sys.executable, "-c", crash], project, tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, StartupScreen), "progress view")
        screen = app.screen
        assert isinstance(screen, StartupScreen)
        await wait_until(pilot, lambda: screen.failed, "the failure")
        heading = str(screen.query_one("#heading", Label).content)
        assert "exited with code 3" in heading
        assert str(tmp_path / "logs" / "engine.log") in str(
            screen.query_one("#progress", Static).content
        )
        assert "CUDA error: out of memory" in str(screen.query_one("#log", Static).content)
        await pilot.press("ctrl+q")
    assert app.return_code == 1


async def test_running_engine_is_reused_not_started(
    scripted, project: Path, tmp_path: Path
) -> None:
    server = scripted([])
    app = engine_app(server.port, [sys.executable, "-c", "raise SystemExit(9)"], project, tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: panes(app), "the workspace and its first agent")
        assert app.engine is not None and app.engine.pid is None
        panel = app.screen.query_one(EnginePanel)
        await wait_until(pilot, lambda: panel.reading is not None, "a poll")
        assert panel.reading is not None
        assert panel.reading.problem == "not an OpenJet engine (no /v1/slots)"
        await pilot.press("ctrl+q")

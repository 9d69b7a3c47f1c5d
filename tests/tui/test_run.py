"""`openjet` without a command: setup runs first when nothing is configured, errors are one
clear line, and `openjet --help` does not load textual."""

from __future__ import annotations

import subprocess
import sys

import pytest

from openjet.config import update_values
from tui import run
from tui.launcher import LaunchError


def test_setup_runs_first_when_nothing_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_setup() -> int:  # what `openjet setup` leaves behind when it succeeds
        calls.append("setup")
        update_values({"engine.kind": "reference"})
        return 0

    monkeypatch.setattr(run, "run_setup", fake_setup)
    config, target = run._prepare(None, None, None)
    assert calls == ["setup"] and config.is_configured and target.manage_engine


def test_failed_setup_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "run_setup", lambda: 1)
    with pytest.raises(LaunchError, match=r"setup did not finish \(exit code 1\)"):
        run._prepare(None, None, None)


def test_an_endpoint_needs_no_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "run_setup", lambda: pytest.fail("setup must not run"))
    config, target = run._prepare("http://127.0.0.1:11434/v1", "qwen3", None)
    assert not config.is_configured and not target.manage_engine


def test_cli_errors_and_lazy_import() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "openjet", "--endpoint", "localhost:1"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "expected a URL like http://host:8080/v1" in result.stderr
    assert "Traceback" not in result.stderr
    probe = "import sys, openjet.cli; print('textual' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
        == "False"
    )

"""`openjet --version`, `--help` and `openjet config` through the real console entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from openjet import __version__


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openjet", *args], capture_output=True, text=True, timeout=120
    )


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"openjet {__version__}"


def test_help_lists_config() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "config" in result.stdout


def test_config_path_show_set(openjet_home: Path) -> None:
    assert run_cli("config", "path").stdout.strip() == str(openjet_home / "config" / "config.toml")
    result = run_cli("config", "set", "engine.slots", "3")
    assert result.returncode == 0, result.stderr
    shown = json.loads(run_cli("config", "show", "--json").stdout)
    assert shown["engine.slots"] == 3
    assert "engine.slots = 3" in run_cli("config", "show").stdout


def test_config_set_bad_value_exits_nonzero_with_reason(openjet_home: Path) -> None:
    result = run_cli("config", "set", "engine.slots", "lots")
    assert result.returncode == 2
    assert "engine.slots" in result.stderr and "lots" in result.stderr
    assert str(openjet_home / "config" / "config.toml") in result.stderr
    assert "Traceback" not in result.stderr

"""The README's test command and `.ci/run` must be the same command (CI runs what the README says)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", section, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def ci_command() -> str:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [
        ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith(("#", "set ", "cd "))
    ]
    assert len(commands) == 1, f".ci/run should run exactly one command, found {commands}"
    return commands[0]


def test_quick_start_has_exactly_two_commands() -> None:
    commands = readme_quick_start_commands()
    assert len(commands) == 2, commands
    assert "openjet" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    assert ci_command() == readme_quick_start_commands()[1]

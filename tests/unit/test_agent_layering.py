"""The agent knows only an OpenAI-compatible endpoint: it never imports the engine, the TUI
or textual — checked on the source and on a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "agent"
FORBIDDEN = ("engine", "tui", "textual")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_agent_module_imports_engine_tui_or_textual() -> None:
    offenders = {
        f"{path.relative_to(AGENT.parent)}: {name}"
        for path in AGENT.rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in FORBIDDEN
    }
    assert offenders == set()


def test_importing_the_public_api_loads_none_of_them() -> None:
    code = (
        "import sys, agent.api, agent.events, openjet.cli_agent\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=AGENT.parent
    )
    assert out.stdout.strip() == "[]"

"""Whole-tree checks: ruff (lint and format), mypy, and the import boundaries between layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("openjet", "engine", "setup_wizard", "agent", "tui")
BIN = Path(sys.executable).parent

# package -> top-level modules it must never import
FORBIDDEN: dict[str, set[str]] = {
    "engine": {"agent", "tui", "setup_wizard", "textual"},
    "agent": {"engine", "tui", "setup_wizard", "textual"},
    "setup_wizard": {"agent", "tui", "textual"},
    "openjet": {"textual"},
    "tui": {"engine"},
}


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_boundaries(package: str) -> None:
    offences = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = imported_top_levels(path) & FORBIDDEN[package]
        if bad:
            offences.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offences, "\n".join(offences)


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_lint_clean() -> None:
    result = run_tool(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_clean() -> None:
    result = run_tool(str(BIN / "ruff"), "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_clean() -> None:
    result = run_tool(str(BIN / "mypy"), *PACKAGES, "tests", "bench")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr

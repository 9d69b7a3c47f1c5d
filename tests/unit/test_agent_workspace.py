"""Workspace confinement and the file tracker that detects changes since the last read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.tools.workspace import FileTracker, ToolError, Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    return Workspace(root)


def test_relative_and_absolute_inside_resolve(ws: Workspace) -> None:
    assert ws.resolve("src/a.py") == ws.root / "src" / "a.py"
    assert ws.resolve(str(ws.root / "src" / "a.py")) == ws.root / "src" / "a.py"
    assert ws.relative(ws.resolve(".")) == "."


@pytest.mark.parametrize("raw", ["../secret.txt", "src/../../secret.txt", "src/.."])
def test_dotdot_is_refused(ws: Workspace, raw: str) -> None:
    with pytest.raises(ToolError, match=r"'\.\.'"):
        ws.resolve(raw)


def test_absolute_outside_is_refused(ws: Workspace, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        ws.resolve(str(tmp_path / "secret.txt"))
    with pytest.raises(ToolError, match="outside"):
        ws.resolve("/etc/passwd")


def test_symlink_leading_out_is_refused_even_in_a_chain(ws: Workspace, tmp_path: Path) -> None:
    os.symlink(tmp_path / "secret.txt", ws.root / "link.txt")
    os.symlink(tmp_path, ws.root / "outdir")
    with pytest.raises(ToolError, match="symlink"):
        ws.resolve("link.txt")
    with pytest.raises(ToolError, match="symlink"):
        ws.resolve("outdir/secret.txt")
    with pytest.raises(ToolError, match="symlink"):
        ws.resolve("outdir/new-file.txt")  # writing through it would land outside


def test_symlink_inside_is_fine(ws: Workspace) -> None:
    os.symlink(ws.root / "src" / "a.py", ws.root / "alias.py")
    assert ws.resolve("alias.py") == ws.root / "src" / "a.py"


def test_missing_and_empty_paths(ws: Workspace) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        ws.resolve("nope.py", must_exist=True)
    with pytest.raises(ToolError, match="empty"):
        ws.resolve("  ")


def test_tracker_detects_content_change_but_not_a_touch(ws: Workspace) -> None:
    path = ws.resolve("src/a.py")
    tracker = FileTracker()
    with pytest.raises(ToolError, match="not read"):
        tracker.check_unchanged(path, "src/a.py")
    tracker.record(path)
    tracker.check_unchanged(path, "src/a.py")
    os.utime(path, ns=(1, 1))  # touched, same bytes: nothing to lose
    tracker.check_unchanged(path, "src/a.py")
    path.write_text("x = 2\n")
    with pytest.raises(ToolError, match="changed since you last read it"):
        tracker.check_unchanged(path, "src/a.py")
    path.unlink()
    with pytest.raises(ToolError, match="deleted"):
        tracker.check_unchanged(path, "src/a.py")


def test_tracker_allows_new_files(ws: Workspace) -> None:
    FileTracker().check_unchanged(ws.root / "new.py", "new.py")

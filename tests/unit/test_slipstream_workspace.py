"""What the orchestrator learns about the workspace: a bounded summary and per-step changes."""

from __future__ import annotations

from pathlib import Path

from agent.slipstream_workspace import Snapshot, compare, repository_summary


def make_tree(root: Path) -> None:
    (root / "src").mkdir()
    (root / "README.md").write_text("# Project\n" + "".join(f"line {i}\n" for i in range(100)))
    (root / "src" / "app.py").write_text("SECRET_BODY = 1\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "x.js").write_text("x")


def test_summary_has_tree_sizes_and_key_heads_only(tmp_path: Path) -> None:
    make_tree(tmp_path)
    summary = repository_summary(tmp_path)
    assert "Workspace: 2 files" in summary
    assert "src/app.py  (16 B)" in summary and "README.md" in summary
    assert "line 28" in summary and "line 29" not in summary  # the first 30 lines of README
    assert "SECRET_BODY" not in summary  # other files: names and sizes, never contents
    assert ".git" not in summary and "node_modules" not in summary


def test_summary_is_bounded(tmp_path: Path) -> None:
    for i in range(500):
        (tmp_path / f"file_{i:03}_with_a_rather_long_name.txt").write_text("x")
    summary = repository_summary(tmp_path, max_chars=4000)
    assert len(summary) <= 4000 and summary.endswith("[... summary cut to fit ...]")
    assert "... and 200 more files" in repository_summary(tmp_path, max_chars=100_000)


def test_compare_reports_added_changed_deleted_and_binary(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "old.txt").write_text("a\nb\n")
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00")
    before = Snapshot.take(tmp_path)
    before.save(tmp_path.parent / "snap.json")
    (tmp_path / "src" / "app.py").write_text("SECRET_BODY = 2\nextra = 3\n")
    (tmp_path / "old.txt").unlink()
    (tmp_path / "new.txt").write_text("hello\n")
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x01")
    changes = compare(Snapshot.load(tmp_path.parent / "snap.json"), Snapshot.take(tmp_path))
    assert changes.stat.splitlines() == [
        " blob.bin | binary or large file changed",
        " new.txt (new) | +1 -0",
        " old.txt (deleted) | +0 -2",
        " src/app.py | +2 -1",
        " 4 files changed, 3 insertions(+), 3 deletions(-)",
    ]
    assert "+++ b/new.txt" in changes.diff and "--- a/old.txt" in changes.diff
    assert "-SECRET_BODY = 1" in changes.diff and changes.n_files == 4


def test_no_changes_and_bounded_diff(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    snap = Snapshot.take(tmp_path)
    assert compare(snap, Snapshot.take(tmp_path)).stat == "no files changed"
    (tmp_path / "a.txt").write_text("".join(f"{i}\n" for i in range(5000)))
    changes = compare(snap, Snapshot.take(tmp_path), max_diff_chars=1000)
    assert len(changes.diff) < 1100 and "diff cut to fit" in changes.diff

"""What Slipstream tells the orchestrator about the workspace, always bounded.

`repository_summary` gives the file tree with sizes and the first lines of a few key files
(README, build files) — never other files' contents. `Snapshot` records the workspace before a
step so the change stat and the diff of the step can be computed afterwards without git
(snapshots are saved as JSON so a resumed run can still diff against the step's start).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
     ".pytest_cache", ".ruff_cache", "dist", "build", "target", ".tox", ".idea", ".vscode"}
)  # fmt: skip
KEY_FILES = ("README.md", "README.rst", "README", "pyproject.toml", "package.json",
             "Cargo.toml", "go.mod", "Makefile", "setup.py", "setup.cfg", "CMakeLists.txt")  # fmt: skip
MAX_TREE_ENTRIES = 300
MAX_HEAD_LINES = 30
MAX_HEAD_CHARS = 1500
MAX_SUMMARY_CHARS = 12_000
MAX_TRACKED_BYTES = 200_000  # per file: larger files are compared by hash only
MAX_SNAPSHOT_TEXT = 16_000_000  # in all
MAX_DIFF_CHARS = 12_000


def walk_files(root: Path) -> list[Path]:
    """Every file under root (sorted), skipping VCS, dependency and cache folders."""
    found: list[Path] = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        found += [Path(current) / name for name in sorted(files)]
    return found


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB"


def _head(path: Path) -> str:
    try:
        with path.open(encoding="utf-8") as handle:
            lines = [line for _, line in zip(range(MAX_HEAD_LINES), handle, strict=False)]
    except (OSError, UnicodeDecodeError):
        return ""
    return "".join(lines)[:MAX_HEAD_CHARS]


def repository_summary(root: Path, max_chars: int = MAX_SUMMARY_CHARS) -> str:
    """The file tree with sizes, then the heads of key files; cut to `max_chars`."""
    files = walk_files(root)
    lines = [f"Workspace: {len(files)} files"]
    for path in files[:MAX_TREE_ENTRIES]:
        try:
            lines.append(f"  {path.relative_to(root).as_posix()}  ({_size(path.stat().st_size)})")
        except OSError:
            continue
    if len(files) > MAX_TREE_ENTRIES:
        lines.append(f"  ... and {len(files) - MAX_TREE_ENTRIES} more files")
    text = "\n".join(lines)
    for name in KEY_FILES:
        path = root / name
        if path.is_file() and (head := _head(path)):
            text += f"\n\n--- {name} (first lines) ---\n{head.rstrip()}"
    if len(text) > max_chars:
        text = text[: max_chars - 40].rstrip() + "\n[... summary cut to fit ...]"
    return text


@dataclass
class FileState:
    digest: str
    text: str | None  # None: binary, too large, or over the snapshot's text budget


@dataclass
class Snapshot:
    files: dict[str, FileState] = field(default_factory=dict)

    @classmethod
    def take(cls, root: Path) -> Snapshot:
        snapshot = cls()
        budget = MAX_SNAPSHOT_TEXT
        for path in walk_files(root):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            text = None
            if len(data) <= min(MAX_TRACKED_BYTES, budget):
                try:
                    text = data.decode("utf-8")
                    budget -= len(data)
                except UnicodeDecodeError:
                    text = None
            digest = hashlib.sha256(data).hexdigest()
            snapshot.files[path.relative_to(root).as_posix()] = FileState(digest, text)
        return snapshot

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {name: [s.digest, s.text] for name, s in self.files.items()}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Snapshot:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls({name: FileState(digest, text) for name, (digest, text) in data.items()})


@dataclass(frozen=True)
class ChangeSet:
    stat: str  # one line per changed file, then a total
    diff: str  # unified diff, bounded
    n_files: int


def _lines(text: str | None) -> list[str]:
    return (text or "").splitlines(keepends=True)


def compare(before: Snapshot, after: Snapshot, max_diff_chars: int = MAX_DIFF_CHARS) -> ChangeSet:
    """The change stat and diff from `before` to `after` (like `git diff --stat` and `git diff`)."""
    names = sorted(set(before.files) | set(after.files))
    stat, diffs = [], []
    added_total = removed_total = 0
    for name in names:
        old, new = before.files.get(name), after.files.get(name)
        if old and new and old.digest == new.digest:
            continue
        if (old and old.text is None) or (new and new.text is None):
            stat.append(
                f" {name} | binary or large file {'changed' if old and new else 'added' if new else 'deleted'}"
            )
            continue
        diff = list(
            difflib.unified_diff(
                _lines(old.text if old else None),
                _lines(new.text if new else None),
                f"a/{name}" if old else "/dev/null",
                f"b/{name}" if new else "/dev/null",
            )
        )
        added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
        removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
        added_total, removed_total = added_total + added, removed_total + removed
        state = "" if old and new else " (new)" if new else " (deleted)"
        stat.append(f" {name}{state} | +{added} -{removed}")
        diffs.append("".join(d if d.endswith("\n") else d + "\n" for d in diff))
    if not stat:
        return ChangeSet("no files changed", "", 0)
    files = f"{len(stat)} file{'s' if len(stat) > 1 else ''}"
    stat.append(f" {files} changed, {added_total} insertions(+), {removed_total} deletions(-)")
    diff_text = "".join(diffs)
    if len(diff_text) > max_diff_chars:
        diff_text = diff_text[:max_diff_chars] + "\n[... diff cut to fit ...]\n"
    return ChangeSet("\n".join(stat), diff_text, len(stat) - 1)

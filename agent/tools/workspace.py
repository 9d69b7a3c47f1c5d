"""The workspace an agent may touch, and what it last saw of each file.

`Workspace.resolve` turns a path the model gave into a real path inside the workspace or raises
`ToolError`: `..` components, absolute paths outside, and symlinks whose target lies outside are
all refused (the check runs on the fully resolved real path, so a symlink anywhere in the chain
counts). `FileTracker` remembers each file's mtime and hash when the agent read or wrote it, so
an edit to a file that changed since (another agent, the person, a command) is refused with a
request to read it again instead of silently overwriting someone's change.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path


class ToolError(Exception):
    """A tool failed in a way the model can act on; the message is what the model reads."""


class Workspace:
    """A directory tree the agent's file tools and commands are confined to."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))

    def resolve(self, raw: str, *, must_exist: bool = False) -> Path:
        """The real path of `raw` (relative to the root, or absolute inside it)."""
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("path is empty; give a path relative to the workspace root")
        given = Path(raw.strip())
        if ".." in given.parts:
            raise ToolError(f"path {raw!r} contains '..'; paths must stay inside the workspace")
        candidate = given if given.is_absolute() else self.root / given
        real = Path(os.path.realpath(candidate))
        if not self.contains(real):
            reason = "is a symlink that leads" if self.contains(candidate) else "is"
            raise ToolError(
                f"path {raw!r} {reason} outside the workspace {self.root}; only files inside it can be used"
            )
        if must_exist and not real.exists():
            raise ToolError(
                f"{self.relative(real)} does not exist (list_dir or glob shows what does)"
            )
        return real

    def contains(self, path: Path) -> bool:
        return path == self.root or self.root in path.parents

    def relative(self, path: Path) -> str:
        """How the model should name `path`: relative to the root, '.' for the root itself."""
        try:
            text = str(path.relative_to(self.root))
        except ValueError:
            return str(path)
        return text or "."


@dataclass(frozen=True)
class FileStamp:
    mtime_ns: int
    size: int
    sha256: str


def stamp(path: Path) -> FileStamp:
    info = path.stat()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return FileStamp(info.st_mtime_ns, info.st_size, digest)


@dataclass
class FileTracker:
    """What one agent last saw of each file it read or wrote (by real path)."""

    seen: dict[Path, FileStamp] = field(default_factory=dict)

    def record(self, path: Path) -> None:
        self.seen[path] = stamp(path)

    def forget(self, path: Path) -> None:
        self.seen.pop(path, None)

    def check_unchanged(self, path: Path, name: str) -> None:
        """Refuse to overwrite a file the agent has not seen in its current state."""
        if not path.exists():
            if path in self.seen:
                raise ToolError(
                    f"{name} was deleted since you last read it; check before writing it"
                )
            return
        known = self.seen.get(path)
        if known is None:
            raise ToolError(f"{name} exists and you have not read it; read_file it first")
        info = path.stat()
        if (info.st_mtime_ns, info.st_size) == (known.mtime_ns, known.size):
            return
        current = stamp(path)
        if current.sha256 != known.sha256:
            raise ToolError(
                f"{name} changed since you last read it (another agent, the user or a command "
                "edited it); read_file it again and redo your edit on the new content"
            )
        self.seen[path] = current  # touched but same content: nothing was lost

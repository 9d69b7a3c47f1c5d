"""File tools: read_file, write_file, edit_file (exact, unique search/replace), list_dir.

Edits are computed in `prepare` (so an approval shows the real diff) and checked again just
before writing: the file must still be what the agent last read (`FileTracker`).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from agent.tools.base import PreparedCall, ToolContext, ToolOutput, ToolSpec, obj, prop
from agent.tools.workspace import ToolError

MAX_READ_LINES = 2000
MAX_READ_CHARS = 100_000
MAX_LIST_ENTRIES = 500


def _read_text(path: Path, name: str) -> str:
    if path.is_dir():
        raise ToolError(f"{name} is a directory; use list_dir")
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise ToolError(f"{name} is a binary file ({len(data)} bytes); it cannot be read as text")
    return data.decode("utf-8", errors="replace")


def unified_diff(name: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def _read_window(text: str, start: int, end: int | None) -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    total = len(lines)
    if start < 1 or (end is not None and end < start):
        raise ToolError(f"bad line range {start}-{end}; lines are numbered from 1 and end >= start")
    if total == 0:
        return "", "empty file"
    if start > total:
        raise ToolError(f"start_line {start} is past the end of the file ({total} lines)")
    target = total if end is None else min(end, total)
    last = min(target, start - 1 + MAX_READ_LINES)
    window = "".join(lines[start - 1 : last])
    if len(window) > MAX_READ_CHARS:
        window = window[:MAX_READ_CHARS]
        last = max(start, start - 1 + window.count("\n"))
    notice = ""
    if last < target:
        notice = (
            f"\n[truncated: showing lines {start}-{last} of {total}; "
            f"call read_file with start_line={last + 1} to read on]"
        )
    return f"{window}{notice}", f"lines {start}-{last} of {total}"


def prepare_read(ctx: ToolContext, args: dict[str, Any]) -> PreparedCall:
    path = ctx.workspace.resolve(args["path"], must_exist=True)
    name = ctx.workspace.relative(path)

    async def run() -> ToolOutput:
        text = _read_text(path, name)
        ctx.tracker.record(path)
        body, where = _read_window(text, int(args.get("start_line") or 1), args.get("end_line"))
        return ToolOutput(f"{name} ({where}):\n{body}")

    return PreparedCall("read_file", "read", f"read {name}", run, path=name)


def _write(ctx: ToolContext, path: Path, name: str, content: str) -> None:
    ctx.tracker.check_unchanged(path, name)  # again: the file may have changed while asking
    if Path(os.path.realpath(path)) != path:  # a folder on the way became a link meanwhile
        raise ToolError(f"{name} now leads through a symlink; check the folder and try again")
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.openjet-tmp")
    temp.write_text(content, encoding="utf-8")
    if path.exists():
        os.chmod(temp, path.stat().st_mode)
    os.replace(temp, path)
    ctx.tracker.record(path)


def prepare_write(ctx: ToolContext, args: dict[str, Any]) -> PreparedCall:
    path = ctx.workspace.resolve(args["path"])
    name = ctx.workspace.relative(path)
    if path.is_dir():
        raise ToolError(f"{name} is a directory")
    ctx.tracker.check_unchanged(path, name)
    before = _read_text(path, name) if path.exists() else ""
    content: str = args["content"]
    diff = unified_diff(name, before, content)
    verb = "overwrite" if path.exists() else "create"

    async def run() -> ToolOutput:
        _write(ctx, path, name, content)
        return ToolOutput(f"wrote {name} ({len(content.encode())} bytes)\n{diff}", diff)

    return PreparedCall("write_file", "edit", f"{verb} {name}", run, path=name, diff=diff)


def prepare_edit(ctx: ToolContext, args: dict[str, Any]) -> PreparedCall:
    path = ctx.workspace.resolve(args["path"], must_exist=True)
    name = ctx.workspace.relative(path)
    old, new = args["old_string"], args["new_string"]
    if old == "":
        raise ToolError(
            "old_string is empty; give the exact text to replace (use write_file for new files)"
        )
    ctx.tracker.check_unchanged(path, name)
    before = _read_text(path, name)
    count = before.count(old)
    if count == 0:
        raise ToolError(
            f"old_string was not found in {name}; read_file it again and copy the text exactly, "
            "including indentation and line breaks"
        )
    if count > 1:
        raise ToolError(
            f"old_string matches {count} places in {name}; include more surrounding lines so it matches once"
        )
    after = before.replace(old, new, 1)
    diff = unified_diff(name, before, after)

    async def run() -> ToolOutput:
        _write(ctx, path, name, after)
        return ToolOutput(f"edited {name}\n{diff}", diff)

    return PreparedCall("edit_file", "edit", f"edit {name}", run, path=name, diff=diff)


def prepare_list(ctx: ToolContext, args: dict[str, Any]) -> PreparedCall:
    path = ctx.workspace.resolve(args.get("path") or ".", must_exist=True)
    name = ctx.workspace.relative(path)
    if not path.is_dir():
        raise ToolError(f"{name} is a file, not a directory; use read_file")

    async def run() -> ToolOutput:
        entries = sorted(path.iterdir(), key=lambda p: (not p.is_dir(), p.name))
        lines = []
        for entry in entries[:MAX_LIST_ENTRIES]:
            if entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                size = entry.stat().st_size if entry.exists() else 0
                lines.append(f"{entry.name}  ({size} bytes)")
        if len(entries) > MAX_LIST_ENTRIES:
            lines.append(f"[{len(entries) - MAX_LIST_ENTRIES} more entries not shown; use glob]")
        return ToolOutput(f"{name}/:\n" + ("\n".join(lines) if lines else "(empty)"))

    return PreparedCall("list_dir", "read", f"list {name}", run, path=name)


PATH = prop("string", "path relative to the workspace root")
SPECS = [
    ToolSpec(
        "read_file",
        "read",
        "Read a text file. Long files are cut at 2000 lines with a notice; use start_line/end_line "
        "(1-based, inclusive) to read a range.",
        obj(
            {
                "path": PATH,
                "start_line": prop("integer", "first line to read (default 1)"),
                "end_line": prop("integer", "last line to read (default: end of file)"),
            },
            ["path"],
        ),
        prepare_read,
    ),
    ToolSpec(
        "write_file",
        "edit",
        "Create a file or replace its whole content. An existing file must be read first.",
        obj(
            {"path": PATH, "content": prop("string", "the complete new content")},
            ["path", "content"],
        ),
        prepare_write,
    ),
    ToolSpec(
        "edit_file",
        "edit",
        "Replace one exact occurrence of old_string with new_string in a file; old_string must "
        "match exactly once (copy it from read_file output, with its indentation). Returns a diff.",
        obj(
            {
                "path": PATH,
                "old_string": prop("string", "the exact text to replace"),
                "new_string": prop("string", "the replacement text"),
            },
            ["path", "old_string", "new_string"],
        ),
        prepare_edit,
    ),
    ToolSpec(
        "list_dir",
        "read",
        "List a directory's entries (directories end with /).",
        obj({"path": prop("string", "directory relative to the workspace root (default .)")}, []),
        prepare_list,
    ),
]

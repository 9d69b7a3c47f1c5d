"""Search tools: glob (file names) and grep (file contents; ripgrep when installed, Python
otherwise). Both stay inside the workspace and skip version-control and cache folders.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.tools.base import PreparedCall, ToolContext, ToolOutput, ToolSpec, obj, prop
from agent.tools.workspace import ToolError, Workspace

MAX_GLOB_RESULTS = 500
MAX_GREP_MATCHES = 200
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".mypy_cache"}
)


def _walk_files(workspace: Workspace, top: Path) -> Iterator[Path]:
    """Files under `top`, sorted, without skipped folders or symlinks leading outside."""
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(folder) / name
            if workspace.contains(Path(os.path.realpath(path))):
                yield path


def prepare_glob(ctx: ToolContext, args: dict[str, Any]) -> PreparedCall:
    pattern: str = args["pattern"].strip()
    if not pattern or ".." in Path(pattern).parts or Path(pattern).is_absolute():
        raise ToolError(
            "pattern must be relative to the workspace root, without '..' (e.g. src/**/*.py)"
        )
    top = ctx.workspace.resolve(args.get("path") or ".", must_exist=True)

    async def run() -> ToolOutput:
        found = [
            ctx.workspace.relative(p)
            for p in _walk_files(ctx.workspace, top)
            if _glob_match(str(p.relative_to(top)), pattern)
        ]
        if not found:
            return ToolOutput(f"no files match {pattern!r} under {ctx.workspace.relative(top)}")
        shown = found[:MAX_GLOB_RESULTS]
        more = len(found) - len(shown)
        tail = f"\n[{more} more matches not shown; narrow the pattern]" if more else ""
        return ToolOutput("\n".join(shown) + tail)

    return PreparedCall("glob", "read", f"glob {pattern}", run)


def _glob_match(relative: str, pattern: str) -> bool:
    """`**` matches any number of folders (also none); `*` stays within one name."""
    regex = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            regex += ".*"
            i += 2
        else:
            piece = fnmatch.translate(pattern[i])[4:-3]  # strip (?s: ... )\Z
            regex += piece.replace(".*", "[^/]*") if pattern[i] == "*" else piece
            i += 1
    return re.fullmatch(regex, relative) is not None


def _python_grep(
    workspace: Workspace, top: Path, regex: re.Pattern[str], file_glob: str | None
) -> list[str]:
    hits: list[str] = []
    files = [top] if top.is_file() else _walk_files(workspace, top)
    for path in files:
        if file_glob and not fnmatch.fnmatch(path.name, file_glob):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                hits.append(f"{workspace.relative(path)}:{number}:{line[:300]}")
                if len(hits) > MAX_GREP_MATCHES:
                    return hits
    return hits


async def _ripgrep(
    rg: str, workspace: Workspace, top: Path, pattern: str, ignore_case: bool, file_glob: str | None
) -> list[str]:
    argv = [rg, "--line-number", "--no-heading", "--color", "never", "--max-columns", "300"]
    argv += ["--ignore-case"] if ignore_case else []
    argv += ["--glob", file_glob] if file_glob else []
    argv += ["-e", pattern, "--", workspace.relative(top)]
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=workspace.root,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await process.communicate()
    if process.returncode not in (0, 1):
        raise ToolError(f"grep failed: {err.decode('utf-8', 'replace').strip()}")
    lines = out.decode("utf-8", "replace").splitlines()
    return sorted(line.removeprefix("./") for line in lines)[: MAX_GREP_MATCHES + 1]


def find_ripgrep() -> str | None:
    """The ripgrep binary, or None to use the Python search (tests patch this)."""
    return shutil.which("rg")


def prepare_grep(ctx: ToolContext, args: dict[str, Any]) -> PreparedCall:
    pattern: str = args["pattern"]
    ignore_case = bool(args.get("ignore_case"))
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"pattern is not a valid regular expression: {exc}") from exc
    top = ctx.workspace.resolve(args.get("path") or ".", must_exist=True)
    file_glob = args.get("glob") or None
    rg = find_ripgrep()

    async def run() -> ToolOutput:
        if rg:
            hits = await _ripgrep(rg, ctx.workspace, top, pattern, ignore_case, file_glob)
        else:
            hits = await asyncio.to_thread(_python_grep, ctx.workspace, top, regex, file_glob)
        if not hits:
            return ToolOutput(f"no matches for {pattern!r}")
        tail = ""
        if len(hits) > MAX_GREP_MATCHES:
            hits, tail = hits[:MAX_GREP_MATCHES], "\n[more matches not shown; narrow the search]"
        return ToolOutput("\n".join(hits) + tail)

    return PreparedCall("grep", "read", f"grep {pattern!r}", run)


SPECS = [
    ToolSpec(
        "glob",
        "read",
        "Find files by name pattern, e.g. '**/*.py' or 'src/*.ts' (** = any folders).",
        obj(
            {
                "pattern": prop("string", "glob pattern relative to path"),
                "path": prop("string", "folder to search (default: workspace root)"),
            },
            ["pattern"],
        ),
        prepare_glob,
    ),
    ToolSpec(
        "grep",
        "read",
        "Search file contents with a regular expression; prints path:line:text.",
        obj(
            {
                "pattern": prop("string", "regular expression"),
                "path": prop("string", "file or folder to search (default: workspace root)"),
                "glob": prop("string", "only files whose name matches, e.g. '*.py'"),
                "ignore_case": prop("boolean", "case-insensitive search"),
            },
            ["pattern"],
        ),
        prepare_grep,
    ),
]

"""The file and search tools: arguments, confinement, limits, diffs, errors the model can use."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.tools import TOOL_SCHEMAS, ToolContext, ToolError, Workspace, files, prepare_call, search


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "proj"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 1\n")
    (root / "pkg" / "sub" / "b.py").write_text("import os\nVALUE = 'Needle'\n")
    (root / "notes.md").write_text("a needle here\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("needle in git\n")
    return ToolContext(Workspace(root))


async def call(ctx: ToolContext, name: str, **args: Any) -> str:
    return (await prepare_call(ctx, name, args).run()).text


def test_every_tool_has_a_schema_the_model_sees() -> None:
    names = [t["function"]["name"] for t in TOOL_SCHEMAS]
    assert names == [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "glob",
        "grep",
        "run_shell",
    ]
    for tool in TOOL_SCHEMAS:
        assert tool["type"] == "function"
        assert tool["function"]["parameters"]["type"] == "object"
        assert tool["function"]["description"]


def test_bad_arguments_are_explained(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="missing argument"):
        prepare_call(ctx, "read_file", {})
    with pytest.raises(ToolError, match="unknown argument"):
        prepare_call(ctx, "read_file", {"path": "x", "lines": 3})
    with pytest.raises(ToolError, match="must be a integer"):
        prepare_call(ctx, "read_file", {"path": "notes.md", "start_line": "3"})
    with pytest.raises(ToolError, match="no tool named 'delete_all'"):
        prepare_call(ctx, "delete_all", {})


async def test_read_file_ranges_and_truncation(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = await call(ctx, "read_file", path="pkg/a.py")
    assert text.startswith("pkg/a.py (lines 1-6 of 6):\ndef f():")
    ranged = await call(ctx, "read_file", path="pkg/a.py", start_line=5, end_line=6)
    assert ranged == "pkg/a.py (lines 5-6 of 6):\ndef g():\n    return 1\n"
    monkeypatch.setattr(files, "MAX_READ_LINES", 2)
    cut = await call(ctx, "read_file", path="pkg/a.py")
    assert "lines 1-2 of 6" in cut and "start_line=3" in cut
    with pytest.raises(ToolError, match="past the end"):
        await call(ctx, "read_file", path="pkg/a.py", start_line=40)


async def test_read_file_refuses_binary_and_directories(ctx: ToolContext) -> None:
    (ctx.workspace.root / "blob.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError, match="binary"):
        await call(ctx, "read_file", path="blob.bin")
    with pytest.raises(ToolError, match="directory"):
        await call(ctx, "read_file", path="pkg")


async def test_write_file_creates_and_needs_a_read_before_overwrite(ctx: ToolContext) -> None:
    out = await call(ctx, "write_file", path="new/dir/c.py", content="print(1)\n")
    assert "wrote new/dir/c.py" in out
    assert (ctx.workspace.root / "new/dir/c.py").read_text() == "print(1)\n"
    with pytest.raises(ToolError, match="have not read it"):
        prepare_call(ctx, "write_file", {"path": "notes.md", "content": "gone"})
    await call(ctx, "read_file", path="notes.md")
    prepared = prepare_call(ctx, "write_file", {"path": "notes.md", "content": "new\n"})
    assert prepared.kind == "edit" and "-a needle here\n+new" in (prepared.diff or "")
    assert (
        ctx.workspace.root / "notes.md"
    ).read_text() == "a needle here\n"  # prepare wrote nothing
    await prepared.run()
    assert (ctx.workspace.root / "notes.md").read_text() == "new\n"


async def test_edit_file_exact_unique_match_and_diff(ctx: ToolContext) -> None:
    await call(ctx, "read_file", path="pkg/a.py")
    with pytest.raises(ToolError, match="matches 2 places"):
        prepare_call(
            ctx,
            "edit_file",
            {"path": "pkg/a.py", "old_string": "return 1", "new_string": "return 2"},
        )
    with pytest.raises(ToolError, match="not found"):
        prepare_call(
            ctx, "edit_file", {"path": "pkg/a.py", "old_string": "return  1", "new_string": "x"}
        )
    result = await prepare_call(
        ctx,
        "edit_file",
        {
            "path": "pkg/a.py",
            "old_string": "def g():\n    return 1",
            "new_string": "def g():\n    return 2",
        },
    ).run()
    assert result.diff is not None and "-    return 1\n+    return 2\n" in result.diff
    assert result.diff.startswith("--- a/pkg/a.py\n+++ b/pkg/a.py\n")
    assert (ctx.workspace.root / "pkg/a.py").read_text().endswith("def g():\n    return 2\n")
    # The agent's own write keeps its view current: a second edit needs no re-read.
    await prepare_call(
        ctx, "edit_file", {"path": "pkg/a.py", "old_string": "def f", "new_string": "def h"}
    ).run()


async def test_edit_refused_when_the_file_changed_after_approval_was_asked(
    ctx: ToolContext,
) -> None:
    await call(ctx, "read_file", path="notes.md")
    prepared = prepare_call(
        ctx, "edit_file", {"path": "notes.md", "old_string": "needle", "new_string": "pin"}
    )
    (ctx.workspace.root / "notes.md").write_text(
        "someone else's text\n"
    )  # while the person decided
    with pytest.raises(ToolError, match="changed since you last read it"):
        await prepared.run()
    assert (ctx.workspace.root / "notes.md").read_text() == "someone else's text\n"


async def test_list_dir(ctx: ToolContext) -> None:
    out = await call(ctx, "list_dir", path="pkg")
    assert out.splitlines() == ["pkg/:", "sub/", "a.py  (46 bytes)"]
    (ctx.workspace.root / "empty").mkdir()
    assert (await call(ctx, "list_dir", path="empty")).endswith("(empty)")
    with pytest.raises(ToolError, match="not a directory"):
        await call(ctx, "list_dir", path="notes.md")


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("**/*.py", ["pkg/a.py", "pkg/sub/b.py"]),
        ("pkg/*.py", ["pkg/a.py"]),
        ("*.md", ["notes.md"]),
        ("**/b.py", ["pkg/sub/b.py"]),
    ],
)
async def test_glob(ctx: ToolContext, pattern: str, expected: list[str]) -> None:
    assert (await call(ctx, "glob", pattern=pattern)).splitlines() == expected


async def test_glob_refuses_escapes_and_says_when_nothing_matches(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"without '\.\.'"):
        prepare_call(ctx, "glob", {"pattern": "../*"})
    assert "no files match" in await call(ctx, "glob", pattern="*.rs")


@pytest.mark.parametrize("engine", ["python", "ripgrep"])
async def test_grep(ctx: ToolContext, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if engine == "python":
        monkeypatch.setattr(search, "find_ripgrep", lambda: None)
    elif shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed on this machine")
    hits = (await call(ctx, "grep", pattern="needle", ignore_case=True)).splitlines()
    assert hits == ["notes.md:1:a needle here", "pkg/sub/b.py:2:VALUE = 'Needle'"]  # .git skipped
    assert (await call(ctx, "grep", pattern="Needle", glob="*.py")).splitlines() == [
        "pkg/sub/b.py:2:VALUE = 'Needle'"
    ]
    assert "no matches" in await call(ctx, "grep", pattern="zebra")
    with pytest.raises(ToolError, match="regular expression"):
        prepare_call(ctx, "grep", {"pattern": "("})

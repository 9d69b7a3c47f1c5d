"""run_shell with real subprocesses: exit codes, cwd, output cap, timeouts and cancellation
that kill the whole process group."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agent.tools import ToolContext, ToolError, Workspace, prepare_call
from agent.tools.shell import CappedOutput
from tests.support.processes import wait_dead


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    (tmp_path / "proj" / "sub").mkdir(parents=True)
    return ToolContext(Workspace(tmp_path / "proj"), shell_timeout_s=10, output_cap_chars=2000)


async def test_exit_code_output_and_cwd(ctx: ToolContext) -> None:
    out = await prepare_call(
        ctx, "run_shell", {"command": "pwd; echo err >&2; exit 3", "cwd": "sub"}
    ).run()
    assert out.text.splitlines() == ["exit code 3", str(ctx.workspace.root / "sub"), "err"]


async def test_cwd_is_confined(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"'\.\.'"):
        prepare_call(ctx, "run_shell", {"command": "ls", "cwd": ".."})


async def test_no_stdin(ctx: ToolContext) -> None:
    out = await prepare_call(ctx, "run_shell", {"command": "cat; echo done"}).run()
    assert out.text == "exit code 0\ndone\n"


async def test_output_cap_keeps_head_and_tail(ctx: ToolContext) -> None:
    out = await prepare_call(ctx, "run_shell", {"command": "seq 1 20000"}).run()
    assert len(out.text) < 2200
    assert out.text.startswith("exit code 0\n1\n2\n3\n")
    assert "bytes of output omitted" in out.text
    assert out.text.rstrip().endswith("19999\n20000")


def test_capped_output_without_overflow() -> None:
    sink = CappedOutput(100)
    sink.add(b"hello ")
    sink.add(b"world")
    assert sink.text() == "hello world"


async def test_timeout_kills_the_whole_group(ctx: ToolContext, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    command = f"sleep 60 & echo $! > {pidfile}; wait"
    started = time.monotonic()
    with pytest.raises(ToolError, match="timed out after 1s"):
        await prepare_call(ctx, "run_shell", {"command": command, "timeout": 1}).run()
    assert time.monotonic() - started < 6
    assert wait_dead(int(pidfile.read_text()))


async def test_background_jobs_do_not_outlive_the_call(ctx: ToolContext, tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    out = await prepare_call(
        ctx,
        "run_shell",
        {"command": f"sleep 60 > /dev/null 2>&1 & echo $! > {pidfile}; echo started"},
    ).run()
    assert out.text == "exit code 0\nstarted\n"
    assert wait_dead(int(pidfile.read_text()))


async def test_cancel_kills_the_group(ctx: ToolContext, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    prepared = prepare_call(ctx, "run_shell", {"command": f"sleep 60 & echo $! > {pidfile}; wait"})
    task = asyncio.ensure_future(prepared.run())
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_dead(int(pidfile.read_text()))

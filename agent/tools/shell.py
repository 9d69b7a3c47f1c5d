"""run_shell: one command through /bin/sh in the workspace, in its own process group.

The command gets no stdin (nothing can answer a prompt on its behalf), a timeout, and an output
cap that keeps the head and the tail with a notice of what was dropped. On timeout, on
cancellation and when the command returns, the whole process group is killed, so children and
background jobs never outlive the call. In airgapped mode the command runs in a new network
namespace (`unshare -rn`) that has no interface but its own loopback, so nothing it starts can
reach another machine; where the system does not allow that, the command is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import subprocess
from typing import Any

from agent.tools.base import PreparedCall, ToolContext, ToolOutput, ToolSpec, obj, prop
from agent.tools.workspace import ToolError

KILL_GRACE_S = 2.0
DRAIN_AFTER_EXIT_S = 0.5


class CappedOutput:
    """Keeps the first and last parts of a stream that may be huge."""

    def __init__(self, cap_chars: int) -> None:
        self.head_cap = cap_chars * 2 // 3
        self.tail_cap = cap_chars - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        self.head += data[:room]
        rest = data[room:] if room > 0 else data
        self.tail += rest
        if len(self.tail) > self.tail_cap:
            self.dropped += len(self.tail) - self.tail_cap
            del self.tail[: len(self.tail) - self.tail_cap]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output omitted ...]\n{tail}"
        return head + tail


def _kill_group(process: asyncio.subprocess.Process, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


async def _pump(stream: asyncio.StreamReader, sink: CappedOutput) -> None:
    while chunk := await stream.read(65536):
        sink.add(chunk)


@functools.cache
def network_isolation_available() -> bool:
    """Whether `unshare -rn` (an unprivileged user + network namespace) works here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        probe = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def command_argv(command: str, airgapped: bool) -> list[str]:
    """The argv that runs `command` through /bin/sh, without network when airgapped."""
    shell = ["/bin/sh", "-c", command]
    if not airgapped:
        return shell
    if not network_isolation_available():
        raise ToolError(
            "refused: the config says airgapped, and this system does not allow running a "
            "command without network access (`unshare -rn` failed), so no command can run"
        )
    return ["unshare", "-rn", *shell]


async def run_command(
    command: str, cwd: str, timeout_s: float, cap_chars: int, airgapped: bool = False
) -> tuple[int | None, str]:
    """Run `command`; returns (exit code or None when it timed out, capped output)."""
    process = await asyncio.create_subprocess_exec(
        *command_argv(command, airgapped),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # its own process group: killpg reaches every child
    )
    assert process.stdout is not None
    sink = CappedOutput(cap_chars)
    pump = asyncio.create_task(_pump(process.stdout, sink))
    code: int | None
    try:
        code = await asyncio.wait_for(process.wait(), timeout_s)
        # Background jobs may hold the pipe open: read what is there, then end the group.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(pump), DRAIN_AFTER_EXIT_S)
    except TimeoutError:
        code = None
    finally:
        _kill_group(process, signal.SIGTERM)
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(process.wait()), KILL_GRACE_S)
        _kill_group(process)
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump
    return code, sink.text()


def prepare_shell(ctx: ToolContext, args: dict[str, Any]) -> PreparedCall:
    command: str = args["command"]
    if not command.strip():
        raise ToolError("command is empty")
    cwd = ctx.workspace.resolve(args.get("cwd") or ".", must_exist=True)
    if not cwd.is_dir():
        raise ToolError(f"cwd {ctx.workspace.relative(cwd)} is not a directory")
    timeout = float(args.get("timeout") or ctx.shell_timeout_s)
    timeout = max(1.0, min(timeout, ctx.shell_timeout_s * 10))

    async def run() -> ToolOutput:
        code, output = await run_command(
            command, str(cwd), timeout, ctx.output_cap_chars, ctx.airgapped
        )
        if code is None:
            raise ToolError(f"command timed out after {timeout:g}s and was killed\n{output}")
        return ToolOutput(f"exit code {code}\n{output}")

    where = ctx.workspace.relative(cwd)
    summary = f"run `{command}`" + (f" in {where}" if where != "." else "")
    return PreparedCall("run_shell", "shell", summary, run, command=command)


SPECS = [
    ToolSpec(
        "run_shell",
        "shell",
        "Run a shell command (sh -c) in the workspace and return its exit code and output "
        "(stdout and stderr together, long output cut in the middle). No stdin; killed on timeout.",
        obj(
            {
                "command": prop("string", "the command line"),
                "cwd": prop(
                    "string", "working directory relative to the workspace root (default .)"
                ),
                "timeout": prop("integer", "seconds before the command is killed"),
            },
            ["command"],
        ),
        prepare_shell,
    ),
]

"""Airgapped mode: commands run by `run_shell` cannot reach the network, or are refused."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from agent.tools.shell import command_argv, network_isolation_available, run_command
from agent.tools.workspace import ToolError


@pytest.fixture
def listening_port() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    yield server.getsockname()[1]
    server.close()


def connect_command(port: int) -> str:
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('CONNECTED')"
    return f'{sys.executable} -c "{code}"'


async def test_without_airgap_the_command_reaches_the_network(listening_port: int) -> None:
    code, output = await run_command(connect_command(listening_port), ".", 30, 10_000)
    assert code == 0 and "CONNECTED" in output


async def test_airgapped_command_cannot_reach_the_host(listening_port: int) -> None:
    if not network_isolation_available():
        with pytest.raises(ToolError, match="airgapped"):
            command_argv("true", airgapped=True)
        return
    code, output = await run_command(connect_command(listening_port), ".", 30, 10_000, True)
    assert code != 0 and "CONNECTED" not in output


def test_plain_commands_still_run_through_sh() -> None:
    assert command_argv("echo hi", airgapped=False) == ["/bin/sh", "-c", "echo hi"]

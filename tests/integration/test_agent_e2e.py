"""End to end: `openjet run` (a real subprocess) against `openjet serve` (our engine, CPU
reference backend) with the tiny random-weight model. The model says nonsense; the test is that
the whole pipeline — template, tools, streaming, usage, session — works."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.sessions import SessionStore
from engine.synthetic import write_synthetic
from openjet.config import update_values


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def engine_url(tmp_path: Path) -> Iterator[str]:
    model = write_synthetic(tmp_path / "tiny.gguf", "tiny", "f32", seed=0, threads=1)
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "openjet",
            "serve",
            "--model",
            str(model),
            "--backend",
            "cpu",
            "--port",
            str(port),
            "--slots",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.mark.slow
def test_openjet_run_against_openjet_serve(tmp_path: Path, engine_url: str) -> None:
    update_values({"agent.max_tokens": 8, "agent.max_steps": 2})
    project = tmp_path / "project"
    project.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "openjet", "run", "Say hello.", "--workdir", str(project),
         "--endpoint", engine_url, "--approve", "never", "--json"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert events, run.stderr
    session_id = events[0]["session_id"]
    assert events[0]["type"] == "session" and events[-1]["type"] == "done"
    done = events[-1]
    assert done["session_id"] == session_id
    assert done["reason"] in ("answer", "step_limit"), done
    assert run.returncode == {"answer": 0, "step_limit": 3}[done["reason"]], run.stderr
    usage = [e for e in events if e["type"] == "usage"]
    # The system prompt and the tool list went through the model's chat template.
    assert usage and usage[0]["prompt_tokens"] > 500
    assert 0 < usage[0]["completion_tokens"] <= 8
    messages = [m for _, m in SessionStore().messages(session_id)]
    assert messages[0] == {"role": "user", "content": "Say hello."}
    assert messages[1]["role"] == "assistant"
    record = SessionStore().get(session_id)
    assert record.model == "tiny.gguf" and record.status == "idle"

"""`openjet run` and `openjet sessions` through the real CLI, against the scripted server."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from openjet.cli import app
from tests.support.scripted_server import ScriptedServer

runner = CliRunner()


def tc(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("remember the milk\n")
    return root


def lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_run_json_prints_one_object_per_event(tmp_path: Path, project: Path) -> None:
    script = [
        {"content": "Reading.", "tool_calls": [tc("read_file", path="notes.txt")]},
        {"content": "It says: remember the milk."},
    ]
    with ScriptedServer(script, tmp_path / "srv") as server:
        result = runner.invoke(
            app,
            [
                "run",
                "what do my notes say?",
                "-C",
                str(project),
                "--endpoint",
                server.url,
                "--approve",
                "never",
                "--json",
            ],
        )
    assert result.exit_code == 0, result.output
    events = lines(result.stdout)
    session_id = events[0]["session_id"]
    assert [e["type"] for e in events] == [
        "session",
        "message",
        "usage",
        "tool_call",
        "tool_result",
        "message",
        "usage",
        "done",
    ]
    assert all(e["session_id"] == session_id for e in events)
    assert events[1]["text"] == "Reading."
    assert events[3]["name"] == "read_file" and events[3]["arguments"] == {"path": "notes.txt"}
    assert events[4]["ok"] is True and "remember the milk" in events[4]["output"]
    assert events[-1] == {
        "type": "done",
        "session_id": session_id,
        "reason": "answer",
        "message": "It says: remember the milk.",
    }

    listed = runner.invoke(app, ["sessions", "list", "--json"])
    assert [s["id"] for s in json.loads(listed.stdout)] == [session_id]
    assert "what do my notes say?" in runner.invoke(app, ["sessions", "list"]).stdout
    shown = json.loads(runner.invoke(app, ["sessions", "show", session_id, "--json"]).stdout)
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert ("turn_finished", {"reason": "answer"}) in [tuple(e) for e in shown["events"]]
    text = runner.invoke(app, ["sessions", "show", session_id]).stdout
    assert "[tool] notes.txt" in text and "(calls: read_file)" in text
    deleted = runner.invoke(app, ["sessions", "delete", session_id, "--json"])
    assert json.loads(deleted.stdout) == {"deleted": session_id}
    assert runner.invoke(app, ["sessions", "list"]).stdout.strip() == "no sessions"


def test_run_text_mode_streams_the_answer(tmp_path: Path, project: Path) -> None:
    with ScriptedServer([{"content": "Plain answer."}], tmp_path / "srv") as server:
        result = runner.invoke(
            app, ["run", "hi", "-C", str(project), "--endpoint", server.url, "--approve", "all"]
        )
    assert result.exit_code == 0
    assert result.stdout.strip() == "Plain answer."


def test_ask_mode_without_a_terminal_refuses(tmp_path: Path, project: Path) -> None:
    with ScriptedServer([], tmp_path / "srv") as server:
        result = runner.invoke(
            app, ["run", "edit things", "-C", str(project), "--endpoint", server.url]
        )
        assert server.requests() == []
    assert result.exit_code == 2
    assert "approval mode 'ask' needs a terminal" in result.stderr
    assert "--approve never, auto-edits or all" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "x", "-C", "/definitely/missing", "--approve", "all"], "is not a directory"),
        (["run", "x", "--approve", "yolo"], "not one of never, ask, auto-edits, all"),
        (["run", "x", "--approve", "all", "--endpoint", "nope"], "not an http(s) URL"),
        (["run", "x", "--approve", "all", "--profile", "missing"], "no profile named 'missing'"),
        (["run", "--approve", "all"], "give a TASK"),
        (["run", "--resume", "abc123"], "no session with id 'abc123'"),
        (["sessions", "show", "abc123"], "no session with id 'abc123'"),
        (["sessions", "delete", "abc123"], "no session with id 'abc123'"),
    ],
)
def test_bad_input_gets_a_clear_error(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_ask_mode_on_a_terminal_asks_the_person(tmp_path: Path, project: Path) -> None:
    script = [
        {"tool_calls": [tc("run_shell", command="touch approved.txt")]},
        {"tool_calls": [tc("run_shell", command="touch denied.txt")]},
        {"content": "done", "expect": {"last_contains": "not today"}},
    ]
    with ScriptedServer(script, tmp_path / "srv") as server:
        leader, follower = pty.openpty()
        run = subprocess.Popen(
            [sys.executable, "-m", "openjet", "run", "touch files", "-C", str(project), "--endpoint", server.url, "--json"],
            stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        os.close(follower)
        for answer in (b"y\n", b"n\n", b"not today\n"):
            time.sleep(0.2)
            os.write(leader, answer)  # read when asked; the terminal buffers it until then
        out, err = run.communicate(timeout=60)
        os.close(leader)
        assert server.problems() == []
    assert run.returncode == 0, err
    assert "Approve?" in err and "run `touch approved.txt`" in err
    assert [e["type"] for e in lines(out)].count("approval") == 2
    assert (project / "approved.txt").exists() and not (project / "denied.txt").exists()

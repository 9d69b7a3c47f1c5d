"""Sessions survive the process: resume after a clean stop, and after SIGKILL mid-turn (a real
`openjet run` subprocess) with no message lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agent.api import AgentManager, AgentSpec
from agent.events import TurnFinished
from agent.sessions import SessionStore
from tests.support.agent_driver import drive, of_type
from tests.support.scripted_server import ScriptedServer


def tc(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def project_dir(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


async def test_resume_in_a_new_manager_continues_the_conversation(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    script = [
        {"tool_calls": [tc("write_file", path="a.txt", content="1")]},
        {"content": "wrote it"},
        {"content": "second answer", "expect": {"n_messages": 6, "last_contains": "and now?"}},
    ]
    with ScriptedServer(script, tmp_path / "srv") as server:
        first = AgentManager()
        agent = first.create(
            AgentSpec(workdir=project, endpoint=server.url, approval="all", title="resumable")
        )
        await drive(agent, "write a.txt")
        before = agent.history()
        await first.aclose()

        second = AgentManager()
        resumed = second.resume(agent.id)
        assert (resumed.title, resumed.approval_mode, resumed.workdir) == (
            "resumable",
            "all",
            project.resolve(),
        )
        assert resumed.history() == before and resumed.status == "idle" and not resumed.can_continue
        events = await drive(resumed, "and now?")
        assert of_type(events, TurnFinished)[0].message == "second answer"
        assert server.problems() == []
        summaries = second.list_sessions()
        assert [(s.id, s.title, s.status) for s in summaries] == [(agent.id, "resumable", "idle")]
        assert summaries[0].prompt_tokens > 0
        await second.aclose()


def openjet(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "openjet", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        **kwargs,
    )


def read_events(
    process: subprocess.Popen[str], until: str, timeout: float = 30
) -> list[dict[str, Any]]:
    assert process.stdout is not None
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        events.append(json.loads(line))
        if events[-1]["type"] == until:
            return events
    raise AssertionError(
        f"no {until!r} event; got {events}, stderr {process.stderr.read() if process.stderr else ''}"
    )


def stored(session_id: str) -> list[dict[str, Any]]:
    store = SessionStore()
    rows = store.messages(session_id)
    store.close()
    assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
    return [message for _, message in rows]


def test_sigkill_while_the_model_streams_then_resume(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    script = [
        {"tool_calls": [tc("write_file", path="a.txt", content="one\n")]},
        {"tool_calls": [tc("run_shell", command="cat a.txt")]},
        {"content": "Almost there, just a moment", "chunk_delay": 0.01, "hang": True},
        {
            "content": "All done.",
            "expect": {"last_role": "tool", "last_contains": "exit code 0\none"},
        },
    ]
    with ScriptedServer(script, tmp_path / "srv") as server:
        run = openjet(
            "run",
            "write and show a.txt",
            "--workdir",
            str(project),
            "--endpoint",
            server.url,
            "--approve",
            "all",
            "--json",
        )
        session_id = read_events(run, "session")[0]["session_id"]
        requests = server.wait_for_requests(3)
        time.sleep(0.5)  # the third answer is streaming now
        run.send_signal(signal.SIGKILL)
        run.wait(10)
        assert run.returncode == -signal.SIGKILL
        before = stored(session_id)
        assert [m["role"] for m in before] == ["user", "assistant", "tool", "assistant", "tool"]

        resume = openjet("run", "--resume", session_id, "--json")
        events = read_events(resume, "done")
        assert resume.wait(20) == 0
        requests = server.requests()
        assert server.problems() == []
    # The model saw the same conversation before and after the crash: nothing lost, nothing twice.
    assert requests[3]["messages"] == requests[2]["messages"]
    after = stored(session_id)
    assert after[:5] == before and len(after) == 6 and after[5]["content"] == "All done."
    assert events[-1] == {
        "type": "done",
        "session_id": session_id,
        "reason": "answer",
        "message": "All done.",
    }
    assert (project / "a.txt").read_text() == "one\n"


def test_sigkill_during_a_command_then_resume(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    script = [
        {"tool_calls": [tc("run_shell", command="sleep 30"), tc("list_dir")]},
        {"content": "Recovered.", "expect": {"last_contains": "interrupted"}},
    ]
    with ScriptedServer(script, tmp_path / "srv") as server:
        run = openjet("run", "sleep", "--workdir", str(project), "--endpoint", server.url, "--approve", "all", "--json",
                      start_new_session=True)  # fmt: skip
        session_id = read_events(run, "tool_call")[0]["session_id"]
        time.sleep(0.5)
        os.killpg(run.pid, signal.SIGKILL)  # the agent and its command die together
        run.wait(10)
        assert SessionStore().get(session_id).status == "running"

        resume = openjet("run", "--resume", session_id, "--json")
        events = read_events(resume, "done")
        assert resume.wait(20) == 0
        assert server.problems() == []
    messages = stored(session_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert all(m["content"].startswith("interrupted:") for m in messages[2:4])
    assert events[-1]["message"] == "Recovered."


def test_resume_without_a_pending_turn_needs_a_task(tmp_path: Path) -> None:
    project = project_dir(tmp_path)
    with ScriptedServer([{"content": "hi"}], tmp_path / "srv") as server:
        first = openjet(
            "run",
            "hello",
            "--workdir",
            str(project),
            "--endpoint",
            server.url,
            "--approve",
            "never",
            "--json",
        )
        session_id = read_events(first, "done")[0]["session_id"]
        assert first.wait(20) == 0
    again = openjet("run", "--resume", session_id)
    _, err = again.communicate(timeout=30)
    assert again.returncode == 2
    assert f"session {session_id} has no interrupted turn to continue; give a TASK" in err

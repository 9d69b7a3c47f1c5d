"""`openjet slipstream` as a real subprocess against scripted orchestrator and worker servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.integration.test_slipstream_e2e import PLAN, make_project
from tests.support.scripted_server import ScriptedServer

ONE_STEP = {"steps": PLAN["steps"][:1]}


def openjet(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENJET_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "openjet", *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip


def test_headless_run_prints_the_cloud_traffic_and_the_share(
    tmp_path: Path, openjet_home: Path
) -> None:
    project = make_project(tmp_path)
    cloud_script = [
        {"content": json.dumps(ONE_STEP)},
        {"content": '{"verdict": "accept"}'},
        {"content": '{"verdict": "done", "summary": "greet.py is there"}'},
    ]
    worker_script = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "greet.py", "content": "x = 1\n"}}]},
        {"content": "Wrote greet.py.\nOpen problems: none"},
    ]  # fmt: skip
    with (
        ScriptedServer(cloud_script, tmp_path / "cloud") as cloud,
        ScriptedServer(worker_script, tmp_path / "worker") as worker,
    ):
        done = openjet("slipstream", "make greet.py", "-C", str(project), "--orchestrator-endpoint",
                       cloud.url, "--orchestrator-model", "big", "--endpoint", worker.url,
                       "--approve", "all", "--json", home=openjet_home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "session" and kinds[-1] == "done" and lines[-1]["reason"] == "done"
    assert kinds.count("cloud") == 6 and "tool_call" in kinds and "report" in kinds
    share = lines[-1]["accounting"]["share"]
    assert 0 < share < 1 and lines[-1]["accounting"]["orchestrator_tokens"] == 60
    shown = openjet("sessions", "show", lines[0]["session_id"], home=openjet_home)
    assert f"Orchestrator {round(share * 100)}%" in shown.stdout
    refused = openjet("slipstream", "x", "-C", str(project), home=openjet_home)
    assert refused.returncode == 2 and "ask" in refused.stderr  # no terminal to approve on
    missing = openjet("slipstream", home=openjet_home)
    assert missing.returncode == 2 and "give a TASK" in missing.stderr

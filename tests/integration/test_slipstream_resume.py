"""Stopping and resuming Slipstream: a cancel during a cloud call, a failing local worker."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from agent.api import AgentManager
from agent.slipstream import Slipstream
from agent.slipstream_events import (
    CloudActivity,
    CloudFailed,
    ReviewVerdict,
    RunFinished,
    SlipstreamEvent,
    StepStarted,
)
from tests.integration.test_slipstream_e2e import PLAN, drive, make_project, scripted_run
from tests.support.scripted_server import ScriptedServer

ONE_STEP = {"steps": PLAN["steps"][:1]}
ACCEPT, DONE = '{"verdict": "accept"}', '{"verdict": "done", "summary": "ok"}'
WORKER: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "a\n"}}]},
    {"content": "Wrote a.txt.\nOpen problems: none"},
]


def roles(manager: AgentManager, run_id: str) -> list[str]:
    return [m["role"] for _, m in manager.store.messages(run_id)]


async def test_cancel_during_a_cloud_call_then_resume_resends_it_once(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    cloud_script = [{"content": json.dumps(ONE_STEP), "first_byte_delay": 3}]
    with (
        ScriptedServer(cloud_script, tmp_path / "cloud") as cloud,
        ScriptedServer(WORKER, tmp_path / "worker") as worker,
    ):
        manager = AgentManager()
        run = scripted_run(manager, project, "write a.txt", cloud, worker)
        asyncio.get_running_loop().call_later(0.5, run.cancel)
        started = time.monotonic()
        events: list[SlipstreamEvent] = [event async for event in run.run()]
        assert time.monotonic() - started < 2.5  # did not wait for the 3 s answer
        assert [type(e) for e in events] == [CloudActivity, CloudActivity, RunFinished]
        assert [e.active for e in events if isinstance(e, CloudActivity)] == [True, False]
        assert isinstance(events[-1], RunFinished) and events[-1].reason == "cancelled"
        assert roles(manager, run.id) == ["user"] and manager.store.get(run.id).status == "idle"

        cloud.add([{"content": json.dumps(ONE_STEP)}, {"content": ACCEPT}, {"content": DONE}])
        resumed = Slipstream(manager).resume(run.id)
        events = await drive(resumed)
        assert isinstance(events[-1], RunFinished) and events[-1].reason == "done"
        assert roles(manager, run.id) == ["user", "assistant"] * 3  # the request is not doubled
        assert len(cloud.requests()) == 4
        await resumed.aclose()
        await manager.aclose()


async def test_a_failing_local_worker_stops_the_run_and_resume_retries_the_step(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path)
    cloud_script = [{"content": json.dumps(ONE_STEP)}, {"content": ACCEPT}, {"content": DONE}]
    with (
        ScriptedServer(cloud_script, tmp_path / "cloud") as cloud,
        ScriptedServer([{"status": 400, "error": "model exploded"}], tmp_path / "worker") as worker,
    ):
        manager = AgentManager()
        run = scripted_run(manager, project, "write a.txt", cloud, worker)
        events = await drive(run)
        (first,) = [e for e in events if isinstance(e, StepStarted)]
        finished = events[-1]
        assert isinstance(finished, RunFinished) and finished.reason == "error"
        assert "local worker of step 1 failed" in finished.message
        assert "model exploded" in finished.message
        assert len(cloud.requests()) == 1  # nothing was sent for review
        assert manager.store.get(run.id).status == "error"

        worker.add(WORKER)
        events = await drive(Slipstream(manager).resume(run.id))
        assert isinstance(events[-1], RunFinished) and events[-1].reason == "done"
        (again,) = [e for e in events if isinstance(e, StepStarted)]
        assert (again.index, again.attempt, again.worker_id) == (0, 1, first.worker_id)
        assert (project / "a.txt").read_text() == "a\n"
        assert len(cloud.requests()) == 3 and cloud.problems() == []
        await manager.aclose()


async def test_after_a_cloud_failure_a_resume_can_use_the_orchestrator_again(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path)
    cloud_script = [{"content": "no plan today"}, {"content": "still no plan"}]
    with (
        ScriptedServer(cloud_script, tmp_path / "cloud") as cloud,
        ScriptedServer(WORKER, tmp_path / "worker") as worker,
    ):
        manager = AgentManager()
        run = scripted_run(manager, project, "write a.txt", cloud, worker)
        events: list[SlipstreamEvent] = []
        async for event in run.run():  # the person stops when told the cloud failed
            events.append(event)
            if isinstance(event, CloudFailed):
                run.cancel()
        assert isinstance(events[-1], RunFinished) and events[-1].reason == "cancelled"

        cloud.add([{"content": ACCEPT}, {"content": DONE}])
        events = await drive(Slipstream(manager).resume(run.id, retry_cloud=True))
        assert isinstance(events[-1], RunFinished) and events[-1].reason == "done"
        verdicts = [e.verdict for e in events if isinstance(e, ReviewVerdict)]
        assert verdicts == ["accept"]  # reviewed by the orchestrator, not accepted locally
        requests = cloud.requests()
        assert len(requests) == 4 and "Report for step 1" in requests[2]["messages"][-1]["content"]
        assert roles(manager, run.id) == ["user", "assistant"] * 4
        await manager.aclose()


async def test_approval_mode_changed_mid_run_reaches_later_workers_and_resume(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path)
    with (
        ScriptedServer([{"content": json.dumps(ONE_STEP)}], tmp_path / "cloud") as cloud,
        ScriptedServer(WORKER, tmp_path / "worker") as worker,
    ):
        manager = AgentManager()
        run = scripted_run(manager, project, "write a.txt", cloud, worker, approval="ask")
        run.set_approval_mode("all")  # before the worker exists: it must start with "all"
        cloud.add([{"content": ACCEPT}, {"content": DONE}])
        events = await drive(run)
        assert isinstance(events[-1], RunFinished) and events[-1].reason == "done"
        (project / "a.txt").read_text()  # written without asking: the worker ran in "all"
        workers = {e.worker_id for e in events if isinstance(e, StepStarted)}
        assert [manager.store.get(w).approval for w in workers] == ["all"]
        assert Slipstream(manager).resume(run.id).settings["approval"] == "all"

"""Slipstream when the cloud fails: garbage, timeouts, rate limits, a rejected key — the session
stays consistent, the person is told, the local side goes on alone; the key never leaks."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent.api import AgentManager
from agent.slipstream import Slipstream, SlipstreamSpec
from agent.slipstream_cloud import CloudError, OrchestratorClient
from agent.slipstream_events import CloudFailed, ReviewVerdict, RunFinished, StepStarted
from openjet.config import update_values
from openjet.paths import config_file
from tests.integration.test_slipstream_e2e import PLAN, drive, make_project, scripted_run
from tests.support.memory_keyring import MemoryKeyring
from tests.support.scripted_server import ScriptedServer

KEY = "sk-or-v1-TESTKEY0123456789abcdef"
ONE_STEP = {"steps": PLAN["steps"][:1]}
WORKER_ONE_STEP = [
    {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "greet.py", "content": "x = 1\n"}}
        ]
    },
    {"content": "Wrote greet.py.\nOpen problems: none"},
]


def roles(manager: AgentManager, run_id: str) -> list[str]:
    return [m["role"] for _, m in manager.store.messages(run_id)]


async def test_garbage_plan_twice_lets_the_local_model_do_the_task(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    garbage = [{"content": "Sure! Here is my plan: do it well."}, {"content": '{"steps": []}'}]
    with (
        ScriptedServer(garbage, tmp_path / "cloud") as cloud,
        ScriptedServer(WORKER_ONE_STEP, tmp_path / "worker") as worker,
    ):
        manager = AgentManager()
        run = scripted_run(manager, project, "make greet.py", cloud, worker)
        events = await drive(run)
        requests = cloud.requests()
        worker_first = worker.requests()[0]["messages"][1]["content"]

    failures = [e for e in events if isinstance(e, CloudFailed)]
    assert len(failures) == 1 and failures[0].continuing_locally
    assert "unusable twice" in failures[0].message and "non-empty list" in failures[0].message
    assert len(requests) == 2  # one correction, then give up
    assert "could not be used" in requests[1]["messages"][-1]["content"]
    assert "make greet.py" in worker_first  # the local worker got the whole task
    assert [(e.index, e.verdict) for e in events if isinstance(e, ReviewVerdict)] == [(0, "local")]
    assert isinstance(events[-1], RunFinished) and events[-1].reason == "local_only"
    assert (project / "greet.py").read_text() == "x = 1\n"
    assert roles(manager, run.id) == ["user", "assistant", "user", "assistant"]
    assert manager.store.get(run.id).status == "local_only"
    await run.aclose()
    await manager.aclose()


async def test_one_bad_review_is_corrected_then_a_timeout_goes_local(tmp_path: Path) -> None:
    update_values({"slipstream.timeout_s": 1})
    project = make_project(tmp_path)
    cloud_script = [
        {"content": f"Plan:\n```json\n{json.dumps(ONE_STEP)}\n```"},
        {"content": '{"verdict": "maybe"}'},
        {"content": '{"verdict": "accept"}'},
        {"content": '{"verdict": "done", "summary": "x"}', "first_byte_delay": 3},
    ]
    with (
        ScriptedServer(cloud_script, tmp_path / "cloud") as cloud,
        ScriptedServer(WORKER_ONE_STEP, tmp_path / "worker") as worker,
    ):
        manager = AgentManager()
        run = scripted_run(manager, project, "make greet.py", cloud, worker)
        started = time.monotonic()
        events = await drive(run)
        elapsed = time.monotonic() - started
        assert len(cloud.requests()) == 4 and worker.problems() == []

    assert [(e.index, e.verdict) for e in events if isinstance(e, ReviewVerdict)] == [(0, "accept")]
    failures = [e.message for e in events if isinstance(e, CloudFailed)]
    assert len(failures) == 1 and "did not answer within 1s" in failures[0]
    assert isinstance(events[-1], RunFinished) and events[-1].reason == "local_only"
    assert elapsed < 10
    # plan, bad review + correction + review, final request without an answer
    assert roles(manager, run.id) == ["user", "assistant"] * 3 + ["user"]
    kinds = [k for k, _ in manager.store.events(run.id)]
    assert "slipstream_invalid_reply" in kinds and kinds.count("slipstream_local_only") == 1
    # Resuming a finished run does nothing more.
    again = await drive(Slipstream(manager).resume(run.id))
    assert [type(e) for e in again] == [RunFinished]
    await run.aclose()
    await manager.aclose()


class RateLimited:
    """A loopback endpoint that answers 429 with `Retry-After` a number of times, then a plan."""

    def __init__(self, retry_after: str, times: int) -> None:
        self.retry_after, self.left, self.hits = retry_after, times, 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                owner.hits += 1
                if owner.left > 0:
                    owner.left -= 1
                    self._send(429, {"error": {"message": "slow down"}}, owner.retry_after)
                else:
                    body = {"choices": [{"message": {"content": json.dumps(ONE_STEP)}}]}
                    self._send(200, body, None)

            def _send(self, status: int, body: dict[str, Any], retry_after: str | None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if retry_after:
                    self.send_header("retry-after", retry_after)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_rate_limit_retry_after_is_honoured_and_bounded() -> None:
    server = RateLimited("1", times=1)
    client = OrchestratorClient(server.url, "m", max_wait_s=5)
    started = time.monotonic()
    reply = await client.chat([{"role": "user", "content": "plan"}])
    assert time.monotonic() - started >= 0.95 and server.hits == 2
    assert json.loads(reply.content) == ONE_STEP and reply.estimated  # no usage: counted here
    server.close()

    server = RateLimited("3600", times=5)
    client = OrchestratorClient(server.url, "m", max_wait_s=5)
    started = time.monotonic()
    with pytest.raises(CloudError, match="asks to wait 3600s") as caught:
        await client.chat([{"role": "user", "content": "plan"}])
    assert caught.value.kind == "rate_limited" and time.monotonic() - started < 2
    await client.aclose()
    server.close()


async def test_the_key_goes_only_in_the_header_and_never_into_files_or_messages(
    tmp_path: Path, memory_keyring: MemoryKeyring, openjet_home: Path
) -> None:
    project = make_project(tmp_path)
    cloud_script = [
        {"content": json.dumps(ONE_STEP)},
        {"status": 401, "error": f"invalid API key {KEY} for this account"},
    ]
    with (
        ScriptedServer(cloud_script, tmp_path / "cloud") as cloud,
        ScriptedServer(WORKER_ONE_STEP, tmp_path / "worker") as worker,
    ):
        update_values({"profiles.cloud.endpoint": cloud.url, "profiles.cloud.model": "big",
                       "slipstream.profile": "cloud"})  # fmt: skip
        memory_keyring.set_password("openjet", "cloud", KEY)
        manager = AgentManager()
        spec = SlipstreamSpec(project, "make greet.py", worker_endpoint=worker.url, approval="all")
        run = Slipstream(manager).start(spec)
        events = await drive(run)
        await run.aclose()
        await manager.aclose()
        cloud_headers, worker_headers = cloud.headers(), worker.headers()

    assert all(h.get("authorization") == f"Bearer {KEY}" for h in cloud_headers)
    assert all("authorization" not in h for h in worker_headers)  # the local model gets no key
    failure = next(e for e in events if isinstance(e, CloudFailed))
    assert "401" in failure.message and "***" in failure.message
    assert isinstance(events[-1], RunFinished) and events[-1].reason == "local_only"
    assert [e.index for e in events if isinstance(e, StepStarted)] == [0]
    assert KEY not in repr(events)
    leaked = [p for p in openjet_home.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []  # config, sessions.db (+ WAL), snapshots, logs
    assert config_file().is_file() and (openjet_home / "data").exists()  # they were scanned

"""A scripted OpenAI-compatible model server for agent and TUI tests: a real HTTP process on
loopback that replays a list of responses and records every request it receives.

Each script entry answers one `POST /v1/chat/completions`, in order:

    {"content": "text", "reasoning": "thoughts",
     "tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}, "id": "optional"}],
     "status": 503, "error": "busy",        # answer with an HTTP error instead (retry tests)
     "first_byte_delay": 0.5,               # seconds before the response starts
     "chunk_delay": 0.05,                   # seconds between streamed chunks
     "hang": true,                          # stream the content, then never finish
     "break": true,                         # stream the content, then drop the connection
     "whole": true,                         # answer with one JSON body even when asked to stream
     "expect": {"last_role": "tool", "last_contains": "exit code 0"},   # checked, see problems
     "match": "task A"}                     # only for requests whose first user message has it

Entries with a `match` let several agents share one server: each request takes the first
remaining entry whose `match` occurs in its first user message (no `match`: any request).

`GET /_requests` returns the recorded request bodies, `GET /_headers` their headers, `GET /_problems` the failed `expect`s and
requests past the end of the script, `POST /_script` appends entries, `GET /_disconnects` counts
streams the client closed early. Use `ScriptedServer` from a test; run this file directly to
start a server by hand: `python scripted_server.py script.json` prints `PORT <n>`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx


class ScriptState:
    def __init__(
        self, script: list[dict[str, Any]], model_entry: dict[str, Any] | None = None
    ) -> None:
        self.script = list(script)
        self.model_entry = model_entry or {"id": "scripted-model", "object": "model"}
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.problems: list[str] = []
        self.disconnects = 0

    def next_entry(self, body: dict[str, Any]) -> dict[str, Any] | None:
        self.requests.append(body)
        if not self.script:
            self.problems.append(f"request {len(self.requests)} came after the script ended")
            return None
        first_user: dict[str, Any] = next(
            (m for m in body.get("messages", []) if m.get("role") == "user"), {}
        )
        index = next(
            (
                i
                for i, e in enumerate(self.script)
                if e.get("match", "") in str(first_user.get("content"))
            ),
            None,
        )
        if index is None:
            self.problems.append(f"request {len(self.requests)}: no script entry matches it")
            return None
        entry = self.script.pop(index)
        self._check(entry.get("expect") or {}, body)
        return entry

    def _check(self, expect: dict[str, Any], body: dict[str, Any]) -> None:
        messages = body.get("messages") or [{}]
        last = messages[-1]
        number = len(self.requests)
        if "last_role" in expect and last.get("role") != expect["last_role"]:
            self.problems.append(
                f"request {number}: last role {last.get('role')!r}, expected {expect['last_role']!r}"
            )
        wanted = expect.get("last_contains")
        if wanted and wanted not in str(last.get("content")):
            self.problems.append(
                f"request {number}: last message lacks {wanted!r}: {str(last.get('content'))[:300]!r}"
            )
        if "n_messages" in expect and len(messages) != expect["n_messages"]:
            self.problems.append(
                f"request {number}: {len(messages)} messages, expected {expect['n_messages']}"
            )


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


def _tool_calls(entry: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for i, call in enumerate(entry.get("tool_calls") or []):
        arguments = call.get("arguments", {})
        calls.append(
            {
                "index": i,
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "name": call["name"],
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            }
        )
    return calls


def _pieces(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


async def _stream(entry: dict[str, Any], model: str, prompt_tokens: int) -> AsyncIterator[str]:
    delay = float(entry.get("chunk_delay", 0.0))
    n_chunks = 0
    yield _chunk(model, {"role": "assistant", "content": ""})
    for kind, text in (
        ("reasoning_content", entry.get("reasoning", "")),
        ("content", entry.get("content", "")),
    ):
        for piece in _pieces(text):
            n_chunks += 1
            yield _chunk(model, {kind: piece})
            await asyncio.sleep(delay)
    if entry.get("hang"):
        while True:
            await asyncio.sleep(3600)
    if entry.get("break"):
        raise ConnectionAbortedError("scripted break")  # the server drops the connection
    calls = _tool_calls(entry)
    for call in calls:
        head = {
            "index": call["index"],
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        yield _chunk(model, {"tool_calls": [head]})
        for piece in _pieces(call["arguments"], 16):
            n_chunks += 1
            yield _chunk(
                model, {"tool_calls": [{"index": call["index"], "function": {"arguments": piece}}]}
            )
            await asyncio.sleep(delay)
    yield _chunk(model, {}, "tool_calls" if calls else "stop")
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": n_chunks,
        "total_tokens": prompt_tokens + n_chunks,
    }
    yield f"data: {json.dumps({'id': 'chatcmpl-scripted', 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"


def _whole(entry: dict[str, Any], model: str) -> dict[str, Any]:
    calls = _tool_calls(entry)
    message: dict[str, Any] = {"role": "assistant", "content": entry.get("content", "")}
    if entry.get("reasoning"):
        message["reasoning_content"] = entry["reasoning"]
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def build_app(state: ScriptState) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def chat(request: Request) -> Response:
        body = await request.json()
        state.headers.append(dict(request.headers))
        entry = state.next_entry(body)
        if entry is None:
            return JSONResponse(
                {"error": {"message": "script exhausted", "type": "server_error"}}, 500
            )
        await asyncio.sleep(float(entry.get("first_byte_delay", 0.0)))
        if "status" in entry:
            return JSONResponse(
                {"error": {"message": entry.get("error", "scripted error")}}, int(entry["status"])
            )
        model = str(body.get("model") or "scripted")
        if not body.get("stream") or entry.get("whole"):
            return JSONResponse(_whole(entry, model))
        prompt_tokens = len(json.dumps(body.get("messages"))) // 4

        async def guarded() -> AsyncIterator[str]:
            try:
                async for piece in _stream(entry, model, prompt_tokens):
                    yield piece
            except asyncio.CancelledError:
                state.disconnects += 1
                raise

        return StreamingResponse(guarded(), media_type="text/event-stream")

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [state.model_entry]})

    async def requests(_: Request) -> Response:
        return JSONResponse(state.requests)

    async def headers(_: Request) -> Response:
        return JSONResponse(state.headers)

    async def problems(_: Request) -> Response:
        return JSONResponse(state.problems)

    async def disconnects(_: Request) -> Response:
        return JSONResponse(state.disconnects)

    async def add_script(request: Request) -> Response:
        state.script.extend(await request.json())
        return JSONResponse({"queued": len(state.script)})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/_requests", requests),
            Route("/_problems", problems),
            Route("/_headers", headers),
            Route("/_disconnects", disconnects),
            Route("/_script", add_script, methods=["POST"]),
        ]
    )


def serve(script_file: str) -> None:
    import uvicorn

    model_file = Path(script_file).with_suffix(".model.json")
    model_entry = json.loads(model_file.read_text()) if model_file.exists() else None
    state = ScriptState(json.loads(Path(script_file).read_text()), model_entry)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(build_app(state), log_level="warning", lifespan="off")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


class ScriptedServer:
    """Starts the server as its own process; use as a context manager."""

    def __init__(
        self, script: list[Any], workdir: Path, model_entry: dict[str, Any] | None = None
    ) -> None:
        """`model_entry`: what /v1/models lists (default: a bare `scripted-model`)."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.script_file = workdir / f"script-{uuid.uuid4().hex[:6]}.json"
        self.script_file.write_text(json.dumps(script))
        if model_entry is not None:
            self.script_file.with_suffix(".model.json").write_text(json.dumps(model_entry))
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI base URL (…/v1) to give the agent."""
        return f"{self.base}/v1"

    def __enter__(self) -> ScriptedServer:
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(self.script_file)], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"scripted server did not start: {line!r}")
        self.port = int(line.split()[1])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.base}/_problems", timeout=1).raise_for_status()
                return self
            except httpx.HTTPError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("scripted server did not answer")

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def _get(self, path: str) -> Any:
        return httpx.get(f"{self.base}{path}", timeout=10).json()

    def requests(self) -> list[dict[str, Any]]:
        return list(self._get("/_requests"))

    def headers(self) -> list[dict[str, str]]:
        return list(self._get("/_headers"))

    def problems(self) -> list[str]:
        return list(self._get("/_problems"))

    def disconnects(self) -> int:
        return int(self._get("/_disconnects"))

    def add(self, entries: list[dict[str, Any]]) -> None:
        httpx.post(f"{self.base}/_script", json=entries, timeout=10).raise_for_status()

    def wait_for_requests(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.requests()
            if len(seen) >= n:
                return seen
            time.sleep(0.05)
        raise AssertionError(
            f"the scripted server got {len(self.requests())} requests, expected {n}"
        )


if __name__ == "__main__":
    serve(sys.argv[1])

"""`openjet serve` and `openjet top` as real subprocesses, and the engine against llama-server:
greedy output of `openjet serve --backend cpu` equals llama-server's on the same f32 synthetic
GGUF, and `--backend llama-server` serves the same API surface through a real llama-server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from engine.llama_server import free_port
from openjet.config import update_values
from tests.integration.test_server import tiny_model_path

OPENJET = [sys.executable, "-m", "openjet"]
PROMPTS = [[11, 523, 99, 1200, 7, 64, 301], [1500, 3, 77, 42, 1999, 8, 640, 12, 5]]


@contextmanager
def openjet_serve(*args: str, log: Path) -> Iterator[str]:
    """Run `openjet serve ARGS` until the block ends; yields its base URL once healthy."""
    port = free_port()
    command = [*OPENJET, "serve", "--model", str(tiny_model_path()), "--port", str(port), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy()
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "openjet serve did not become healthy"
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield base
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def greedy_tokens(base: str, llama: bool, n: int = 16) -> list[list[int]]:
    """Greedy continuations of PROMPTS as token ids (llama-server: its native /completion)."""
    out = []
    for prompt in PROMPTS:
        body: dict[str, Any] = {"prompt": prompt, "temperature": 0, "return_tokens": True}
        if llama:
            body.update(n_predict=n, top_k=1)
            response = httpx.post(f"{base}/completion", json=body, timeout=300)
            assert response.status_code == 200, response.text
            out.append(list(response.json()["tokens"]))
        else:
            response = httpx.post(
                f"{base}/v1/completions", json={**body, "max_tokens": n}, timeout=300
            )
            assert response.status_code == 200, response.text
            out.append(list(response.json()["choices"][0]["tokens"]))
    return out


def test_serve_cpu_answers_and_top_reads_it(tmp_path: Path) -> None:
    with openjet_serve("--backend", "cpu", "--slots", "2", log=tmp_path / "serve.log") as base:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}
        reply = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4
        slots = httpx.get(f"{base}/v1/slots").json()
        assert slots["engine"]["kind"] == "reference" and len(slots["slots"]) == 2
        top = subprocess.run(
            [*OPENJET, "top", "--once", "--endpoint", f"{base}/v1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert top.returncode == 0, top.stderr
    assert "reference" in top.stdout and "tok/s" in top.stdout and "idle" in top.stdout


def test_serve_rejects_bad_flags_with_a_message(tmp_path: Path) -> None:
    bad = subprocess.run(
        [*OPENJET, "serve", "--model", str(tmp_path / "none.gguf"), "--backend", "cpu"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "model file not found" in bad.stderr
    slots = subprocess.run(
        [*OPENJET, "serve", "--model", str(tiny_model_path()), "--slots", "9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert slots.returncode == 2 and "--slots" in slots.stderr
    top = subprocess.run(
        [*OPENJET, "top", "--once", "--endpoint", f"http://127.0.0.1:{free_port()}/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert top.returncode == 2 and "no engine answers" in top.stderr


def test_greedy_output_equals_llama_server(
    tmp_path: Path, llama_server: Callable[..., Any]
) -> None:
    args = ["-c", "1024", "-np", "1", "-t", "2", "-fa", "off", "-ctk", "f32", "-ctv", "f32"]
    with llama_server(tiny_model_path(), extra_args=args) as server:
        theirs = greedy_tokens(server.base_url, llama=True)
    with openjet_serve("--backend", "cpu", log=tmp_path / "serve.log") as base:
        ours = greedy_tokens(base, llama=False)
    assert ours == theirs
    assert all(tokens for tokens in ours)


def test_llama_server_backend_serves_the_same_api(tmp_path: Path, llama_server_bin: Path) -> None:
    update_values({"engine.llama_server_path": str(llama_server_bin)})
    with openjet_serve(
        "--backend", "llama-server", "--kv-tokens", "2048", log=tmp_path / "serve.log"
    ) as base:
        slots = httpx.get(f"{base}/v1/slots").json()
        assert slots["engine"]["kind"] == "llama-server" and slots["slots"]
        bad = httpx.post(f"{base}/v1/chat/completions", content=b"{oops")
        assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]
        unknown = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
        )
        assert unknown.status_code == 404
        body = {"prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0, "stream": True}
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=120) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert lines and lines[-1] == "data: [DONE]"
        assert httpx.get(f"{base}/v1/models").json()["data"][0]["id"] == tiny_model_path().name

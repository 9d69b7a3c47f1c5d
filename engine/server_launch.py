"""Starting the engine server: pick the backend, load the model, build the scheduler, run uvicorn.

`--backend auto` takes the CUDA backend when CuPy sees a GPU and the CUDA backend loads, and
otherwise falls back to llama-server, recording why; `cpu` is the numpy reference backend (for
small models and tests); `llama-server` starts a real llama-server and proxies it
(`engine/server_proxy.py`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from engine.backend import Backend
from engine.scheduler import Scheduler, SchedulerConfig
from engine.server import ServedModel, create_app

BACKEND_CHOICES = ("auto", "cuda", "cpu", "llama-server")


class LaunchError(RuntimeError):
    """The server cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class LaunchOptions:
    model: Path
    backend: str = "auto"
    host: str = "127.0.0.1"
    port: int = 18080
    slots: int = 4
    kv_tokens: int | None = None  # None: the backend's default (free VRAM on CUDA)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    llama_server_path: str = ""
    fallback_reason: str | None = None  # why setup chose llama-server, shown in /v1/slots


def cuda_unavailable_reason() -> str | None:
    """None when the CUDA backend can run here, else why not (in words)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device found"
    except Exception as exc:  # CuPy missing, driver missing, ...
        return f"CUDA is not usable: {type(exc).__name__}: {exc}"
    try:
        import engine.cuda.backend  # noqa: F401
    except Exception as exc:
        return f"the CUDA backend failed to load: {type(exc).__name__}: {exc}"
    return None


def load_backend(kind: str, options: LaunchOptions) -> Backend:
    """Load the model on the CPU reference or the CUDA backend."""
    extra: dict[str, Any] = {"n_slots": options.slots}
    if options.kv_tokens:
        extra["kv_tokens"] = options.kv_tokens
    if kind == "cpu":
        from engine.reference_backend import ReferenceBackend

        return ReferenceBackend.from_gguf(options.model, **extra)
    from engine.cuda.backend import CudaBackend

    extra["use_mtp"] = "mtp" in options.scheduler.speculation  # no MTP work when it drafts none
    backend: Backend = CudaBackend.from_gguf(options.model, **extra)
    return backend


def resolve_backend(requested: str) -> tuple[str, str | None]:
    """(backend kind to use, fallback reason or None)."""
    if requested not in BACKEND_CHOICES:
        raise LaunchError(
            f"unknown backend {requested!r}: choose one of {', '.join(BACKEND_CHOICES)}"
        )
    if requested != "auto":
        return requested, None
    reason = cuda_unavailable_reason()
    return ("cuda", None) if reason is None else ("llama-server", reason)


def served_model(
    backend: Backend, options: LaunchOptions, fallback: str | None = None
) -> ServedModel:
    special = getattr(backend.tokenizer, "special_ids", {}) or {}
    boundaries = frozenset(i for text, i in special.items() if text == "<|im_start|>")
    scheduler = Scheduler(backend, options.scheduler, boundary_tokens=boundaries)
    path = options.model
    return ServedModel(scheduler, path.name, frozenset({path.stem, str(path)}), fallback)


def build_app(options: LaunchOptions) -> tuple[Starlette, str, str | None]:
    """The app to serve, the backend kind actually used, and the fallback reason."""
    if not options.model.is_file():
        raise LaunchError(f"model file not found: {options.model}")
    kind, reason = resolve_backend(options.backend)
    reason = reason or (options.fallback_reason if kind == "llama-server" else None)
    if kind == "llama-server":
        from engine.server_proxy import create_proxy_app

        return create_proxy_app(options, reason), kind, reason
    try:
        backend = load_backend(kind, options)
    except Exception as exc:  # a bad file, or a device that cannot take the model
        problem = f"cannot load {options.model} on the {kind} backend: {type(exc).__name__}: {exc}"
        if options.backend != "auto":
            raise LaunchError(problem) from exc
        from engine.server_proxy import create_proxy_app  # auto: fall back, saying why

        return create_proxy_app(options, problem), "llama-server", problem
    return create_app(served_model(backend, options, reason)), kind, reason


def run(options: LaunchOptions) -> None:
    from engine.llama_server import port_in_use

    if port_in_use(options.host, options.port):
        raise LaunchError(
            f"port {options.port} on {options.host} is already in use "
            "(another engine? `openjet top` shows what serves there); choose another with --port"
        )
    app, _, _ = build_app(options)
    uvicorn.run(app, host=options.host, port=options.port, log_level="warning")


@contextmanager
def serving_in_thread(app: Starlette, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `app` on a free port of `host` from a background thread (tests and benchmarks
    that drive the real server in-process); yields the base URL, stops the server on exit."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise LaunchError("the server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)

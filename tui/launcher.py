"""Deciding what the TUI talks to, running setup, and starting/stopping `openjet serve`.

Headless (no textual). `resolve_target` turns `--endpoint/--model/--profile` and the config
into a `Target`: either any OpenAI-compatible endpoint (no setup, no engine of ours) or our
own engine, which `EngineProcess` starts as a subprocess when it does not answer yet — its
output goes to a log file whose path every error names. What we start we also stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

import httpx

from openjet import paths
from openjet.config import Config

LOCAL_PROFILE = "local"  # the profile of our own engine, implicit when the config has none
ENGINE_START_TIMEOUT_S = 900.0  # a 27B model can take minutes to load and warm up


class LaunchError(RuntimeError):
    """The TUI cannot start as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    """Where the agents send their requests, and whether that server is ours to run."""

    endpoint: str  # the resolved base URL (shown, and polled for engine stats)
    model: str | None  # --model: overrides the profile's model name
    profile: str | None  # None when --endpoint was given
    manage_engine: bool  # True: our `openjet serve` on the configured port

    @property
    def explicit_endpoint(self) -> str | None:
        """The endpoint agents are told to use, when it does not come from a profile."""
        return self.endpoint if self.profile is None else None


def engine_endpoint(config: Config) -> str:
    """The base URL of our engine server from the config (a wildcard bind is reached locally)."""
    host = str(config.get("engine.host"))
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{config.get('engine.port')}/v1"


def _same_server(a: str, b: str) -> bool:
    left, right = urlparse(a), urlparse(b)
    return (left.hostname, left.port) == (right.hostname, right.port)


def resolve_target(
    config: Config, endpoint: str | None, model: str | None, profile: str | None
) -> Target:
    """`--endpoint` wins; then `--profile` (or the config's default profile); then our engine.

    The profile "local" needs no table in the config: it is our engine (as in agent/profiles).
    """
    if endpoint:
        parsed = urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise LaunchError(f"--endpoint {endpoint!r}: expected a URL like http://host:8080/v1")
        return Target(endpoint.rstrip("/"), model, None, manage_engine=False)
    profiles = config.profiles()
    name = profile or str(config.get("agent.profile"))
    if name not in profiles and name != LOCAL_PROFILE:
        known = ", ".join(sorted({*profiles, LOCAL_PROFILE}))
        raise LaunchError(f"no profile {name!r} in {config.path} (profiles: {known})")
    ours = engine_endpoint(config)
    table = profiles.get(name, {})
    url = str(table.get("endpoint") or ours).rstrip("/")
    return Target(url, model, name, manage_engine=_same_server(url, ours))


def run_setup() -> int:
    """Run `openjet setup` in this terminal (before the TUI takes it over); its exit code."""
    return subprocess.call([sys.executable, "-m", "openjet", "setup"])


def server_root(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def engine_answers(endpoint: str, client: httpx.AsyncClient) -> bool:
    """True when an OpenAI-compatible server answers at `endpoint` (its /health, or /v1/models)."""
    for url in (server_root(endpoint) + "/health", endpoint.rstrip("/") + "/models"):
        try:
            response = await client.get(url, timeout=2.0)
        except httpx.HTTPError:
            continue
        if response.status_code == 200:
            return True
    return False


def engine_log_path() -> Path:
    return paths.data_dir() / "logs" / "engine.log"


class EngineProcess:
    """One `openjet serve` subprocess with its output in a log file."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self.command = command
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @classmethod
    def for_config(cls, config: Config) -> EngineProcess:
        command = [
            sys.executable,
            "-m",
            "openjet",
            "serve",
            "--port",
            str(config.get("engine.port")),
        ]
        return cls(command, engine_log_path())

    def start(self) -> None:
        if self.exit_code() is None and self._process is not None:
            raise LaunchError(f"the engine already runs (pid {self._process.pid})")
        self.stop()  # a retry: close the log of the attempt that failed
        paths.ensure_dir(self.log_path.parent)
        self._log = self.log_path.open("wb")
        try:
            # A session of its own: a Ctrl+C in the TUI's terminal does not reach the engine, and
            # stop() can end the engine together with anything it spawned (llama-server).
            self._process = subprocess.Popen(
                self.command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as exc:
            self._log.close()
            raise LaunchError(f"cannot start {' '.join(self.command)}: {exc}") from exc

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def exit_code(self) -> int | None:
        """The exit code once the process has ended, None while it runs (or before start)."""
        return self._process.poll() if self._process else None

    def log_tail(self, lines: int = 12) -> list[str]:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after `timeout` seconds."""
        process = self._process
        if process is not None and process.poll() is None:
            self._signal(process, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(process, signal.SIGKILL)
                process.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.killpg(process.pid, sig)

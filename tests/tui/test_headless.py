"""The TUI's headless helpers: slash parsing and completion, the grid, transcript rebuilding,
session search, /v1/slots parsing, target resolution and the engine subprocess."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from openjet.config import load_config, update_values
from tests.support.processes import pid_alive
from tui import slash
from tui.engine_monitor import EngineMonitor, is_local, parse_slots, slots_url
from tui.formatting import format_count, grid_shape, history_entries, session_matches
from tui.launcher import EngineProcess, LaunchError, resolve_target
from tui.slash import SlashError


def test_slash_parse_and_errors() -> None:
    assert slash.parse("/approve  auto-edits ") == slash.SlashCommand("approve", "auto-edits")
    assert slash.parse("/new fix the tests") == slash.SlashCommand("new", "fix the tests")
    assert slash.parse("/QUIT") == slash.SlashCommand("quit")
    with pytest.raises(SlashError, match="unknown command /nope"):
        slash.parse("/nope")
    with pytest.raises(SlashError, match="needs an argument"):
        slash.parse("/mode")
    with pytest.raises(SlashError, match="'turbo' is not one of normal, slipstream"):
        slash.parse("/mode turbo")
    with pytest.raises(SlashError, match="takes no argument"):
        slash.parse("/clear everything")


def test_slash_completion() -> None:
    assert slash.complete("/c") == "/compact"
    assert slash.candidates("/c") == ["/compact", "/clear"]
    assert slash.complete("/mode s") == "/mode slipstream"
    assert slash.complete("/approve a") == "/approve ask"
    assert slash.complete("/approve au") == "/approve auto-edits"
    assert slash.complete("/quit") is None
    assert slash.complete("hello") is None
    assert "/approve never|ask|auto-edits|all" in slash.hint("/appr")


@pytest.mark.parametrize(
    ("panes", "width", "height", "shape"),
    [(1, 80, 24, (1, 1)), (2, 160, 40, (2, 1)), (2, 100, 40, (1, 2)), (4, 160, 40, (2, 2)),
     (3, 130, 40, (2, 2)), (4, 300, 40, (4, 1)), (4, 80, 60, (1, 4))],
)  # fmt: skip
def test_grid_adapts_to_the_terminal(panes: int, width: int, height: int, shape: tuple) -> None:
    assert grid_shape(panes, width, height) == shape


def test_history_entries_join_tool_results() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "list"},
        {
            "role": "assistant",
            "content": "Sure.",
            "reasoning_content": "think",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "list_dir", "arguments": '{"path": "."}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "assistant", "content": "Done."},
    ]  # fmt: skip
    entries = history_entries(messages)
    assert [e.kind for e in entries] == ["user", "reasoning", "assistant", "tool", "assistant"]
    assert entries[3].arguments == {"path": "."} and entries[3].output == "a.py"


def test_session_search_by_title_folder_and_date() -> None:
    when = time.mktime((2026, 3, 14, 9, 30, 0, 0, 0, -1))
    assert session_matches("fix", "Fix the parser", "/src/app", when, when)
    assert session_matches("app parser", "Fix the parser", "/src/app", when, when)
    assert session_matches("2026-03-14", "x", "/src/app", when, when)
    assert not session_matches("2025", "x", "/src/app", when, when)
    assert format_count(131072) == "131K" and format_count(12345) == "12.3K"


def test_parse_slots_validates() -> None:
    payload: dict[str, Any] = {
        "engine": {"kind": "megakernel", "model": "m", "fallback_reason": None, "vram_used_bytes": 1,
                   "vram_total_bytes": 2, "kv_pool_tokens": 100, "kv_pool_used": 10, "tokens_per_second": 5.0},
        "slots": [{"id": 0, "state": "decode", "tokens_per_second": 5.0, "context_used": 3,
                   "context_limit": 9, "cached_tokens": 0, "drafts_proposed": 4, "drafts_accepted": 3,
                   "request_id": "r"}],
        "queued": 2,
    }  # fmt: skip
    stats = parse_slots(payload)
    assert stats.kind == "megakernel" and stats.queued == 2 and stats.draft_acceptance == 0.75
    payload["slots"][0]["context_used"] = "lots"
    with pytest.raises(ValueError, match="context_used"):
        parse_slots(payload)
    with pytest.raises(ValueError, match="'engine' object"):
        parse_slots([])
    assert slots_url("http://h:1/v1/") == "http://h:1/v1/slots"
    assert is_local("http://127.0.0.1:18080/v1") and is_local("http://localhost:8080")
    assert not is_local("https://openrouter.ai/api/v1") and not is_local("http://10.0.0.5/v1")
    assert slots_url("http://h:1") == "http://h:1/v1/slots"


async def test_monitor_reports_a_dead_endpoint() -> None:
    monitor = EngineMonitor("http://127.0.0.1:9/v1", timeout=1.0)
    async with httpx.AsyncClient() as client:
        reading = await monitor.poll(client)
    assert reading.stats is None and "no answer from http://127.0.0.1:9/v1/slots" in str(
        reading.problem
    )


def test_resolve_target() -> None:
    config = load_config()
    explicit = resolve_target(config, "http://10.0.0.5:8000/v1/", "qwen", None)
    assert (explicit.endpoint, explicit.model, explicit.manage_engine) == (
        "http://10.0.0.5:8000/v1",
        "qwen",
        False,
    )
    assert explicit.explicit_endpoint == "http://10.0.0.5:8000/v1"
    ours = resolve_target(config, None, None, None)
    assert (
        ours.endpoint == "http://127.0.0.1:18080/v1"
        and ours.manage_engine
        and ours.profile == "local"
    )
    assert ours.explicit_endpoint is None
    with pytest.raises(LaunchError, match="no profile 'cloud'"):
        resolve_target(config, None, None, "cloud")
    with pytest.raises(LaunchError, match="expected a URL"):
        resolve_target(config, "localhost:8080", None, None)
    config = update_values(
        {"profiles.cloud.endpoint": "https://openrouter.ai/api/v1", "profiles.cloud.model": "m"}
    )
    cloud = resolve_target(config, None, None, "cloud")
    assert cloud.endpoint == "https://openrouter.ai/api/v1" and not cloud.manage_engine


def test_engine_process_logs_and_stops_its_children(tmp_path: Path) -> None:
    # The "engine" spawns a child (as `openjet serve` spawns llama-server); stop() ends both.
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    engine = EngineProcess([sys.executable, "-c", script], tmp_path / "engine.log")
    engine.start()
    deadline = time.monotonic() + 10
    while not engine.log_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    child_pid = int(engine.log_tail()[-1].split()[1])
    assert engine.exit_code() is None
    engine.stop(timeout=5)
    assert engine.exit_code() is not None
    deadline = time.monotonic() + 5  # the signal reaches the child a moment later
    while pid_alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child_pid)


@pytest.mark.parametrize("module", ["slash", "formatting", "engine_monitor", "launcher"])
def test_headless_modules_do_not_import_textual(module: str) -> None:
    source = (Path(__file__).parents[2] / "tui" / f"{module}.py").read_text()
    assert "textual" not in {
        line.split()[1].split(".")[0]
        for line in source.splitlines()
        if line.startswith(("import ", "from "))
    }

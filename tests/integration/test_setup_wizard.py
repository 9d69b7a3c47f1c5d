"""`openjet setup` end to end on this machine: a local hub serves a synthetic model, simulated
hardware decides the path, and the llama-server fallback is started and asked for real.

The llama-server built by the `llama_server_bin` fixture is put on PATH, so setup reuses it
("reuse one on PATH") instead of building its own.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from engine.llama_server import LlamaServer
from engine.synthetic import write_synthetic
from openjet.cli import app
from openjet.config import load_config, update_values
from setup_wizard import model_download as dl
from setup_wizard.simulated import simulated
from setup_wizard.wizard import SetupOptions, models_dir, run_setup
from tests.integration.conftest import LocalHub


@pytest.fixture
def server_on_path(llama_server_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").symlink_to(llama_server_bin)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "llama-server"


@pytest.fixture
def busy_port() -> Iterator[socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    yield listener
    listener.close()


def quiet() -> Console:
    return Console(quiet=True)


def statuses(report_checks: list[dict[str, str]]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report_checks}


@pytest.mark.slow
def test_no_gpu_machine_ends_on_llama_server_and_rerun_skips_the_download(
    hub: LocalHub, server_on_path: Path
) -> None:
    runner = CliRunner()
    args = ["setup", "--yes", "--json", "--simulate-hardware", "no-gpu"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert report["engine"] == "llama-server" and report["gpu"] is None
    assert "no NVIDIA GPU" in report["fallback_reason"]
    got = statuses(report["checks"])
    assert got["model"] == "pass" and got["compatibility"] == "pass"
    assert got["llama-server"] == "pass" and got["test request"] == "pass"
    config = load_config()
    assert config.get("engine.kind") == "llama-server"
    assert config.get("engine.fallback_reason") == report["fallback_reason"]
    assert (
        config.get("engine.model_path") == report["model_path"] == str(models_dir() / dl.MODEL_FILE)
    )
    assert config.get("engine.llama_server_path") == str(server_on_path)
    assert 4096 <= config.get("engine.context_size") <= 16384 * 4
    downloads = hub.ranges()
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert hub.ranges() == downloads  # verified model reused: not fetched again
    assert statuses(json.loads(again.stdout)["checks"])["test request"] == "pass"


@pytest.mark.slow
def test_busy_port_is_reported_left_alone_and_another_chosen(
    hub: LocalHub, server_on_path: Path, busy_port: socket.socket
) -> None:
    taken = busy_port.getsockname()[1]
    update_values({"engine.port": taken})
    report = run_setup(SetupOptions(yes=True, hardware=simulated("16gb")), quiet())
    assert report.ok and report.engine == "llama-server"
    assert report.fallback_reason is not None and "24 GB" in report.fallback_reason
    port_check = next(c for c in report.checks if c.name == "port")
    assert port_check.status == "warn" and str(taken) in port_check.value
    chosen = load_config().get("engine.port")
    assert chosen != taken
    with socket.create_connection(("127.0.0.1", taken), timeout=5):
        pass  # the other program still listens


@pytest.mark.slow
def test_a_running_server_of_this_model_is_reused_and_keeps_running(
    tmp_path: Path, server_on_path: Path, llama_server_bin: Path
) -> None:
    model = write_synthetic(tmp_path / "mine.gguf", "tiny", "q8_0", 1)
    theirs = LlamaServer(llama_server_bin, model, extra_args=["-c", "256", "-np", "1", "-t", "1"])
    with theirs:
        update_values({"engine.port": theirs.port or 0})
        report = run_setup(
            SetupOptions(yes=True, model=model, hardware=simulated("no-gpu")), quiet()
        )
        assert report.ok, report.to_json()
        port_check = next(c for c in report.checks if c.name == "port")
        assert "already serves this model" in port_check.detail
        assert theirs.running()  # setup never stops what it did not start
    assert load_config().get("engine.port") == theirs.port


def test_too_little_free_disk_stops_before_any_download(hub: LocalHub, tmp_path: Path) -> None:
    hardware = replace(simulated("rtx3090"), disk_free_bytes=1024 * 1024)
    report = run_setup(SetupOptions(yes=True, hardware=hardware), quiet())
    assert not report.ok and report.engine is None
    got = {c.name: c.status for c in report.checks}
    assert got["disk"] == "fail" and got["model"] == "fail"
    assert hub.ranges() == [], hub.requests
    assert not (models_dir() / dl.MODEL_FILE).exists()
    assert not load_config().is_configured


def test_unusable_local_model_is_a_clear_failure(tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"\x00" * 100)
    result = CliRunner().invoke(
        app, ["setup", "--yes", "--json", "--model", str(junk), "--simulate-hardware", "no-gpu"]
    )
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert statuses(report["checks"])["compatibility"] == "fail" and report["engine"] is None
    assert junk.read_bytes() == b"\x00" * 100


def test_declining_the_download_in_the_prompt(hub: LocalHub) -> None:
    result = CliRunner().invoke(app, ["setup", "--simulate-hardware", "no-gpu"], input="n\n")
    assert result.exit_code == 1
    assert "Download" in result.output and "declined" in result.output
    assert hub.ranges() == []


def test_bad_arguments_and_broken_config(openjet_home: Path) -> None:
    runner = CliRunner()
    unknown = runner.invoke(app, ["setup", "--simulate-hardware", "rtx9999"])
    assert unknown.exit_code == 2 and "rtx3090" in unknown.output
    config_file = openjet_home / "config" / "config.toml"
    config_file.parent.mkdir(parents=True)
    config_file.write_text("engine = [broken")
    broken = runner.invoke(app, ["setup", "--yes", "--json", "--simulate-hardware", "no-gpu"])
    assert broken.exit_code == 1
    check = json.loads(broken.stdout)["checks"][0]
    assert check["name"] == "config" and "not valid TOML" in check["detail"]

"""`openjet login`, choosing the orchestrator per session, and `airgapped` refusing the cloud."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.api import AgentManager
from agent.profiles import ProfileError
from agent.slipstream import Slipstream, SlipstreamSpec, resolve_orchestrator
from openjet.cli import app
from openjet.config import update_values
from tests.support.memory_keyring import MemoryKeyring

KEY = "sk-or-v1-UNITKEY42"


def test_login_openrouter_stores_the_key_in_the_keyring_only(
    memory_keyring: MemoryKeyring, openjet_home: Path
) -> None:
    result = CliRunner().invoke(app, ["login", "openrouter"], input=KEY + "\n")
    assert result.exit_code == 0, result.output
    assert "saved the API key for openrouter (https://openrouter.ai/api/v1)" in result.output
    assert memory_keyring.saved == {("openjet", "openrouter"): KEY}
    assert KEY not in result.output
    assert not [
        p for p in openjet_home.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()
    ]


def test_login_refusals(memory_keyring: MemoryKeyring) -> None:
    runner = CliRunner()
    empty = runner.invoke(app, ["login"], input="\n")
    assert empty.exit_code == 2 and "no key given" in empty.output
    local = runner.invoke(app, ["login", "local"], input=KEY + "\n")
    assert local.exit_code == 2 and "needs no key" in local.output
    unknown = runner.invoke(app, ["login", "nope"], input=KEY + "\n")
    assert unknown.exit_code == 2 and "no profile named 'nope'" in unknown.output
    update_values({"airgapped": True})
    refused = runner.invoke(app, ["login"], input=KEY + "\n")
    assert refused.exit_code == 2 and "airgapped" in refused.output
    assert memory_keyring.saved == {}


def test_orchestrator_key_only_for_its_own_endpoint(memory_keyring: MemoryKeyring) -> None:
    memory_keyring.saved[("openjet", "openrouter")] = KEY
    manager = AgentManager()
    default = resolve_orchestrator(manager, None, None, "anthropic/claude")
    assert (default.name, default.endpoint, default.model) == (
        "openrouter", "https://openrouter.ai/api/v1", "anthropic/claude",
    )  # fmt: skip
    assert default.api_key == KEY and KEY not in repr(default)
    other = resolve_orchestrator(manager, None, "https://api.example.com/v1", None)
    assert other.endpoint == "https://api.example.com/v1" and other.api_key is None
    with pytest.raises(
        ProfileError, match=r"no API key for the orchestrator at https://api\.example"
    ):
        Slipstream(manager).start(
            SlipstreamSpec(Path.cwd(), "t", orchestrator_endpoint=other.endpoint)
        )
    memory_keyring.saved.clear()
    with pytest.raises(ProfileError, match="run `openjet login openrouter`"):
        Slipstream(manager).start(SlipstreamSpec(Path.cwd(), "task"))
    assert manager.list_sessions() == []
    update_values({"slipstream.model": "cfg-model"})
    assert resolve_orchestrator(AgentManager(), None, None, None).model == "cfg-model"
    manager.store.close()


def test_airgapped_refuses_cloud_orchestrators_and_remote_workers(tmp_path: Path) -> None:
    update_values({"airgapped": True})
    manager = AgentManager()
    slipstream = Slipstream(manager)
    with pytest.raises(ProfileError, match=r"openrouter\.ai.*airgapped"):
        slipstream.start(SlipstreamSpec(tmp_path, "task"))  # the default: OpenRouter
    with pytest.raises(ProfileError, match="airgapped"):
        slipstream.start(SlipstreamSpec(tmp_path, "task", orchestrator_endpoint="https://x.ai/v1"))
    with pytest.raises(ProfileError, match=r"10\.0\.0\.5.*airgapped"):
        slipstream.start(SlipstreamSpec(tmp_path, "task", orchestrator_endpoint="http://127.0.0.1:9/v1",
                                        worker_endpoint="http://10.0.0.5:8000/v1"))  # fmt: skip
    assert manager.list_sessions() == []  # nothing was started
    run = slipstream.start(
        SlipstreamSpec(tmp_path, "task", orchestrator_endpoint="http://localhost:9/v1")
    )
    assert run.orchestrator_endpoint == "http://localhost:9/v1"
    manager.store.close()


def test_bad_input_is_refused_plainly(tmp_path: Path) -> None:
    slipstream = Slipstream(AgentManager())
    with pytest.raises(ValueError, match="give Slipstream a task"):
        slipstream.start(SlipstreamSpec(tmp_path, "  "))
    with pytest.raises(ValueError, match="is not a directory"):
        slipstream.start(SlipstreamSpec(tmp_path / "missing", "task"))
    with pytest.raises(ValueError, match="not a Slipstream session"):
        manager = slipstream.manager
        record = manager.store.create(title="", workdir=str(tmp_path), endpoint="http://127.0.0.1:1/v1",
                                      model="", profile="local", approval="ask")  # fmt: skip
        slipstream.resume(record.id)

"""The config file: defaults, typed edits, and clear refusals that never overwrite anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from openjet import paths
from openjet.config import ConfigError, load_config, set_value, update_values


def test_paths_follow_openjet_home(openjet_home: Path) -> None:
    assert paths.config_file() == openjet_home / "config" / "config.toml"
    assert paths.data_dir() == openjet_home / "data"
    assert paths.cache_dir() == openjet_home / "cache"


def test_paths_without_openjet_home_use_platform_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENJET_HOME")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/x/conf")
    monkeypatch.setenv("XDG_DATA_HOME", "/x/data")
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert paths.config_file() == Path("/x/conf/openjet/config.toml")
    assert paths.data_dir() == Path("/x/data/openjet")
    assert paths.cache_dir() == Path("/x/cache/openjet")


def test_missing_file_gives_defaults() -> None:
    config = load_config()
    assert config.get("engine.port") == 18080
    assert config.get("engine.host") == "127.0.0.1"
    assert config.get("agent.approval") == "ask"
    assert not config.is_configured


def test_set_value_types_and_persists() -> None:
    set_value("engine.port", "18090")
    set_value("airgapped", "true")
    set_value("agent.allow_commands", "git status, pytest")
    set_value("profiles.vllm.endpoint", "http://10.0.0.2:8000/v1")
    config = load_config()
    assert config.get("engine.port") == 18090
    assert config.get("airgapped") is True
    assert config.get("agent.allow_commands") == ["git status", "pytest"]
    assert config.profiles()["vllm"]["endpoint"] == "http://10.0.0.2:8000/v1"
    assert config.profiles()["vllm"]["context_size"] == 32768


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("engine.port", "abc", "whole number"),
        ("engine.port", "70000", "at most"),
        ("engine.slots", "0", "at least"),
        ("agent.approval", "sometimes", "one of"),
        ("airgapped", "maybe", "true or false"),
        ("profiles.x.endpoint", "ftp://host", "http(s) URL"),
        ("no.such.key", "1", "unknown key"),
        ("profiles.x.colour", "red", "unknown key"),
    ],
)
def test_bad_value_names_key_value_and_file(key: str, value: str, problem: str) -> None:
    set_value("engine.port", "18099")
    before = paths.config_file().read_bytes()
    with pytest.raises(ConfigError) as info:
        set_value(key, value)
    message = str(info.value)
    assert key in message and value in message and str(paths.config_file()) in message
    assert problem in message
    assert paths.config_file().read_bytes() == before


def test_broken_file_is_reported_and_kept() -> None:
    path = paths.ensure_dir(paths.config_dir()) / "config.toml"
    path.write_text("[engine]\nport = 'x'\n")
    with pytest.raises(ConfigError, match=r"engine\.port"):
        load_config()
    with pytest.raises(ConfigError):
        set_value("engine.slots", "2")
    assert path.read_text() == "[engine]\nport = 'x'\n"
    path.write_text("[engine\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config()


def test_update_values_is_all_or_nothing() -> None:
    update_values({"engine.kind": "llama-server", "engine.fallback_reason": "no GPU"})
    before = paths.config_file().read_text()
    with pytest.raises(ConfigError):
        update_values({"engine.port": 1234, "engine.slots": 99})
    assert paths.config_file().read_text() == before
    assert load_config().is_configured


def test_comments_survive_an_edit() -> None:
    path = paths.ensure_dir(paths.config_dir()) / "config.toml"
    path.write_text("# my notes\n[engine]\nport = 18080 # keep\n")
    set_value("engine.slots", "2")
    text = path.read_text()
    assert "# my notes" in text and "# keep" in text and "slots = 2" in text

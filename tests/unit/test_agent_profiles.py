"""Model profiles: the default local engine, named endpoints, keys from the keyring only."""

from __future__ import annotations

import pytest

from agent.profiles import ProfileError, is_loopback, resolve_profile, store_key
from openjet.config import load_config, update_values
from tests.support.memory_keyring import MemoryKeyring


@pytest.mark.parametrize(
    ("url", "local"),
    [("http://127.0.0.1:8080/v1", True), ("http://localhost/v1", True), ("http://[::1]:1/v1", True),
     ("http://127.9.9.9/v1", True), ("https://openrouter.ai/api/v1", False), ("http://10.0.0.2/v1", False)],
)  # fmt: skip
def test_is_loopback(url: str, local: bool) -> None:
    assert is_loopback(url) is local


def test_local_profile_defaults_to_our_engine() -> None:
    update_values({"engine.port": 18555})
    profile = resolve_profile(load_config())
    assert (profile.name, profile.endpoint, profile.model, profile.context_size) == (
        "local", "http://127.0.0.1:18555/v1", "", 32768,
    )  # fmt: skip
    assert profile.api_key is None


def test_named_profile_with_overrides() -> None:
    update_values(
        {
            "profiles.box.endpoint": "http://127.0.0.1:9000/v1/",
            "profiles.box.model": "qwen",
            "profiles.box.context_size": 65536,
        }
    )
    config = load_config()
    profile = resolve_profile(config, "box")
    assert (profile.endpoint, profile.model, profile.context_size) == (
        "http://127.0.0.1:9000/v1",
        "qwen",
        65536,
    )
    other = resolve_profile(config, "box", endpoint="http://127.0.0.1:9001/v1", model="other")
    assert (other.endpoint, other.model) == ("http://127.0.0.1:9001/v1", "other")


def test_unknown_profile_and_bad_endpoint_are_explained() -> None:
    with pytest.raises(ProfileError, match="no profile named 'nope'"):
        resolve_profile(load_config(), "nope")
    with pytest.raises(ProfileError, match="not an http"):
        resolve_profile(load_config(), endpoint="ftp://x")


def test_remote_key_comes_from_the_keyring_and_stays_with_its_endpoint(
    memory_keyring: MemoryKeyring,
) -> None:
    update_values({"profiles.cloud.endpoint": "https://api.example.com/v1"})
    store_key("cloud", "sk-secret")
    config = load_config()
    profile = resolve_profile(config, "cloud")
    assert profile.api_key == "sk-secret"
    assert "sk-secret" not in repr(profile)
    assert "sk-secret" not in config.path.read_text()
    moved = resolve_profile(config, "cloud", endpoint="https://elsewhere.example.org/v1")
    assert moved.api_key is None


def test_airgapped_refuses_remote_endpoints() -> None:
    update_values({"airgapped": True})
    with pytest.raises(ProfileError, match="airgapped"):
        resolve_profile(load_config(), endpoint="https://api.example.com/v1")
    assert (
        resolve_profile(load_config(), endpoint="http://127.0.0.1:1/v1").endpoint
        == "http://127.0.0.1:1/v1"
    )

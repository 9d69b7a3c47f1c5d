"""Model profiles: named OpenAI-compatible endpoints with their model and context size.

Profiles come from the config's `[profiles.NAME]` tables. The profile "local" exists even when
the config is silent: our engine at http://127.0.0.1:<engine.port>/v1. Loopback endpoints need
no key; a remote endpoint's key lives in the system keyring (service "openjet", user = the
profile name) and never in the config file or any log.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from urllib.parse import urlparse

import keyring
import keyring.errors

from openjet.config import PROFILE_FIELDS, Config

KEYRING_SERVICE = "openjet"
LOCAL_PROFILE = "local"
OPENROUTER_PROFILE = "openrouter"  # built in like "local": Slipstream's default orchestrator
OPENROUTER_ENDPOINT = "https://openrouter.ai/api/v1"
DEFAULT_CONTEXT_SIZE = int(PROFILE_FIELDS["context_size"].default)  # type: ignore[arg-type]


class ProfileError(ValueError):
    """A profile that cannot be used, with the reason in words."""


@dataclass(frozen=True)
class Profile:
    """Where an agent's model lives. `api_key` is hidden from repr so it never reaches a log."""

    name: str
    endpoint: str
    model: str
    context_size: int
    api_key: str | None = field(default=None, repr=False)
    context_size_configured: bool = False  # False: learn the endpoint's own size when it says


def is_loopback(url: str) -> bool:
    """True for http(s) URLs on this machine (127.0.0.0/8, ::1, localhost)."""
    host = (urlparse(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_endpoint(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ProfileError(
            f"endpoint {url!r} is not an http(s) URL such as http://127.0.0.1:18080/v1"
        )
    return url.rstrip("/")


def load_key(profile_name: str) -> str | None:
    """The profile's API key from the keyring, or None (also when no keyring is available)."""
    try:
        return keyring.get_password(KEYRING_SERVICE, profile_name)
    except keyring.errors.KeyringError:
        return None


def store_key(profile_name: str, key: str) -> None:
    """Save a remote profile's API key in the keyring (`openjet login`)."""
    keyring.set_password(KEYRING_SERVICE, profile_name, key)


def _profile_table(config: Config, name: str) -> dict[str, object] | None:
    profiles = config.profiles()
    if name in profiles:
        return profiles[name]
    if name == LOCAL_PROFILE:
        port = config.get("engine.port")
        return {
            "endpoint": f"http://127.0.0.1:{port}/v1",
            "model": "",
            "context_size": DEFAULT_CONTEXT_SIZE,
        }
    if name == OPENROUTER_PROFILE:
        return {"endpoint": OPENROUTER_ENDPOINT, "model": "", "context_size": DEFAULT_CONTEXT_SIZE}
    return None


def resolve_profile(
    config: Config,
    name: str | None = None,
    endpoint: str | None = None,
    model: str | None = None,
) -> Profile:
    """The profile an agent uses: the named one (default `agent.profile`), with overrides.

    An explicit `endpoint` replaces the profile's; its key is still the profile's only when the
    endpoint is the profile's own, so a key never travels to a server it was not meant for.
    """
    name = name or str(config.get("agent.profile"))
    table = _profile_table(config, name)
    if table is None:
        if endpoint is None:
            known = ", ".join(sorted({*config.profiles(), LOCAL_PROFILE, OPENROUTER_PROFILE}))
            raise ProfileError(f"no profile named {name!r} in {config.path} (known: {known})")
        table = {"endpoint": endpoint, "model": "", "context_size": DEFAULT_CONTEXT_SIZE}
    own_endpoint = _check_endpoint(
        str(table["endpoint"] or f"http://127.0.0.1:{config.get('engine.port')}/v1")
    )
    chosen = _check_endpoint(endpoint) if endpoint else own_endpoint
    if config.get("airgapped") and not is_loopback(chosen):
        raise ProfileError(
            f"endpoint {chosen} is not on this machine and the config says airgapped"
        )
    api_key = None
    if not is_loopback(chosen) and chosen == own_endpoint:
        api_key = load_key(name)
    return Profile(
        name=name,
        endpoint=chosen,
        model=model or str(table["model"] or ""),
        context_size=int(table["context_size"]),  # type: ignore[call-overload]
        api_key=api_key,
        context_size_configured=f"profiles.{name}.context_size" in config.values,
    )

"""`openjet login [PROFILE]`: store a remote profile's API key in the system keyring.

The key is read with getpass on a terminal (never echoed) or as one line from stdin when stdin
is not a terminal (`printf %s "$KEY" | openjet login openrouter`). It goes only to the keyring
(service "openjet", user = the profile name): never to the config file, a log or the screen.
"""

from __future__ import annotations

import getpass
import sys

import keyring.errors
import typer

from agent.profiles import OPENROUTER_PROFILE, ProfileError, is_loopback, resolve_profile, store_key
from openjet.config import ConfigError, load_config


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _read_key(profile: str) -> str:
    if sys.stdin.isatty():
        return getpass.getpass(f"API key for {profile} (not shown): ").strip()
    return sys.stdin.readline().strip()


def login(
    profile: str = typer.Argument(
        OPENROUTER_PROFILE, help="The remote profile the key belongs to (default: openrouter)."
    ),
) -> None:
    """Store the API key of a remote model profile (Slipstream's orchestrator) in the keyring."""
    try:
        config = load_config()
        endpoint = resolve_profile(config, profile).endpoint
    except (ConfigError, ProfileError) as exc:
        raise _fail(str(exc)) from None
    if is_loopback(endpoint):
        raise _fail(f"profile {profile!r} is on this machine ({endpoint}) and needs no key")
    key = _read_key(profile)
    if not key:
        raise _fail("no key given; nothing was stored")
    try:
        store_key(profile, key)
    except keyring.errors.KeyringError as exc:
        raise _fail(f"the system keyring refused the key ({type(exc).__name__})") from None
    typer.echo(f"saved the API key for {profile} ({endpoint}) in the system keyring")

"""`openjet` without a command: check the config, run setup when nothing is configured (and
no endpoint was given), then run the TUI. Errors are printed as one clear line, not a traceback.
"""

from __future__ import annotations

import signal

from rich.console import Console

from openjet.config import Config, ConfigError, load_config
from tui.launcher import LaunchError, Target, resolve_target, run_setup

_err = Console(stderr=True)


def _prepare(endpoint: str | None, model: str | None, profile: str | None) -> tuple[Config, Target]:
    config = load_config()
    target = resolve_target(config, endpoint, model, profile)
    if target.manage_engine and not config.is_configured:
        _err.print("OpenJet is not set up on this machine yet: running `openjet setup` first.")
        code = run_setup()
        config = load_config()
        if code != 0 or not config.is_configured:
            raise LaunchError(
                f"setup did not finish (exit code {code}). Run `openjet setup` again, or "
                "`openjet --endpoint URL` to use an OpenAI-compatible server you already have."
            )
        target = resolve_target(config, endpoint, model, profile)
    return config, target


def run_tui(endpoint: str | None, model: str | None, profile: str | None) -> int:
    """The exit code of `openjet`."""
    try:
        config, target = _prepare(endpoint, model, profile)
    except (ConfigError, LaunchError) as exc:
        _err.print(f"[red]error:[/] {exc}", highlight=False)
        return 2
    from tui.app import OpenJetApp  # textual loads only when the TUI really starts

    app = OpenJetApp(target, config)
    # A closed terminal (SIGHUP) or a kill (SIGTERM) must not orphan an engine we started:
    # turn them into an exit that runs the `finally` below.
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, _exit_on_signal)
    try:
        app.run()
    finally:
        if app.engine is not None:
            app.engine.stop()  # does nothing when we did not start it, or stopped it already
    return app.return_code or 0


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)

"""The `openjet` command line (Typer): the root command and the registry of sub-commands.

Each area adds its commands from its own module (`openjet/cli_*.py`) in `_register`, so this
file stays the index of the CLI rather than its implementation.
"""

from __future__ import annotations

import typer

from openjet import __version__
from openjet.cli_agent import register as register_agent_commands
from openjet.cli_config import config_app
from openjet.cli_debug import debug_app
from openjet.cli_serve import register as register_serve_commands
from openjet.cli_setup import register as register_setup_commands
from openjet.cli_slipstream import register as register_slipstream_commands

app = typer.Typer(
    name="openjet",
    help="A local, private terminal coding agent with its own multi-agent inference engine.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"openjet {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    endpoint: str | None = typer.Option(
        None, "--endpoint", help="Any OpenAI-compatible URL (no setup, no engine of ours)."
    ),
    model: str | None = typer.Option(None, "--model", help="Model name sent to the endpoint."),
    profile: str | None = typer.Option(None, "--profile", help="A model profile from the config."),
) -> None:
    """Without a command: open the TUI (running setup and starting the engine when needed)."""
    if ctx.invoked_subcommand is None:
        from tui.run import run_tui  # lazy: `openjet --help` and sub-commands skip textual

        raise typer.Exit(run_tui(endpoint, model, profile))


def _register() -> None:
    app.add_typer(config_app, name="config")
    # Areas register their commands below, one line each.
    register_agent_commands(app)  # run, sessions
    app.add_typer(debug_app, name="debug")
    register_serve_commands(app)  # serve, top
    register_setup_commands(app)  # setup
    register_slipstream_commands(app)  # slipstream, login


_register()


def main() -> None:
    app()

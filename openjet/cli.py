"""The `openjet` command line (Typer): the root command and the registry of sub-commands.

Each area adds its commands from its own module (`openjet/cli_*.py`) in `_register`, so this
file stays the index of the CLI rather than its implementation.
"""

from __future__ import annotations

import typer

from openjet import __version__
from openjet.cli_config import config_app

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
) -> None:
    """Without a command: show help (the TUI is started here once it exists)."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


def _register() -> None:
    app.add_typer(config_app, name="config")
    # Areas register their commands below, one line each.


_register()


def main() -> None:
    app()

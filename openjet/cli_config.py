"""`openjet config path|show|set`: look at and edit the one TOML config file."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from openjet import paths
from openjet.config import ConfigError, load_config, set_value

config_app = typer.Typer(help="Show or change OpenJet's config file.", no_args_is_help=True)
_err = Console(stderr=True)


@config_app.command("path")
def config_path() -> None:
    """Print the path of the config file."""
    typer.echo(str(paths.config_file()))


@config_app.command("show")
def config_show(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Print every setting with its effective value."""
    try:
        config = load_config()
    except ConfigError as exc:
        _err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc
    values = config.as_dict()
    if as_json:
        typer.echo(json.dumps(values, indent=2))
        return
    typer.echo(f"# {config.path}")
    for key, value in values.items():
        typer.echo(f"{key} = {json.dumps(value)}")


@config_app.command("set")
def config_set(key: str, value: str) -> None:
    """Set KEY (dotted, e.g. engine.port) to VALUE; lists are comma-separated."""
    try:
        config = set_value(key, value)
    except ConfigError as exc:
        _err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{key} = {json.dumps(config.get(key))}  ({config.path})")

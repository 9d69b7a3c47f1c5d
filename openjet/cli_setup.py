"""`openjet setup`: check the machine, get the model, configure and prove an engine.

Interactive by default (Rich prompts), `--yes` for none, `--json` for one JSON report on
stdout (prompts and progress then go to stderr). Exit 0 when an engine is configured and
answered a test request, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console


def setup(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Answer yes to every question.")] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON object.")
    ] = False,
    model: Annotated[
        Path | None, typer.Option("--model", help="Use this local GGUF instead of downloading.")
    ] = None,
    simulate_hardware: Annotated[
        str | None,
        typer.Option("--simulate-hardware", hidden=True, help="Pretend to be a named machine."),
    ] = None,
) -> None:
    """Check the hardware, download and verify the model, and configure the engine."""
    from setup_wizard.report import print_report
    from setup_wizard.wizard import SetupOptions, models_dir, run_setup

    hardware = None
    if simulate_hardware:
        from setup_wizard.hardware import existing_parent
        from setup_wizard.simulated import simulated

        disk = existing_parent(models_dir())
        try:
            hardware = simulated(simulate_hardware, str(disk), shutil.disk_usage(disk).free)
        except KeyError as exc:
            typer.echo(f"error: {exc.args[0]}", err=True)
            raise typer.Exit(2) from None
    console = Console(stderr=json_output)
    report = run_setup(SetupOptions(yes=yes, model=model, hardware=hardware), console)
    if json_output:
        typer.echo(report.to_json())
    else:
        print_report(report, console)
    raise typer.Exit(0 if report.ok else 1)


def register(app: typer.Typer) -> None:
    app.command("setup")(setup)

"""`openjet setup` from start to end: probe, check, get the model, check it, choose and prove
the engine, write the config, report.

A rerun skips what is done and verified: a model recorded as verified is not downloaded or
hashed again, a finished llama-server build is reused. Nothing here deletes a file or stops a
process that setup did not create or start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.prompt import Confirm

from openjet import paths
from openjet.config import Config, ConfigError, load_config, update_values
from setup_wizard.checks import Check, Status, gpu_fallback_reason, hardware_checks
from setup_wizard.compat import Compatibility, check_model
from setup_wizard.engine_select import EngineOutcome, EngineRequest, select_engine
from setup_wizard.hardware import HardwareInfo, probe_hardware
from setup_wizard.model_step import ModelPlan, locate_model, obtain_model
from setup_wizard.report import SetupReport

Ask = Callable[[str], bool]


@dataclass(frozen=True)
class SetupOptions:
    yes: bool = False  # no questions: every step goes ahead
    model: Path | None = None  # a local GGUF instead of the hub download
    hardware: HardwareInfo | None = None  # a probe result to use instead of probing (tests)


def models_dir() -> Path:
    return paths.cache_dir() / "models"


def _asker(options: SetupOptions, console: Console) -> Ask:
    if options.yes:
        return lambda _question: True
    return lambda question: Confirm.ask(question, console=console, default=True)


def compatibility_check(compat: Compatibility) -> Check:
    status: dict[str, Status] = {
        "full": "pass",
        "partial": "warn",
        "llama-server": "warn",
        "unusable": "fail",
    }
    hint = ""
    if compat.losses:
        hint = "loses: " + "; ".join(compat.losses)
    if compat.level == "unusable":
        hint = "use the Qwen3.8-27B Q4_K_M GGUF from the hub, or another qwen35 GGUF"
    return Check("compatibility", status[compat.level], compat.level, compat.summary(), hint)


def run_setup(options: SetupOptions, console: Console, ask: Ask | None = None) -> SetupReport:
    """Run every step; the report's `ok` says whether an engine is configured and answering."""
    report = SetupReport(config_path=str(paths.config_file()))
    try:
        config = load_config()
    except ConfigError as exc:
        report.checks.append(
            Check("config", "fail", report.config_path or "", str(exc), "fix or remove the file")
        )
        return report
    confirm = ask or _asker(options, console)
    plan = locate_model(options.model, str(config.get("engine.model_path")), models_dir())
    report.hardware = options.hardware or probe_hardware(models_dir())
    report.checks += hardware_checks(report.hardware, plan.bytes_to_download)
    if not _model_ready(plan, report, confirm, console):
        return report
    report.model_path = str(plan.target)
    compat = check_model(plan.target)
    report.checks.append(compatibility_check(compat))
    if compat.level == "unusable":
        return report
    outcome = select_engine(_engine_request(plan, compat, report, config), confirm, console.print)
    report.checks += outcome.checks
    report.engine, report.fallback_reason = outcome.kind, outcome.fallback_reason
    report.ok = outcome.ok
    _write_config(config, plan.target, outcome)
    return report


def _model_ready(plan: ModelPlan, report: SetupReport, confirm: Ask, console: Console) -> bool:
    disk = next(c for c in report.checks if c.name == "disk")
    if plan.bytes_to_download and disk.status == "fail":
        detail = "not downloaded: not enough free disk (see the disk check)"
        report.checks.append(Check("model", "fail", str(plan.target), detail, disk.hint))
        return False
    model_check = obtain_model(plan, confirm, console)
    report.checks.append(model_check)
    return model_check.status != "fail"


def _engine_request(
    plan: ModelPlan, compat: Compatibility, report: SetupReport, config: Config
) -> EngineRequest:
    assert report.hardware is not None
    return EngineRequest(
        model_path=plan.target,
        model_bytes=plan.target.stat().st_size,
        gpu_fallback_reason=gpu_fallback_reason(report.checks),
        compat=compat,
        hardware=report.hardware,
        host=str(config.get("engine.host")),
        port=int(config.get("engine.port")),
        slots=int(config.get("engine.slots")),
        llama_server_path=str(config.get("engine.llama_server_path")),
    )


def _write_config(config: Config, model: Path, outcome: EngineOutcome) -> None:
    values: dict[str, str | int] = {"engine.model_path": str(model)}
    if outcome.ok:  # only a proven engine counts as configured
        values |= {
            "engine.kind": outcome.kind,
            "engine.fallback_reason": outcome.fallback_reason or "",
            "engine.port": outcome.port,
            "engine.slots": outcome.slots,
            "engine.context_size": outcome.context_size,
        }
        if outcome.llama_server_path:
            values["engine.llama_server_path"] = outcome.llama_server_path
    update_values(values, config.path)

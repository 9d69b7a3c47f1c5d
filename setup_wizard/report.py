"""Setup's report: one object, printed as Rich tables or (`--json`) as one JSON object of the
shape issue 8 fixes: checks, gpu, engine, fallback_reason, model_path, config_path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from setup_wizard.checks import Check, gib
from setup_wizard.hardware import GpuInfo, HardwareInfo, gpu_dict

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "red"}


@dataclass
class SetupReport:
    checks: list[Check] = field(default_factory=list)
    hardware: HardwareInfo | None = None
    engine: str | None = None  # "megakernel" | "llama-server" | None when none was configured
    fallback_reason: str | None = None
    model_path: str | None = None
    config_path: str | None = None
    ok: bool = False  # an engine is configured and answered a test request

    def gpu(self) -> GpuInfo | None:
        return self.hardware.best_gpu() if self.hardware else None

    def to_json_object(self) -> dict[str, Any]:
        gpu = self.gpu()
        gpu_data: dict[str, Any] | None = None
        if gpu is not None and self.hardware is not None:
            gpu_data = gpu_dict(gpu) | {
                "driver_version": self.hardware.driver_version,
                "driver_cuda_version": self.hardware.driver_cuda_version,
                "cuda_runtime_version": self.hardware.cuda_runtime_version,
                "nvrtc_version": self.hardware.nvrtc_version,
                "source": self.hardware.gpu_source,
            }
        return {
            "checks": [c.to_dict() for c in self.checks],
            "gpu": gpu_data,
            "engine": self.engine,
            "fallback_reason": self.fallback_reason,
            "model_path": self.model_path,
            "config_path": self.config_path,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_json_object(), indent=2)


def _machine_table(hw: HardwareInfo) -> Table:
    table = Table(title="Machine", show_header=False, title_justify="left")
    table.add_row("OS", f"{hw.os_name} {hw.os_release}")
    table.add_row("CPU", f"{hw.cpu} ({hw.cpu_cores} threads)")
    table.add_row(
        "RAM", f"{gib(hw.ram_total_bytes)} total, {gib(hw.ram_available_bytes)} available"
    )
    table.add_row("Disk", f"{gib(hw.disk_free_bytes)} free at {hw.disk_path}")
    for gpu in hw.gpus:
        table.add_row(
            f"GPU {gpu.index}",
            f"{gpu.name}, sm_{gpu.sm}, {gib(gpu.vram_total_bytes)} ({gib(gpu.vram_free_bytes)} free)",
        )
    if hw.driver_version:
        table.add_row(
            "Driver", f"{hw.driver_version} (CUDA {hw.driver_cuda_version}) via {hw.gpu_source}"
        )
    table.add_row(
        "CuPy CUDA", f"runtime {hw.cuda_runtime_version or '-'}, NVRTC {hw.nvrtc_version or '-'}"
    )
    for note in hw.notes:
        table.add_row("note", note)
    return table


def _checks_table(checks: list[Check]) -> Table:
    table = Table(title="Checks", title_justify="left")
    for column in ("check", "status", "value", "detail", "what to do"):
        table.add_column(column, overflow="fold")
    for c in checks:
        status = f"[{STATUS_STYLE[c.status]}]{c.status}[/]"
        table.add_row(c.name, status, c.value, c.detail, c.hint)
    return table


def print_report(report: SetupReport, console: Console) -> None:
    if report.hardware:
        console.print(_machine_table(report.hardware))
    console.print(_checks_table(report.checks))
    if report.engine:
        console.print(f"Engine: [bold]{report.engine}[/]")
    if report.fallback_reason:
        console.print(f"Fallback reason: {report.fallback_reason}")
    if report.model_path:
        console.print(f"Model: {report.model_path}")
    if report.config_path:
        console.print(f"Config: {report.config_path}")
    verdict = (
        "[green]ready[/]: the engine answered a test request" if report.ok else "[red]not ready[/]"
    )
    console.print(f"Setup {verdict}")

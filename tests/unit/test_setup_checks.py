"""Setup's checks on simulated machines, the nvidia-smi parser, context fitting and the report."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from setup_wizard.checks import GIB, gpu_fallback_reason, hardware_checks
from setup_wizard.engine_select import fit_context, megakernel_selftest
from setup_wizard.hardware import GpuInfo, parse_nvidia_smi
from setup_wizard.report import SetupReport
from setup_wizard.simulated import PROFILE_NAMES, simulated

MODEL_BYTES = int(16.5e9)


def statuses(profile: str, download: int = MODEL_BYTES, **changes: object) -> dict[str, str]:
    hw = replace(simulated(profile), **changes)  # type: ignore[arg-type]
    return {c.name: c.status for c in hardware_checks(hw, download)}


@pytest.mark.parametrize(
    ("profile", "expected", "reason_part"),
    [
        ("no-gpu", {"gpu": "fail", "vram": "fail", "driver": "fail"}, "no NVIDIA GPU"),
        ("rtx3090", {"gpu": "pass", "vram": "pass", "driver": "pass"}, None),
        ("rtx4090", {"gpu": "pass", "vram": "pass", "driver": "pass"}, None),
        ("16gb", {"gpu": "pass", "vram": "fail", "driver": "pass"}, "24 GB"),
        ("old-driver", {"gpu": "pass", "vram": "pass", "driver": "fail"}, "CUDA 11.4"),
        ("turing", {"gpu": "warn", "vram": "pass", "driver": "pass"}, None),
        ("rtx5090", {"gpu": "pass", "vram": "pass", "driver": "pass"}, None),
    ],
)
def test_profiles_give_the_expected_verdicts(
    profile: str, expected: dict[str, str], reason_part: str | None
) -> None:
    hw = simulated(profile)
    checks = hardware_checks(hw, MODEL_BYTES)
    got = {c.name: c.status for c in checks}
    assert {k: got[k] for k in expected} == expected
    assert got["os"] == "pass" and got["disk"] == "pass"
    reason = gpu_fallback_reason(checks)
    if reason_part is None:
        assert reason is None
    else:
        assert reason is not None and reason_part in reason
    for check in checks:  # every non-pass says what to do
        assert check.value and check.detail and (check.status == "pass" or check.hint)


def test_rtx50_needs_cuda_12_8() -> None:
    assert statuses("rtx5090", driver_cuda_version="12.4")["driver"] == "fail"
    assert statuses("rtx5090", driver_cuda_version="12.8")["driver"] == "pass"
    assert statuses("rtx3090", driver_cuda_version="12.0")["driver"] == "pass"


def test_disk_needs_model_plus_margin_unless_the_model_is_here() -> None:
    assert statuses("rtx3090", disk_free_bytes=MODEL_BYTES)["disk"] == "fail"
    assert statuses("rtx3090", disk_free_bytes=MODEL_BYTES + 3 * GIB)["disk"] == "pass"
    assert statuses("rtx3090", download=0, disk_free_bytes=1)["disk"] == "pass"


def test_non_linux_and_busy_vram() -> None:
    assert statuses("rtx3090", os_name="Darwin")["os"] == "fail"
    busy = GpuInfo(0, "NVIDIA GeForce RTX 3090", (8, 6), 24 * GIB, 12 * GIB)
    assert statuses("rtx3090", gpus=(busy,))["vram"] == "warn"


def test_best_gpu_prefers_a_supported_card_then_memory() -> None:
    old = GpuInfo(0, "Tesla P40", (6, 1), 24 * GIB, 24 * GIB)
    small = GpuInfo(1, "RTX 3060", (8, 6), 12 * GIB, 12 * GIB)
    big = GpuInfo(2, "RTX 3090", (8, 6), 24 * GIB, 24 * GIB)
    hw = replace(simulated("rtx3090"), gpus=(old, small, big))
    assert hw.best_gpu() == big
    assert replace(hw, gpus=(old, small)).best_gpu() == small


def test_unknown_profile_lists_the_names() -> None:
    with pytest.raises(KeyError, match="rtx3090"):
        simulated("rtx9999")
    assert "no-gpu" in PROFILE_NAMES


def test_parse_nvidia_smi() -> None:
    query = "0, NVIDIA GeForce RTX 3090, 8.6, 24576, 23800, 550.54.14\n1, Tesla T4, 7.5, 15360, 15000, 550.54.14\n"
    banner = "| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.4     |"
    gpus, driver, cuda = parse_nvidia_smi(query, banner)
    assert driver == "550.54.14" and cuda == "12.4"
    assert [g.compute_capability for g in gpus] == [(8, 6), (7, 5)]
    assert gpus[0].vram_total_bytes == 24576 * 1024 * 1024 and gpus[1].name == "Tesla T4"


def test_fit_context_on_a_24gb_card() -> None:
    free = int(23.4 * GIB)
    tokens = fit_context(free, MODEL_BYTES, 34816, slots=4, model_context=262144)
    assert tokens % 1024 == 0
    assert 150_000 < tokens < 200_000  # (23.4 GiB - 16.5 GB - 4 x 150 MB - 1.5 GiB) / 34 KB
    # Capped by the model's own context and never below a usable minimum.
    assert fit_context(free, MODEL_BYTES, 34816, slots=1, model_context=16384) == 16384
    assert fit_context(10 * GIB, MODEL_BYTES, 34816, slots=4, model_context=262144) == 4096


def test_json_report_has_exactly_the_issue_keys() -> None:
    hw = simulated("rtx3090")
    report = SetupReport(
        checks=hardware_checks(hw, 0), hardware=hw, engine="llama-server",
        fallback_reason="x", model_path="/m.gguf", config_path="/c.toml",
    )  # fmt: skip
    data = json.loads(report.to_json())
    assert list(data) == ["checks", "gpu", "engine", "fallback_reason", "model_path", "config_path"]
    assert set(data["checks"][0]) == {"name", "status", "value", "detail", "hint"}
    assert (
        data["gpu"]["name"] == "NVIDIA GeForce RTX 3090"
        and data["gpu"]["compute_capability"] == "8.6"
    )
    no_gpu = SetupReport(hardware=simulated("no-gpu"))
    assert json.loads(no_gpu.to_json())["gpu"] is None


def test_missing_or_failing_cuda_selftest_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    from tests.conftest import cuda_device_usable

    if cuda_device_usable():
        pytest.skip("a real GPU is here: the self-test may pass")
    ok, reason = megakernel_selftest(tmp_path / "model.gguf")
    assert ok is False and ("not available" in reason or "failed" in reason)


def test_build_progress_lines_are_understood() -> None:
    from engine.llama_server import _percent_done

    assert _percent_done("[52/208] Building CXX object src/x.o") == 25
    assert _percent_done("[ 40%] Building CXX object src/x.o") == 40
    assert _percent_done("-- Configuring done") is None

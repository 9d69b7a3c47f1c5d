"""Setup's checks: each turns a probe reading into pass/warn/fail with the value it measured,
the reason, and what to do. The GPU checks decide between the megakernel and llama-server.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from setup_wizard.hardware import HardwareInfo

Status = Literal["pass", "warn", "fail"]
GIB = 1024**3
MIN_VRAM_BYTES = int(23.5 * GIB)  # a "24 GB" card reports 24 GiB less a little reserved memory
DISK_MARGIN_BYTES = 2 * GIB
GPU_CHECKS = ("os", "gpu", "vram", "driver")


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    value: str  # what was measured, in words
    detail: str  # why this status
    hint: str = ""  # what to do about it (empty when nothing)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def gib(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.1f} GiB"


def _version(text: str | None) -> tuple[int, int]:
    major, _, minor = (text or "0.0").partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return 0, 0


def check_os(hw: HardwareInfo) -> Check:
    value = f"{hw.os_name} {hw.os_release}"
    if hw.os_name == "Linux":
        return Check("os", "pass", value, "Linux is supported")
    return Check(
        "os", "fail", value, "the CUDA engine runs on Linux only",
        "OpenJet will use llama-server here; use Linux (or WSL2) for the fast engine",
    )  # fmt: skip


def check_gpu(hw: HardwareInfo) -> Check:
    gpu = hw.best_gpu()
    if gpu is None:
        no_driver = (
            " (no NVIDIA driver: NVML and nvidia-smi unavailable)" if hw.gpu_source is None else ""
        )
        detail = "no NVIDIA GPU found" + no_driver
        return Check(
            "gpu", "fail", "none", detail,
            "install an NVIDIA GPU and driver; without one, llama-server runs on the CPU (slow)",
        )  # fmt: skip
    value = f"{gpu.name} (sm_{gpu.sm})"
    if gpu.sm >= 80:
        return Check("gpu", "pass", value, "Ampere or newer is supported")
    if gpu.sm >= 75:
        return Check(
            "gpu", "warn", value, "Turing (sm_75) support is experimental",
            "expect lower speed; report problems with `openjet setup --json` output",
        )  # fmt: skip
    return Check(
        "gpu", "fail", value, f"sm_{gpu.sm} is too old: the engine needs sm_80 (Ampere) or newer",
        "llama-server will be used instead",
    )  # fmt: skip


def check_vram(hw: HardwareInfo) -> Check:
    gpu = hw.best_gpu()
    if gpu is None:
        return Check("vram", "fail", "none", "no GPU memory to use", "needs a GPU with 24 GB")
    value = f"{gib(gpu.vram_total_bytes)} total, {gib(gpu.vram_free_bytes)} free"
    if gpu.vram_total_bytes < MIN_VRAM_BYTES:
        return Check(
            "vram", "fail", value, "Qwen3.8-27B Q4_K_M needs a 24 GB card (16.5 GB of weights + KV)",
            "use a 24 GB GPU; llama-server will be used instead",
        )  # fmt: skip
    if gpu.vram_free_bytes < gpu.vram_total_bytes - 2 * GIB:
        used = gpu.vram_total_bytes - gpu.vram_free_bytes
        return Check(
            "vram", "warn", value, f"other processes hold {gib(used)}: less room for context",
            "close other GPU programs (see nvidia-smi) for a larger context",
        )  # fmt: skip
    return Check("vram", "pass", value, "enough for the weights and a large KV pool")


def check_driver(hw: HardwareInfo) -> Check:
    gpu = hw.best_gpu()
    if gpu is None or hw.driver_cuda_version is None:
        return Check(
            "driver", "fail", "none", "no NVIDIA driver answered",
            "install the NVIDIA driver (CUDA 12.0 or newer)",
        )  # fmt: skip
    needed = (12, 8) if gpu.compute_capability[0] >= 12 else (12, 0)
    value = f"driver {hw.driver_version}, CUDA {hw.driver_cuda_version}"
    if _version(hw.driver_cuda_version) >= needed:
        return Check("driver", "pass", value, f"supports CUDA {needed[0]}.{needed[1]} or newer")
    why = f"the driver supports CUDA {hw.driver_cuda_version}; {gpu.name} needs {needed[0]}.{needed[1]}+"
    return Check("driver", "fail", value, why, "update the NVIDIA driver")


def check_disk(hw: HardwareInfo, bytes_to_download: int) -> Check:
    needed = bytes_to_download + DISK_MARGIN_BYTES if bytes_to_download else 0
    value = f"{gib(hw.disk_free_bytes)} free at {hw.disk_path}"
    if hw.disk_free_bytes >= needed:
        detail = "the model is already here" if not bytes_to_download else "enough for the model"
        return Check("disk", "pass", value, detail)
    return Check(
        "disk", "fail", value,
        f"the download needs {gib(needed)} ({gib(bytes_to_download)} + {gib(DISK_MARGIN_BYTES)} margin)",
        "free some disk space, or pass --model PATH for a model you already have",
    )  # fmt: skip


def hardware_checks(hw: HardwareInfo, bytes_to_download: int) -> list[Check]:
    return [
        check_os(hw),
        check_gpu(hw),
        check_vram(hw),
        check_driver(hw),
        check_disk(hw, bytes_to_download),
    ]


def gpu_fallback_reason(checks: list[Check]) -> str | None:
    """None when the GPU checks allow the megakernel, else the failing checks in words."""
    failed = [c for c in checks if c.name in GPU_CHECKS and c.status == "fail"]
    if not failed:
        return None
    if any(c.name == "gpu" and c.value == "none" for c in failed):
        failed = [c for c in failed if c.name not in ("vram", "driver")]  # consequences of no GPU
    return "; ".join(f"{c.name}: {c.detail}" for c in failed)

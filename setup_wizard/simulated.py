"""Simulated machines for tests and demos (`openjet setup --simulate-hardware NAME`).

Each is a complete `HardwareInfo` as the probe would report it on that machine; disk and
RAM figures come from the real machine so downloads and builds still behave honestly.
"""

from __future__ import annotations

from dataclasses import replace

from setup_wizard.hardware import GpuInfo, HardwareInfo

GIB = 1024**3


def _base(disk_path: str, disk_free: int) -> HardwareInfo:
    return HardwareInfo(
        os_name="Linux",
        os_release="6.8.0",
        cpu="Simulated 16-core CPU",
        cpu_cores=16,
        ram_total_bytes=64 * GIB,
        ram_available_bytes=48 * GIB,
        disk_path=disk_path,
        disk_free_bytes=disk_free,
        driver_version="550.54.14",
        driver_cuda_version="12.4",
        cuda_runtime_version="12.4",
        nvrtc_version="12.4",
        gpu_source="nvml",
    )


def _gpu(name: str, cap: tuple[int, int], total_gib: float, used_gib: float = 0.6) -> GpuInfo:
    total = int(total_gib * GIB)
    return GpuInfo(0, name, cap, total, total - int(used_gib * GIB))


def simulated(name: str, disk_path: str = "/", disk_free: int = 500 * GIB) -> HardwareInfo:
    """The named profile; raises KeyError (listing the names) for an unknown one."""
    base = _base(disk_path, disk_free)
    profiles = {
        "no-gpu": replace(
            base,
            driver_version=None,
            driver_cuda_version=None,
            cuda_runtime_version=None,
            nvrtc_version=None,
            gpu_source=None,
            notes=("NVML unavailable (NVMLError_LibraryNotFound)", "no NVIDIA driver found"),
        ),
        "rtx3090": replace(base, gpus=(_gpu("NVIDIA GeForce RTX 3090", (8, 6), 24),)),
        "rtx4090": replace(base, gpus=(_gpu("NVIDIA GeForce RTX 4090", (8, 9), 24),)),
        "rtx5090": replace(
            base,
            gpus=(_gpu("NVIDIA GeForce RTX 5090", (12, 0), 32),),
            driver_cuda_version="12.8",
        ),
        "16gb": replace(base, gpus=(_gpu("NVIDIA GeForce RTX 4080", (8, 9), 16),)),
        "old-driver": replace(
            base,
            gpus=(_gpu("NVIDIA GeForce RTX 3090", (8, 6), 24),),
            driver_version="470.256.02",
            driver_cuda_version="11.4",
        ),
        "turing": replace(base, gpus=(_gpu("Quadro RTX 6000", (7, 5), 24),)),
    }
    if name not in profiles:
        raise KeyError(f"unknown simulated hardware {name!r}: choose one of {', '.join(profiles)}")
    return profiles[name]


PROFILE_NAMES = ("no-gpu", "rtx3090", "rtx4090", "rtx5090", "16gb", "old-driver", "turing")

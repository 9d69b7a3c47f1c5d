"""Hardware probe: NVIDIA GPUs through NVML (nvidia-smi as a fallback), the CUDA runtime CuPy
would use, and OS, CPU, RAM and free disk through psutil.

Every probe step that can fail (no driver, no CuPy, no nvidia-smi) records why in `notes`
instead of raising: setup must work, and say what it found, on a machine with no NVIDIA
driver at all. `HardwareInfo` is plain data so tests inject simulated machines.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]  # (major, minor): (8, 6) = sm_86
    vram_total_bytes: int
    vram_free_bytes: int

    @property
    def sm(self) -> int:
        return self.compute_capability[0] * 10 + self.compute_capability[1]


@dataclass(frozen=True)
class HardwareInfo:
    os_name: str  # platform.system(): "Linux", "Darwin", "Windows"
    os_release: str
    cpu: str
    cpu_cores: int
    ram_total_bytes: int
    ram_available_bytes: int
    disk_path: str  # where the model goes (the nearest existing folder)
    disk_free_bytes: int
    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None  # e.g. "550.54.14"
    driver_cuda_version: str | None = None  # highest CUDA the driver supports, e.g. "12.4"
    cuda_runtime_version: str | None = None  # the CUDA runtime CuPy would use
    nvrtc_version: str | None = None
    gpu_source: str | None = None  # "nvml", "nvidia-smi" or None
    notes: tuple[str, ...] = field(default_factory=tuple)  # what could not be probed, and why

    def best_gpu(self) -> GpuInfo | None:
        """The GPU the engine would use: the newest architecture, then the most memory."""
        if not self.gpus:
            return None
        return max(self.gpus, key=lambda g: (g.sm >= 80, g.vram_total_bytes, g.sm))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [gpu_dict(g) for g in self.gpus]
        data["notes"] = list(self.notes)
        return data


def gpu_dict(gpu: GpuInfo) -> dict[str, Any]:
    major, minor = gpu.compute_capability
    return {
        "index": gpu.index,
        "name": gpu.name,
        "compute_capability": f"{major}.{minor}",
        "vram_total_bytes": gpu.vram_total_bytes,
        "vram_free_bytes": gpu.vram_free_bytes,
    }


def _cuda_version_text(encoded: int) -> str:
    """NVML and CUDA encode versions as 1000 * major + 10 * minor (12040 -> "12.4")."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_nvml() -> tuple[list[GpuInfo], str, str]:
    """(GPUs, driver version, driver CUDA version) from NVML; raises when NVML is unusable."""
    import pynvml

    pynvml.nvmlInit()
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version_text(int(pynvml.nvmlSystemGetCudaDriverVersion()))
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            name = _text(pynvml.nvmlDeviceGetName(handle))
            gpus.append(GpuInfo(index, name, (major, minor), int(memory.total), int(memory.free)))
        return gpus, driver, cuda
    finally:
        pynvml.nvmlShutdown()


SMI_QUERY = "index,name,compute_cap,memory.total,memory.free,driver_version"


def parse_nvidia_smi(query_csv: str, banner: str) -> tuple[list[GpuInfo], str, str | None]:
    """Parse `nvidia-smi --query-gpu=SMI_QUERY --format=csv,noheader,nounits` and the banner
    of plain `nvidia-smi` (which carries "CUDA Version: 12.4")."""
    gpus, driver = [], ""
    for line in query_csv.strip().splitlines():
        index, name, cap, total, free, driver = (part.strip() for part in line.split(","))
        major, _, minor = cap.partition(".")
        mib = 1024 * 1024
        gpus.append(
            GpuInfo(
                int(index), name, (int(major), int(minor or 0)), int(total) * mib, int(free) * mib
            )
        )
    cuda = None
    if "CUDA Version:" in banner:
        cuda = banner.split("CUDA Version:")[1].split()[0].strip("|")
    return gpus, driver, cuda


def probe_nvidia_smi() -> tuple[list[GpuInfo], str, str | None]:
    if shutil.which("nvidia-smi") is None:
        raise FileNotFoundError("nvidia-smi is not on PATH")
    query = ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
    listing = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True)
    banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30, check=False)
    return parse_nvidia_smi(listing.stdout, banner.stdout)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def probe_cupy() -> tuple[str | None, str | None, str | None]:
    """(CUDA runtime version, NVRTC version, note when unavailable) as CuPy would use them."""
    try:
        import cupy

        runtime = _cuda_version_text(int(cupy.cuda.runtime.runtimeGetVersion()))
        major, minor = cupy.cuda.nvrtc.getVersion()
        return runtime, f"{major}.{minor}", None
    except Exception as exc:  # CuPy missing, or its CUDA libraries are
        return None, None, f"CuPy/NVRTC unavailable: {_one_line(exc)}"


def existing_parent(path: Path) -> Path:
    path = path.expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def probe_hardware(model_dir: Path) -> HardwareInfo:
    """Probe this machine; `model_dir` is where the model will be stored (for free disk)."""
    notes: list[str] = []
    gpus: list[GpuInfo] = []
    driver = cuda = source = None
    try:
        gpus, driver, cuda = probe_nvml()
        source = "nvml"
    except Exception as nvml_error:
        notes.append(f"NVML unavailable ({_one_line(nvml_error)})")
        try:
            gpus, driver, cuda = probe_nvidia_smi()
            source = "nvidia-smi"
        except Exception as smi_error:
            notes.append(f"nvidia-smi unavailable ({_one_line(smi_error)})")
            notes.append("no NVIDIA driver found: no GPU can be used")
    runtime, nvrtc, cupy_note = probe_cupy()
    if cupy_note:
        notes.append(cupy_note)
    disk = existing_parent(model_dir)
    memory = psutil.virtual_memory()
    return HardwareInfo(
        os_name=platform.system(),
        os_release=platform.release(),
        cpu=cpu_name(),
        cpu_cores=os.cpu_count() or 1,
        ram_total_bytes=int(memory.total),
        ram_available_bytes=int(memory.available),
        disk_path=str(disk),
        disk_free_bytes=int(shutil.disk_usage(disk).free),
        gpus=tuple(gpus),
        driver_version=driver or None,
        driver_cuda_version=cuda,
        cuda_runtime_version=runtime,
        nvrtc_version=nvrtc,
        gpu_source=source,
        notes=tuple(notes),
    )

"""Run-time build of the CUDA sources: NVRTC through CuPy, for the detected GPU architecture,
cached on disk by a hash of the source, options, architecture and NVRTC version.

Model dimensions are compile-time constants (``-D`` options), so one module is built per model
shape. Sources include each other with ``#include "x.cuh"``; the includes are inlined here so
NVRTC needs no include path and the hash covers every byte that is compiled.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from engine.cuda.weights import Q4_K, Q5_K, Q6_K, Q8_0, TYPE_NAMES
from openjet import paths

SOURCE_DIR = Path(__file__).parent
MATMUL_SOURCES = ("matmul.cu",)
OPS_SOURCES = ("norm.cu", "deltanet.cu", "attention.cu", "sample.cu")
ALL_SOURCES = MATMUL_SOURCES + OPS_SOURCES
_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.MULTILINE)


class KernelBuildError(RuntimeError):
    """A CUDA source failed to compile; the message carries the compiler log."""


@dataclass(frozen=True)
class KernelDims:
    """Model dimensions baked into the op kernels (defaults: the 27B model)."""

    dn_dk: int = 128  # DeltaNet key head dim
    dn_dv: int = 128  # DeltaNet value head dim
    dn_hk: int = 16  # DeltaNet key heads
    att_d: int = 256  # attention head dim
    att_hq: int = 24
    att_hkv: int = 4
    att_nrot: int = 64
    kv_page: int = 16

    def defines(self) -> tuple[str, ...]:
        return tuple(f"-D{name.upper()}={value}" for name, value in asdict(self).items())


def inline_source(name: str, seen: set[str] | None = None) -> str:
    """The text of `name` with every local #include replaced by the file's text (once)."""
    seen = set() if seen is None else seen
    text = (SOURCE_DIR / name).read_text()

    def expand(match: re.Match[str]) -> str:
        inc = match.group(1)
        if inc in seen:
            return ""
        seen.add(inc)
        return inline_source(inc, seen)

    return _INCLUDE.sub(expand, text).replace("#pragma once", "")


def module_source(sources: tuple[str, ...]) -> str:
    seen: set[str] = set()
    return "\n".join(inline_source(name, seen) for name in sources)


def detected_arch() -> int:
    """Compute capability of the current device as an int (e.g. 90)."""
    import cupy

    return int(cupy.cuda.Device().compute_capability)


def cache_key(source: str, options: tuple[str, ...], arch: int) -> str:
    import cupy

    nvrtc = cupy.cuda.nvrtc.getVersion()
    blob = "\0".join([source, *options, str(arch), str(nvrtc), cupy.__version__])
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def kernel_cache_dir() -> Path:
    path = paths.cache_dir() / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _compile_cubin(source: str, options: tuple[str, ...], arch: int) -> bytes:
    from cupy.cuda import compiler

    try:
        binary, _mapping = compiler.compile_using_nvrtc(source, options, arch=str(arch))
    except compiler.CompileException as exc:  # log names the line and the error
        raise KernelBuildError(f"NVRTC failed for sm_{arch}:\n{exc}") from exc
    return bytes(binary)


def build_module(
    sources: tuple[str, ...],
    dims: KernelDims | None = None,
    extra: tuple[str, ...] = (),
    suffix: str = "",
) -> Any:
    """A cupy.RawModule holding `sources` (+ `suffix`, generated code), compiled (or read from the
    cache) for this GPU."""
    import cupy

    arch = detected_arch()
    options = ("-std=c++17", *(dims.defines() if dims else ()), *extra)
    source = module_source(sources) + suffix
    path = kernel_cache_dir() / f"{cache_key(source, options, arch)}.cubin"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(_compile_cubin(source, options, arch))
        tmp.replace(path)  # atomic: a concurrent build never sees half a file
    return cupy.RawModule(path=str(path))


# Bytes one weight row's super-block takes in wmat_pipe's shared-memory ring (Frag::STRIDE in
# quant.cuh; the generated source static_asserts that the two agree), by ggml type.
PIPE_STRIDE = {Q4_K: 144, Q5_K: 176, Q6_K: 224, Q8_0: 272}
PIPE_FRAGS = {Q4_K: "FragQ4K", Q5_K: "FragQ5K", Q6_K: "FragQ6K", Q8_0: "FragQ8_0"}
MAX_NT = 4  # activation rows per pass = 8 * NT (register-prefetch kernels)


@dataclass(frozen=True)
class MatmulConfig:
    """Tiling of the weight x rows kernels (bench/decode.py times several); mt1/min_blocks1 are
    for the single-row (NT = 1) kernels. `pipeline` routes quantized weights through wmat_pipe
    with at most `smem` bytes of static shared memory per CTA (48 KiB is the static limit on
    every architecture) and at most `max_stages` stages per warp."""

    mt: int = 2  # 16-row m-tiles per warp
    nw: int = 4  # warps per CTA
    min_blocks: int = 2  # launch-bounds occupancy hint (caps registers)
    mt1: int = 1
    min_blocks1: int = 3
    pipeline: bool = True
    smem: int = 46 * 1024
    max_stages: int = 6
    max_nt: int = 4  # wmat_pipe: up to 8 * max_nt rows share a weight tile (above 4: MT = 1)

    def defines(self) -> tuple[str, ...]:
        return (
            f"-DMM_MT={self.mt}",
            f"-DMM_NW={self.nw}",
            f"-DMM_MINB={self.min_blocks}",
            f"-DMM_MT1={self.mt1}",
            f"-DMM_MINB1={self.min_blocks1}",
        )

    def pipe_shape(self, ggml_type: int, nt: int) -> tuple[int, int]:
        """(MT, stages) of wmat_pipe for a format and NT: the configured MT unless fewer than two
        stages of it fit in `smem`, then one m-tile; as many stages as fit, up to max_stages."""
        mt = self.mt1 if nt == 1 else self.mt if nt <= MAX_NT else 1  # NT > 4: no spills
        while True:
            stages = min(self.max_stages, self.smem // (self.nw * 16 * mt * PIPE_STRIDE[ggml_type]))
            if stages >= 2 or mt == 1:
                break
            mt = 1
        if stages < 2:
            raise ValueError(
                f"matmul config {self}: no two pipeline stages fit for type {ggml_type}"
            )
        return mt, stages

    def pipe_source(self) -> str:
        """The wmat_pipe instantiations (appended to matmul.cu's source)."""
        lines = []
        for ggml_type, frag in PIPE_FRAGS.items():
            name = TYPE_NAMES[ggml_type]
            lines.append(
                f'static_assert({frag}::STRIDE == {PIPE_STRIDE[ggml_type]}, "PIPE_STRIDE");'
            )
            for nt in range(1, self.max_nt + 1):
                mt, stages = self.pipe_shape(ggml_type, nt)
                minb = self.min_blocks1 if nt == 1 else self.min_blocks
                lines.append(
                    f"OJ_MMP_KERNEL(mmp_{name}_{nt}, {frag}, {mt}, {nt}, {stages}, {minb})"
                )
        return "\n".join(lines) + "\n"

    def row_tile(self, ggml_type: int, n_rows: int) -> tuple[str, int, int]:
        """(kernel name, NT, weight rows per CTA) of a product of n_rows activation rows."""
        name = TYPE_NAMES[ggml_type]
        if self.pipeline and ggml_type in PIPE_STRIDE:
            nt = min(self.max_nt, (n_rows + 7) // 8)
            return f"mmp_{name}_{nt}", nt, 16 * self.pipe_shape(ggml_type, nt)[0]
        nt = min(MAX_NT, (n_rows + 7) // 8)
        return f"mm_{name}_{nt}", nt, 16 * (self.mt1 if nt == 1 else self.mt)


MATMUL_CONFIG = MatmulConfig()


@cache
def matmul_module(config: MatmulConfig = MATMUL_CONFIG) -> Any:
    return build_module(MATMUL_SOURCES, extra=config.defines(), suffix=config.pipe_source())


@cache
def ops_module(dims: KernelDims) -> Any:
    return build_module(OPS_SOURCES, dims)

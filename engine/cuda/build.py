"""Run-time build of the CUDA sources: NVRTC through CuPy, for the detected GPU architecture,
cached on disk by a hash of the source, options, architecture and NVRTC version.

Model dimensions are compile-time constants (``-D`` options), so one module is built per model
shape. Sources include each other with ``#include "x.cuh"``; the includes are inlined here so
NVRTC needs no include path and the hash covers every byte that is compiled.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from engine.cuda.weights import Q4_K, Q5_K, Q6_K, TYPE_NAMES
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
    # DeltaNet state columns per dn_recur_split CTA (a divisor of dn_dv): 32 spreads a prompt's
    # sequential rows over 4x the SMs (deltanet.cu)
    dn_cb: int = 32
    att_d: int = 256  # attention head dim
    att_hq: int = 24
    att_hkv: int = 4
    att_nrot: int = 64
    kv_page: int = 16
    att_splits: int = 16  # CTAs per (row, KV head) over the context (fixed: batch invariance)
    # 1: attention on the tensor cores where the heads allow it (attn_decode_tc: 256-wide heads,
    # <= 8 per KV head; 1.5-2.5 ms less per step at 23K context on the H200), else attn_decode
    att_tc: int = 1
    # with att_tc: rows at positions below this attend on the CUDA cores (attn_decode), which
    # is faster there for prompt chunks (a 512-row chunk at position 0: 13.8 against 22.5 ms);
    # a row's kernel depends on its position alone (batch invariance). 0: tensor cores for all
    att_core_below: int = 2048
    # attn_decode's positions per chunk (a multiple of 16): a short context's chunks spread
    # over more of the att_splits CTAs, so each warp runs fewer blocks one after another
    att_core_chunk: int = 16

    def defines(self) -> tuple[str, ...]:
        return tuple(f"-D{name.upper()}={value}" for name, value in asdict(self).items())


def inline_source(name: str, seen: set[str] | None = None) -> str:
    """The text of `name` with every local #include replaced by the file's text (once)."""
    return inline_includes((SOURCE_DIR / name).read_text(), seen)


def inline_includes(text: str, seen: set[str] | None = None) -> str:
    """text (an engine source, or a probe's next to the benchmarks) with every local #include
    replaced by that engine source's text, each file once."""
    seen = set() if seen is None else seen

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
    sources: tuple[str, ...], dims: KernelDims | None = None, extra: tuple[str, ...] = ()
) -> Any:
    """A cupy.RawModule holding `sources`, compiled (or read from the cache) for this GPU."""
    import cupy

    return cupy.RawModule(path=str(module_cubin(sources, detected_arch(), dims, extra)))


def module_cubin(
    sources: tuple[str, ...],
    arch: int,
    dims: KernelDims | None = None,
    extra: tuple[str, ...] = (),
    cache: Path | None = None,
) -> Path:
    """The cached cubin of `sources` for sm_`arch`, compiled first where the cache (default:
    kernel_cache_dir()) lacks it. Needs NVRTC alone, no GPU (bench/prebuild_kernels.py)."""
    options = ("-std=c++17", *(dims.defines() if dims else ()), *extra)
    source = module_source(sources)
    path = (cache or kernel_cache_dir()) / f"{cache_key(source, options, arch)}.cubin"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # pytest-xdist workers build at once
        tmp.write_bytes(_compile_cubin(source, options, arch))
        tmp.replace(path)  # atomic: a concurrent build never sees half a file
    return path


MAX_NT = 4  # activation rows per pass of wmat_rows = 8 * NT
# the pairs of weight formats that matmul.cu's pair kernels (mmp*_) take in one launch: those
# the K-quant mixes put side by side on one input (Q4_K_M: Q4_K and Q6_K; Q5_K_M: Q5_K, Q6_K)
PAIRED_TYPES = frozenset({(Q4_K, Q5_K), (Q4_K, Q6_K), (Q5_K, Q6_K)})


@dataclass(frozen=True)
class Tile:
    """One product's launch: kernel name, activation rows per CTA (grid x), weight rows per CTA
    (grid y), threads per CTA."""

    name: str
    rows_per_group: int
    rows_per_cta: int
    threads: int
    packed: bool = False  # the kernel reads packed f16 activations (mmh_*, mmgh_*, mmg8h_*)


@dataclass(frozen=True)
class MatmulConfig:
    """Tiling of the weight x rows kernels (bench/decode.py times several); mt1/min_blocks1 are
    for the single-row (NT = 1) kernels; `gemm` sends products of at least gemm_min_rows rows to
    wmat_gemm."""

    mt: int = 2  # 16-row m-tiles per warp
    nw: int = 4  # warps per CTA
    min_blocks: int = 2  # launch-bounds occupancy hint (caps registers)
    mt1: int = 1
    min_blocks1: int = 4
    # narrow products (their single-n-tile grid fits in one wave at min_blocks1d CTAs per SM)
    # run the `_1d` kernels (matmul.cu: a deeper load pipeline, more registers)
    deep_narrow: bool = True
    min_blocks1d: int = 3
    deep_all: bool = False  # every single-n-tile product on the `_1d` kernels (a bench variant)
    # the formats whose products may run the `_1d` kernels at all (a pair: both of its formats;
    # None: every format). (Q6_K, Q8_0, F16), the formats whose `_1` kernels keep their next
    # super-block in a ring shifted by register moves, leaves Q4_K and Q5_K (two buffers taking
    # turns) on `_1` also where narrow: v30h, 27B Q4_K_M steps 7.139 -> 7.122 ms at one row,
    # 7.914 -> 7.867 at four slots (branch `deep-types-default`: 20 of its 68 GPU tests run)
    deep_types: tuple[int, ...] | None = None
    gemm: bool = True
    gemm_min_rows: int = 128  # products of at least this many rows use wmat_gemm
    gemm_tile: int = 128  # weight rows per wmat_gemm CTA: 64 (4 warps) or 128 (8 warps)
    # n-tiles (8 activation rows each) per CTA at most; more rows run as further row groups of
    # CTAs on the same weight tiles, which read the tile from L2 after the first (1: every
    # decode pass on the single-n-tile kernels, 16 warps per SM instead of 8)
    max_nt: int = MAX_NT
    # passes of 9 to few_rows rows (two n-tiles) run the `_2f` kernels: mt_few m-tiles per warp
    # at min_blocks_few CTAs per SM (0: the `_2` kernels at every row count)
    few_rows: int = 12
    mt_few: int = 1
    min_blocks_few: int = 3
    # the single-super-block-ahead row kernels of Q4_K/Q5_K with two raw buffers taking turns
    # instead of a ring shifted by register moves (matmul.cu wmat_rows; the same bits)
    turns: bool = True
    # the deep (two super-blocks ahead, `_1d`) kernels of every format with three raw buffers
    # taking turns instead of a ring (matmul.cu wmat_rows; the same bits)
    deep_turns: bool = True
    # decode passes finish SwiGLU in the gate|up product's epilogue (kernels.matmul_swiglu)
    # where the weight's rows allow it; False: the product, then Ops.swiglu (same bits)
    swiglu_epilogue: bool = True
    # decode passes run a mixer's two input products of different types (PAIRED_TYPES) in one
    # launch (kernels.matmul_pair); False: one launch each (same bits)
    pair_products: bool = True
    # the mixers' outputs (the DeltaNet gated norm's, attention's merged rows) also written
    # packed, so the output products read f16 rows instead of converting f32 ones in every CTA
    # (forward.mixer_out_packed); False: f32 only (same bits)
    packed_mixer_out: bool = True

    def defines(self) -> tuple[str, ...]:
        return (
            f"-DMM_MT={self.mt}",
            f"-DMM_NW={self.nw}",
            f"-DMM_MINB={self.min_blocks}",
            f"-DMM_MT1={self.mt1}",
            f"-DMM_MINB1={self.min_blocks1}",
            f"-DMM_MINB1D={self.min_blocks1d}",
            f"-DMM_MTF={self.mt_few}",
            f"-DMM_MINBF={self.min_blocks_few}",
            f"-DMM_TURNS={int(self.turns)}",
            f"-DMM_DEEP_TURNS={int(self.deep_turns)}",
        )

    def tiled(self, n_rows: int) -> bool:
        """Whether products of n_rows rows run the tiled kernel (wmat_gemm)."""
        return self.gemm and n_rows >= self.gemm_min_rows

    def row_tile(
        self, ggml_type: int, n_rows: int, packed: bool = False, n_out: int = 0, n_sm: int = 0
    ) -> Tile:
        """The kernel of a product of n_rows activation rows and how it tiles the rows; packed:
        read packed f16 activations (kernels.pack_activations) instead of f32 ones; n_out (the
        weight's rows) and n_sm (the GPU's SMs) pick the deep kernel for narrow products."""
        name = TYPE_NAMES[ggml_type]
        h = "h" if packed else ""
        if self.tiled(n_rows):
            prefix = "mmg" if self.gemm_tile == 64 else "mmg8"
            return Tile(f"{prefix}{h}_{name}", 64, self.gemm_tile, 2 * self.gemm_tile, packed)
        nt, rows_per_cta, suffix = self._row_kernel(n_rows, n_out, n_sm, (ggml_type,))
        if packed and n_rows <= 4:  # packed rows in groups of 1 or 4 (kernels.packed_group)
            h = "h1" if n_rows <= 1 else "h4"
        return Tile(f"mm{h}_{name}_{nt}{suffix}", 8 * nt, rows_per_cta, 32 * self.nw, packed)

    def pair_tile(self, types: tuple[int, int], n_rows: int, n_out: int = 0, n_sm: int = 0) -> Tile:
        """The kernel of two products in one launch (matmul.cu mmp*_: weights of the two types,
        in PAIRED_TYPES order, on the same packed activations; n_out: both weights' rows), tiled
        as row_tile tiles one weight of n_out rows. rows_per_cta applies to each weight."""
        if types not in PAIRED_TYPES or self.tiled(n_rows) or not self.pair_products:
            raise ValueError(f"no pair kernel for types {types} at {n_rows} rows")
        nt, rows_per_cta, suffix = self._row_kernel(n_rows, n_out, n_sm, types)
        group = "1" if n_rows <= 1 else "4" if n_rows <= 4 else ""  # kernels.packed_group
        pair = "_".join(TYPE_NAMES[t] for t in types)
        return Tile(f"mmp{group}_{pair}_{nt}{suffix}", 8 * nt, rows_per_cta, 32 * self.nw, True)

    def _row_kernel(
        self, n_rows: int, n_out: int, n_sm: int, types: tuple[int, ...]
    ) -> tuple[int, int, str]:
        """(n-tiles per CTA, weight rows per CTA, kernel suffix) of a row-kernel product of
        weights of these formats."""
        nt = min(self.max_nt, MAX_NT, (n_rows + 7) // 8)
        few = nt == 2 and n_rows <= self.few_rows
        rows_per_cta = 16 * (self.mt1 if nt == 1 else self.mt_few if few else self.mt)
        ctas = -(-n_out // rows_per_cta) * -(-n_rows // (8 * nt))
        narrow = self.deep_narrow and 0 < ctas <= self.min_blocks1d * n_sm
        allowed = self.deep_types is None or all(t in self.deep_types for t in types)
        deep = nt == 1 and allowed and (self.deep_all or narrow)
        return nt, rows_per_cta, "d" if deep else "f" if few else ""


MATMUL_CONFIG = MatmulConfig()


@cache
def matmul_module(config: MatmulConfig = MATMUL_CONFIG) -> Any:
    return build_module(MATMUL_SOURCES, extra=config.defines())


@cache
def ops_module(dims: KernelDims) -> Any:
    return build_module(OPS_SOURCES, dims)

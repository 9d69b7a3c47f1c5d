"""Weights on the GPU in the layouts the kernels read (engine/cuda/quant.cuh documents them):
GGUF quant blocks are uploaded, put in tile-major order (each 16-row tile's blocks of one
super-block adjacent: the product kernels' loads become contiguous) and, where a block is not
16-byte aligned (Q6_K 210 B, Q8_0 34 B), split into planes on the device. Also makes random
weights directly on the GPU (benchmarks of the full 27B shape need no file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

F32, F16, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 8, 12, 13, 14, 30
TILE_ROWS = 16  # rows of a tile in the tile-major order (quant.cuh's unit_index)
BLOCK_BYTES = {Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210), Q8_0: (32, 34),
               F16: (1, 2), F32: (1, 4), BF16: (1, 2)}  # fmt: skip
TYPE_NAMES = {F32: "f32", F16: "f16", Q8_0: "q8_0", Q4_K: "q4_k", Q5_K: "q5_k", Q6_K: "q6_k"}


class WeightFormatError(ValueError):
    """A tensor's type or shape cannot be used by the CUDA kernels."""


@dataclass
class GpuWeight:
    """One 2-D weight on the GPU. `ggml_type` is the type the kernels read (BF16 -> F32)."""

    name: str
    ggml_type: int
    rows: int  # N, output features (ggml ne1)
    cols: int  # K, input features (ggml ne0)
    planes: tuple[Any, ...]  # 1..4 cupy arrays, see quant.cuh

    @property
    def nbytes(self) -> int:
        return int(sum(p.nbytes for p in self.planes))

    def pointers(self) -> tuple[Any, Any, Any, Any]:
        p = self.planes
        return (p[0], p[1 % len(p)], p[2 % len(p)], p[3 % len(p)])


# The largest super-block scale d of a Q4_K/Q5_K block the products take: they apply d as
# the f16 d * 2^14 (quant.cuh), which overflows above 4 (weights of magnitude ~4,000).
KQUANT_MAX_D = 4.0


def tensor_bytes(ggml_type: int, rows: int, cols: int) -> int:
    per, nbytes = BLOCK_BYTES[ggml_type]
    return rows * (cols // per) * nbytes


# The most output rows a product of tile-major weights takes: its row kernels launch one CTA
# row (grid y) per 16 weight rows, and CUDA caps grid y at 65,535 (a Q4_K matrix of 1.39M rows,
# 4 GB at K = 5,120, was refused with CUDA_ERROR_INVALID_VALUE: bench/NOTES.md v24h).
MAX_PRODUCT_ROWS = 65535 * TILE_ROWS


def check_shape(name: str, ggml_type: int, rows: int, cols: int) -> None:
    if ggml_type not in BLOCK_BYTES:
        raise WeightFormatError(f"{name}: ggml type {ggml_type} has no CUDA kernel")
    if cols % 256:
        raise WeightFormatError(f"{name}: row length {cols} is not a multiple of 256")
    if ggml_type not in (F32, BF16) and rows > MAX_PRODUCT_ROWS:
        raise WeightFormatError(
            f"{name}: {rows:,} rows, more than the {MAX_PRODUCT_ROWS:,} the CUDA products take; "
            "run this model with --backend llama-server"
        )


def from_device_bytes(name: str, raw: Any, ggml_type: int, rows: int, cols: int) -> GpuWeight:
    """Build the kernel layout from the tensor's GGUF bytes already on the GPU (uint8)."""
    import cupy as cp

    check_shape(name, ggml_type, rows, cols)
    if raw.size != tensor_bytes(ggml_type, rows, cols):
        raise WeightFormatError(
            f"{name}: {raw.size} bytes, expected {tensor_bytes(ggml_type, rows, cols)}"
        )
    if ggml_type == F32:  # row-major: the exact f32 kernel's layout
        return GpuWeight(name, F32, rows, cols, (cp.ascontiguousarray(raw),))
    if ggml_type == BF16:
        wide = (raw.view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32)
        return GpuWeight(name, F32, rows, cols, (wide.view(cp.uint8),))
    if ggml_type in (Q4_K, Q5_K):
        d = cp.ascontiguousarray(raw.reshape(-1, BLOCK_BYTES[ggml_type][1])[:, :2]).view(cp.float16)
        if bool((cp.abs(d.astype(cp.float32)) > KQUANT_MAX_D).any()):
            raise WeightFormatError(
                f"{name}: a block scale d above {KQUANT_MAX_D} (weights beyond the f16 range "
                "the CUDA products use); run this model with --backend llama-server"
            )
    raw = tile_major(raw, ggml_type, rows, cols)
    if ggml_type == Q6_K:
        blocks = raw.reshape(-1, 210)
        planes = tuple(
            cp.ascontiguousarray(blocks[:, a:b])
            for a, b in ((0, 128), (128, 192), (192, 208), (208, 210))
        )
        return GpuWeight(name, Q6_K, rows, cols, planes)
    if ggml_type == Q8_0:
        blocks = raw.reshape(-1, 34)
        qs, d = cp.ascontiguousarray(blocks[:, 2:]), cp.ascontiguousarray(blocks[:, :2])
        return GpuWeight(name, Q8_0, rows, cols, (qs, d))
    return GpuWeight(name, ggml_type, rows, cols, (raw,))


def tile_major(raw: Any, ggml_type: int, rows: int, cols: int) -> Any:
    """GGUF's row-major bytes as units (one row's 256 elements) in the order [rows/16][K/256][16],
    rows padded with zero bytes to a multiple of 16. Works on numpy and cupy arrays alike."""
    xp = _array_module(raw)
    per, nbytes = BLOCK_BYTES[ggml_type]
    unit = 256 // per * nbytes  # bytes of one row's super-block
    nsb, padded = cols // 256, -(-rows // TILE_ROWS) * TILE_ROWS
    units = raw.reshape(rows, nsb, unit)
    if padded != rows:
        units = xp.concatenate([units, xp.zeros((padded - rows, nsb, unit), raw.dtype)])
    tiles = units.reshape(padded // TILE_ROWS, TILE_ROWS, nsb, unit).transpose(0, 2, 1, 3)
    return xp.ascontiguousarray(tiles).reshape(-1)


# gate|up rows alternate in groups of this many (interleave_halves): matmul.cu's MM_SWIGLU
# epilogue finds a feature's gate and up in one m-tile's accumulators 8 rows apart
GATE_UP_GROUP = 8


def interleave_halves(raw: Any, ggml_type: int, rows: int, cols: int, group: int = GATE_UP_GROUP) -> Any:  # fmt: skip
    """The row-major GGUF bytes of two stacked halves [A; B] of rows / 2 rows each, with the
    halves' rows alternating in groups: A[0:g], B[0:g], A[g:2g], B[g:2g], ... Works on numpy
    and cupy arrays alike."""
    xp = _array_module(raw)
    if rows % (2 * group):
        raise WeightFormatError(f"{rows} rows do not split into two halves of groups of {group}")
    halves = raw.reshape(2, rows // (2 * group), group, tensor_bytes(ggml_type, 1, cols))
    return xp.ascontiguousarray(halves.transpose(1, 0, 2, 3)).reshape(-1)


def _array_module(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return np
    import cupy

    return cupy


def upload(name: str, raw: np.ndarray, ggml_type: int, rows: int, cols: int) -> GpuWeight:
    """Upload host GGUF bytes (e.g. GGUFModel.raw(name)) and lay them out for the kernels."""
    import cupy as cp

    return from_device_bytes(
        name, cp.asarray(np.ascontiguousarray(raw).reshape(-1)), ggml_type, rows, cols
    )


def random_block_bytes(ggml_type: int, rows: int, cols: int, seed: int, xp: Any = None) -> Any:
    """Random GGUF-layout bytes with sane scales (|w| of order 0.01 .. 0.1): every bit pattern
    of the quants occurs. xp: numpy (host bytes) or cupy (the default: made on the GPU)."""
    cp = xp
    if cp is None:
        import cupy

        cp = cupy
    rng = cp.random.default_rng(seed)
    n = tensor_bytes(ggml_type, rows, cols)
    if ggml_type == F32:
        return (rng.standard_normal(n // 4, dtype=cp.float32) * 0.05).view(cp.uint8)
    if ggml_type in (F16, BF16):
        vals = rng.standard_normal(n // 2, dtype=cp.float32) * 0.05
        if ggml_type == F16:
            return vals.astype(cp.float16).view(cp.uint8)
        return (vals.view(cp.uint32) >> 16).astype(cp.uint16).view(cp.uint8)
    raw = rng.integers(0, 256, size=n, dtype=cp.uint8)
    nbytes = BLOCK_BYTES[ggml_type][1]
    blocks = raw.reshape(-1, nbytes)
    nb = blocks.shape[0]

    def halves(scale: float) -> Any:
        return (
            (rng.random(nb, dtype=cp.float32) * scale + scale * 0.25)
            .astype(cp.float16)
            .view(cp.uint8)
            .reshape(nb, 2)
        )

    if ggml_type in (Q4_K, Q5_K):
        blocks[:, 0:2] = halves(0.0002)  # d: scales are 6-bit, quants 4/5-bit
        blocks[:, 2:4] = halves(0.0004)  # dmin
    elif ggml_type == Q6_K:
        blocks[:, 208:210] = halves(0.00005)
    elif ggml_type == Q8_0:
        blocks[:, 0:2] = halves(0.0005)
    return raw


def random_weight(name: str, ggml_type: int, rows: int, cols: int, seed: int) -> GpuWeight:
    return from_device_bytes(
        name, random_block_bytes(ggml_type, rows, cols, seed), ggml_type, rows, cols
    )

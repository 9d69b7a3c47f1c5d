"""GGML block formats: numpy dequantization and encoders (spec section 7).

Types covered: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K. Dequantization is vectorized over all
blocks and performs the same float32 operations in the same order as `gguf.quants`, so results
are equal bit for bit. The encoders follow the search strategy of llama.cpp's reference
quantizers (weighted min/scale search for Q4_K/Q5_K, signed-scale search for Q6_K,
max-abs for Q8_0); they are used to write synthetic models, so speed matters more than the
last bit of agreement with llama.cpp.

Shapes: `shape` arguments are numpy order, the last dimension contiguous (the reverse of GGUF's
ggml order). A quantized row of `cols` values is `cols // block_size` consecutive blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

QK_K = 256  # weights per K-quant super-block
QK8_0 = 32  # weights per Q8_0 block

F32, F16, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 8, 12, 13, 14, 30


@dataclass(frozen=True)
class BlockFormat:
    """One ggml type: name, weights per block and bytes per block."""

    type_id: int
    name: str
    block_size: int
    type_size: int


FORMATS: dict[int, BlockFormat] = {
    F32: BlockFormat(F32, "F32", 1, 4),
    F16: BlockFormat(F16, "F16", 1, 2),
    BF16: BlockFormat(BF16, "BF16", 1, 2),
    Q8_0: BlockFormat(Q8_0, "Q8_0", QK8_0, 2 + QK8_0),
    Q4_K: BlockFormat(Q4_K, "Q4_K", QK_K, 2 + 2 + 12 + QK_K // 2),
    Q5_K: BlockFormat(Q5_K, "Q5_K", QK_K, 2 + 2 + 12 + QK_K // 8 + QK_K // 2),
    Q6_K: BlockFormat(Q6_K, "Q6_K", QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),
}
TYPE_IDS: dict[str, int] = {fmt.name: type_id for type_id, fmt in FORMATS.items()}


class QuantError(ValueError):
    """A tensor cannot be (de)quantized: unsupported type or a shape that does not fit blocks."""


def block_format(ggml_type: int) -> BlockFormat:
    """The block format of `ggml_type`, or QuantError naming the unsupported type."""
    fmt = FORMATS.get(int(ggml_type))
    if fmt is None:
        supported = ", ".join(f.name for f in FORMATS.values())
        raise QuantError(f"unsupported ggml type {ggml_type} (supported: {supported})")
    return fmt


def row_bytes(ggml_type: int, cols: int) -> int:
    """Bytes of one row of `cols` weights; QuantError if `cols` is not a whole number of blocks."""
    fmt = block_format(ggml_type)
    if cols % fmt.block_size:
        raise QuantError(
            f"row length {cols} is not a multiple of the {fmt.name} block size {fmt.block_size}"
        )
    return cols // fmt.block_size * fmt.type_size


def tensor_bytes(ggml_type: int, shape: Sequence[int]) -> int:
    """Bytes of a whole tensor of numpy shape `shape` (last dimension contiguous)."""
    n_rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    return n_rows * row_bytes(ggml_type, int(shape[-1]))


# ---------------------------------------------------------------------------------------------
# Dequantization
# ---------------------------------------------------------------------------------------------


def _f16(raw: np.ndarray) -> np.ndarray:
    """Little-endian fp16 fields (uint8 [..., 2]) as float32 [..., 1]."""
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32)


def unpack_scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K packed 6-bit scales (uint8 [n, 12]) -> (sc, mn), each uint8 [n, 8]."""
    low, high, nibbles = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([low & 0x3F, (nibbles & 0x0F) | ((low >> 2) & 0x30)], axis=1)
    mn = np.concatenate([high & 0x3F, (nibbles >> 4) | ((high >> 2) & 0x30)], axis=1)
    return sc, mn


def _deq_q8_0(blocks: np.ndarray) -> np.ndarray:
    d = _f16(blocks[:, :2])
    return d * blocks[:, 2:].view(np.int8).astype(np.float32)


def _k4_scales(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-sub-block multipliers (d*sc, dmin*mn) of Q4_K/Q5_K blocks, float32 [n, 8, 1]."""
    n = blocks.shape[0]
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])
    sc, mn = unpack_scale_min_k4(blocks[:, 4:16])
    scale = (d * sc.astype(np.float32)).reshape(n, 8, 1)
    offset = (dmin * mn.astype(np.float32)).reshape(n, 8, 1)
    return scale, offset


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """qs uint8 [n, 128] -> 4-bit codes [n, 8, 32]: per 32-byte group, low nibbles then high."""
    n = qs.shape[0]
    grouped = qs.reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (grouped & 0x0F).reshape(n, 8, 32)


def _deq_q4_k(blocks: np.ndarray) -> np.ndarray:
    scale, offset = _k4_scales(blocks)
    q = _nibbles(blocks[:, 16:144]).astype(np.float32)
    return (scale * q - offset).reshape(-1, QK_K)


def _deq_q5_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scale, offset = _k4_scales(blocks)
    qh = blocks[:, 16:48].reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    q = (_nibbles(blocks[:, 48:176]) | ((qh & 0x01) << 4)).astype(np.float32)
    return (scale * q - offset).reshape(-1, QK_K)


def q6_k_parts(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q6_K blocks -> (d*scale per 16-weight sub-block, float32 [n, 16, 1]; the signed codes,
    int8 [n, 16, 16]): a weight is their product."""
    n = blocks.shape[0]
    ql, qh = blocks[:, 0:128], blocks[:, 128:192]
    scales = blocks[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16(blocks[:, 208:210])
    mult = (d * scales).reshape(n, 16, 1)
    low_shifted = ql.reshape(n, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    low = (low_shifted & 0x0F).reshape(n, 8, 32)  # [half, nibble, 64] -> 8 runs of 32
    high_shifted = qh.reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(
        1, 1, 4, 1
    )
    high = (high_shifted & 0x03).reshape(n, 8, 32)
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)
    return mult, q.reshape(n, 16, 16)


def _deq_q6_k(blocks: np.ndarray) -> np.ndarray:
    mult, q = q6_k_parts(blocks)
    return (mult * q.astype(np.float32)).reshape(-1, QK_K)


DEQUANT_CHUNK_VALUES = 1 << 22
_DEQUANT_BLOCKS = {Q8_0: _deq_q8_0, Q4_K: _deq_q4_k, Q5_K: _deq_q5_k, Q6_K: _deq_q6_k}


def dequantize(data: np.ndarray, ggml_type: int, shape: Sequence[int]) -> np.ndarray:
    """Raw tensor bytes (uint8, any shape) -> float32 array of numpy shape `shape`."""
    fmt = block_format(ggml_type)
    shape = tuple(int(s) for s in shape)
    expected = tensor_bytes(ggml_type, shape)
    flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if flat.size != expected:
        raise QuantError(
            f"{fmt.name} tensor of shape {shape} needs {expected} bytes, got {flat.size}"
        )
    if fmt.type_id == F32:
        return flat.view("<f4").astype(np.float32).reshape(shape)
    if fmt.type_id == F16:
        return flat.view("<f2").astype(np.float32).reshape(shape)
    if fmt.type_id == BF16:
        return (flat.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    blocks = flat.reshape(-1, fmt.type_size)
    out = np.empty((blocks.shape[0], fmt.block_size), dtype=np.float32)
    step = max(1, DEQUANT_CHUNK_VALUES // fmt.block_size)  # bounds the temporaries' memory
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf scales propagate, as in ggml
        for start in range(0, blocks.shape[0], step):
            out[start : start + step] = _DEQUANT_BLOCKS[fmt.type_id](blocks[start : start + step])
    return out.reshape(shape)


# ---------------------------------------------------------------------------------------------
# Encoders
# ---------------------------------------------------------------------------------------------


def _nearest_int(x: np.ndarray) -> np.ndarray:
    # llama.cpp's nearest_int rounds half to even (the 1.5 * 2**23 trick), as np.rint does.
    return np.rint(x).astype(np.int32)


def _fp16_bytes(x: np.ndarray) -> np.ndarray:
    """float32 [n] -> little-endian fp16 bytes uint8 [n, 2]."""
    return x.astype("<f2").reshape(-1, 1).view(np.uint8)


def _enc_q8_0(x: np.ndarray) -> np.ndarray:
    blocks = x.reshape(-1, QK8_0)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    scaled = blocks * inv
    # round half away from zero, like C roundf() in llama.cpp and gguf-py
    q = (np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))).astype(np.int8)
    return np.concatenate([_fp16_bytes(d[:, 0]), q.view(np.uint8)], axis=1)


def _weighted_min_scale(
    x: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int
) -> tuple[np.ndarray, np.ndarray]:
    """Best (scale, min) per sub-block so that x ~ scale*L + min, L in 0..nmax, under weights
    av|x| + |x| (llama.cpp's make_qkx2_quants search). x: [m, 32] -> (scale [m], -min [m]).

    As in llama.cpp, each trial grid starts from the best min found so far (not the data min)."""
    weights = np.sqrt(np.mean(x * x, axis=1, keepdims=True)) + np.abs(x)
    top = x.max(axis=1)
    lo = np.minimum(x.min(axis=1), 0).astype(np.float32)
    flat = top == lo
    sum_w = weights.sum(axis=1)
    sum_x = (weights * x).sum(axis=1)

    def levels(iscale: np.ndarray, base: np.ndarray) -> np.ndarray:
        return np.clip(_nearest_int(iscale[:, None] * (x - base[:, None])), 0, nmax).astype(
            np.float32
        )

    def error(scale: np.ndarray, offset: np.ndarray, q: np.ndarray) -> np.ndarray:
        diff = scale[:, None] * q + offset[:, None] - x
        return (weights * diff * diff).sum(axis=1)

    with np.errstate(divide="ignore", invalid="ignore"):
        best_scale = ((top - lo) / np.float32(nmax)).astype(np.float32)
        best_min = lo.copy()
        best_err = error(best_scale, best_min, levels(np.float32(nmax) / (top - lo), lo))
        for step in range(nstep + 1):
            grid = np.float32(
                np.float32(rmin) + np.float32(rdelta) * np.float32(step) + np.float32(nmax)
            )
            q = levels(grid / (top - best_min), best_min)
            sum_l, sum_l2, sum_xl = (
                (weights * q).sum(1),
                (weights * q * q).sum(1),
                (weights * q * x).sum(1),
            )
            det = sum_w * sum_l2 - sum_l * sum_l
            scale = (sum_w * sum_xl - sum_x * sum_l) / det
            offset = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = offset > 0
            scale = np.where(positive, sum_xl / sum_l2, scale)
            offset = np.where(positive, np.float32(0), offset)
            better = (det > 0) & (error(scale, offset, q) < best_err)
            best_err = np.where(better, error(scale, offset, q), best_err)
            best_scale = np.where(better, scale, best_scale)
            best_min = np.where(better, offset, best_min)
    best_scale = np.where(flat, np.float32(0), best_scale)
    best_min = np.where(flat, lo, best_min)
    return best_scale.astype(np.float32), (-best_min).astype(np.float32)


def pack_scale_min_k4(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """6-bit sc, mn (uint8 [n, 8]) -> the 12-byte packed form of Q4_K/Q5_K (uint8 [n, 12])."""
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    low = (sc[:, :4] & 0x3F) | ((sc[:, 4:] >> 4) << 6)
    high = (mn[:, :4] & 0x3F) | ((mn[:, 4:] >> 4) << 6)
    nibbles = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    return np.concatenate([low, high, nibbles], axis=1)


def _k4_codes(x: np.ndarray, nmax: int, rmin: float, nstep: int) -> tuple[np.ndarray, np.ndarray]:
    """Shared Q4_K/Q5_K core: x [n, 256] -> (header bytes uint8 [n, 16], codes uint8 [n, 256])."""
    n = x.shape[0]
    sub = x.reshape(n * 8, 32)
    scales, mins = _weighted_min_scale(sub, nmax, rmin, 0.1, nstep)
    scales, mins = scales.reshape(n, 8), np.maximum(mins.reshape(n, 8), 0)
    max_scale, max_min = scales.max(axis=1), mins.max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_scale = np.where(max_scale > 0, np.float32(63) / max_scale, np.float32(0))
        inv_min = np.where(max_min > 0, np.float32(63) / max_min, np.float32(0))
    sc = np.minimum(_nearest_int(inv_scale[:, None] * scales), 63).astype(np.uint8)
    mn = np.minimum(_nearest_int(inv_min[:, None] * mins), 63).astype(np.uint8)
    d_bytes = _fp16_bytes((max_scale / np.float32(63)).astype(np.float32))
    dmin_bytes = _fp16_bytes((max_min / np.float32(63)).astype(np.float32))
    header = np.concatenate([d_bytes, dmin_bytes, pack_scale_min_k4(sc, mn)], axis=1)
    step, offset = _k4_scales(header)  # the multipliers as the decoder will see them
    step, offset = step.reshape(n, 8, 1), offset.reshape(n, 8, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = _nearest_int((x.reshape(n, 8, 32) + offset) / step)
    q = np.where(step == 0, 0, np.clip(q, 0, nmax))
    return header, q.astype(np.uint8).reshape(n, QK_K)


def _pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """4-bit codes [n, 256] -> qs [n, 128]: per 64 values, first 32 low nibbles, next 32 high."""
    n = codes.shape[0]
    g = (codes & 0x0F).reshape(n, 4, 2, 32)
    return (g[:, :, 0] | (g[:, :, 1] << 4)).reshape(n, 128)


def _enc_q4_k(x: np.ndarray) -> np.ndarray:
    header, codes = _k4_codes(x.reshape(-1, QK_K), 15, -1.0, 20)
    return np.concatenate([header, _pack_nibbles(codes)], axis=1)


def _enc_q5_k(x: np.ndarray) -> np.ndarray:
    header, codes = _k4_codes(x.reshape(-1, QK_K), 31, -0.5, 15)
    n = codes.shape[0]
    fifth = (codes >> 4).reshape(n, 8, 32)  # bit s of qh[l] = 5th bit of sub-block s, element l
    qh = (fifth << np.arange(8, dtype=np.uint8).reshape(1, 8, 1)).sum(axis=1, dtype=np.uint8)
    return np.concatenate([header, qh, _pack_nibbles(codes)], axis=1)


def _signed_scale(x: np.ndarray, nmax: int) -> np.ndarray:
    """Best signed scale per group so that x ~ scale*L, L in -nmax..nmax-1, weights x**2
    (llama.cpp's make_qx_quants, rmse_type 1). x: [m, 16] -> scale [m]."""
    idx = np.abs(x).argmax(axis=1)
    peak = x[np.arange(x.shape[0]), idx]
    zero = np.abs(peak) < 1e-15
    peak = np.where(zero, np.float32(1), peak)
    w = x * x

    def fit(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = np.clip(_nearest_int(iscale[:, None] * x), -nmax, nmax - 1).astype(np.float32)
        return (w * x * q).sum(axis=1), (w * q * q).sum(axis=1)

    sumlx, suml2 = fit(np.float32(-nmax) / peak)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 > 0, sumlx / suml2, np.float32(0))
    best = scale * sumlx
    for step in [s for s in range(-9, 10) if s != 0]:
        sumlx, suml2 = fit(np.float32(-(nmax + 0.1 * step)) / peak)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(better, sumlx / suml2, scale)
        best = np.where(better, scale * sumlx, best)
    return np.where(zero, np.float32(0), scale).astype(np.float32)


def _enc_q6_k(x: np.ndarray) -> np.ndarray:
    blocks = x.reshape(-1, QK_K)
    n = blocks.shape[0]
    scales = _signed_scale(blocks.reshape(n * 16, 16), 32).reshape(n, 16)
    pick = np.abs(scales).argmax(axis=1)
    max_scale = scales[np.arange(n), pick]
    empty = np.abs(max_scale) < 1e-15
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(empty, np.float32(0), np.float32(-128) / max_scale).astype(np.float32)
        d = np.where(empty, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    sub = np.clip(_nearest_int(iscale[:, None] * scales), -128, 127).astype(np.int8)
    d_bytes = _fp16_bytes(d)
    step = (_f16(d_bytes) * sub.astype(np.float32)).reshape(n, 16, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = _nearest_int(blocks.reshape(n, 16, 16) / step)
    codes = (np.where(step == 0, 0, np.clip(q, -32, 31)) + 32).astype(np.uint8).reshape(n, 2, 4, 32)
    ql = (codes[:, :, 0:2] & 0x0F) | ((codes[:, :, 2:4] & 0x0F) << 4)  # [n, half, 2, 32]
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    qh = ((codes >> 4) << shifts).sum(axis=2, dtype=np.uint8)  # [n, half, 32]
    return np.concatenate(
        [ql.reshape(n, 128), qh.reshape(n, 64), sub.view(np.uint8), d_bytes], axis=1
    )


_ENCODERS = {Q8_0: _enc_q8_0, Q4_K: _enc_q4_k, Q5_K: _enc_q5_k, Q6_K: _enc_q6_k}


def quantize(values: np.ndarray, ggml_type: int) -> np.ndarray:
    """float values of numpy shape (..., cols) -> raw bytes uint8 [rows, row_bytes]."""
    fmt = block_format(ggml_type)
    x = np.ascontiguousarray(values, dtype=np.float32)
    if x.ndim == 0:
        raise QuantError("cannot quantize a scalar")
    cols = x.shape[-1]
    n_rows = x.size // cols if cols else 0
    width = row_bytes(ggml_type, cols)
    x = x.reshape(n_rows, cols)
    if fmt.type_id == F32:
        return x.astype("<f4").view(np.uint8).reshape(n_rows, width)
    if fmt.type_id == F16:
        return x.astype("<f2").view(np.uint8).reshape(n_rows, width)
    if fmt.type_id == BF16:
        return _to_bf16(x).view(np.uint8).reshape(n_rows, width)
    return _ENCODERS[fmt.type_id](x).reshape(n_rows, width)


def _to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even, NaN kept quiet (as gguf-py does)."""
    bits = x.view(np.uint32).astype(np.uint64)
    nan = np.isnan(x)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    quiet = (bits >> 16) | 64
    return np.where(nan, quiet, rounded).astype("<u2")

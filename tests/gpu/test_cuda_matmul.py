"""Weight x rows products and the embedding gather on the GPU against numpy (engine/quants.py
dequantization in float64) for every weight format, on fresh random blocks and activations,
with poisoned outputs. Tolerance: f16 operands with f32 accumulation (METHOD.md: 1e-3 region);
f32 weights go through the exact f32 kernel (1e-6). The tiled kernel for many rows (wmat_gemm)
must give bit for bit what the row kernel (wmat_rows) gives: same fragments, same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from engine import quants
from engine.cuda import build, kernels, weights

pytestmark = pytest.mark.gpu

FORMATS = [
    weights.Q4_K,
    weights.Q5_K,
    weights.Q6_K,
    weights.Q8_0,
    weights.F16,
    weights.F32,
    weights.BF16,
]
F16_OPERAND_TOL = 2e-3
F32_TOL = 1e-6
QUANTIZED = [weights.Q4_K, weights.Q5_K, weights.Q6_K, weights.Q8_0]


def _weight(
    ggml_type: int, rows: int, cols: int, seed: int
) -> tuple[weights.GpuWeight, np.ndarray]:
    raw = weights.random_block_bytes(ggml_type, rows, cols, seed, xp=np)
    dense = quants.dequantize(raw, ggml_type, (rows, cols)).astype(np.float64)
    return weights.upload(f"w{ggml_type}", raw, ggml_type, rows, cols), dense


def _rel(out: np.ndarray, ref: np.ndarray) -> float:
    assert np.isfinite(out).all(), "output has NaN/inf (unwritten or overflowed)"
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("ggml_type", FORMATS)
@pytest.mark.parametrize("n_rows", [1, 5, 8, 13, 20, 32, 45, 130])
def test_matmul_matches_numpy(ggml_type: int, n_rows: int) -> None:
    import cupy as cp

    rng = np.random.default_rng(1000 * ggml_type + n_rows)
    # 72 rows: a partial CTA tile and a partial 16-row tile (padded in the tile-major layout)
    w, dense = _weight(ggml_type, 72, 768, int(rng.integers(1 << 30)))
    x = rng.standard_normal((n_rows, 768)).astype(np.float32)
    y = cp.full((n_rows, 72), np.nan, dtype=cp.float32)
    kernels.matmul(w, cp.asarray(x), y)
    tol = F32_TOL if w.ggml_type == weights.F32 else F16_OPERAND_TOL
    assert _rel(cp.asnumpy(y), x.astype(np.float64) @ dense.T) < tol


@pytest.mark.parametrize("ggml_type", [*QUANTIZED, weights.F16])
@pytest.mark.parametrize("n_rows", [5, 33, 64, 130])
@pytest.mark.parametrize("tile", [64, 128])
def test_tiled_products_equal_the_row_kernel(ggml_type: int, n_rows: int, tile: int) -> None:
    """wmat_gemm (partial row and weight tiles, an uneven K split over the four classes)
    against wmat_rows in passes of 32 rows, bit for bit, accumulate on and off."""
    import cupy as cp

    rng = np.random.default_rng(500 + 10 * ggml_type + n_rows)
    w, _ = _weight(ggml_type, 72, 256 * 23, int(rng.integers(1 << 30)))  # 23 = 6+6+6+5 per class
    x = cp.asarray(rng.standard_normal((n_rows, 256 * 23)).astype(np.float32))
    base = cp.asarray(rng.standard_normal((n_rows, 72)).astype(np.float32))
    results = []
    saved = build.MATMUL_CONFIG
    try:
        tiled = build.MatmulConfig(gemm=True, gemm_min_rows=1, gemm_tile=tile)
        for config in (build.MatmulConfig(gemm=False), tiled):
            build.MATMUL_CONFIG = config
            y = cp.full((n_rows, 72), np.nan, dtype=cp.float32)
            kernels.matmul(w, x, y)
            acc = base.copy()
            kernels.matmul(w, x, acc, accumulate=True)
            results.append((y, acc))
    finally:
        build.MATMUL_CONFIG = saved
    (y0, a0), (y1, a1) = results
    assert bool(cp.isfinite(y1).all())
    assert cp.array_equal(y0, y1)
    assert cp.array_equal(a0, a1)


@pytest.mark.parametrize("ggml_type", [*QUANTIZED, weights.F16, weights.F32])
@pytest.mark.parametrize("n_rows", [1, 2, 3, 4, 7, 9, 20, 32, 130])
def test_packed_activations_give_the_f32_path_bits(ggml_type: int, n_rows: int) -> None:
    """The kernels reading packed f16 activations (mmh_*, and from 128 rows mmgh_* / mmg8h_*)
    give the f32-input kernels' results bit for bit, accumulate on and off; the exact f32
    kernel ignores xh (poisoned there, so reading it would show)."""
    import cupy as cp

    rng = np.random.default_rng(70 + 10 * ggml_type + n_rows)
    w, _ = _weight(ggml_type, 72, 256 * 5, int(rng.integers(1 << 30)))
    x = cp.asarray(rng.standard_normal((n_rows, 256 * 5)).astype(np.float32))
    reads_packed = ggml_type != weights.F32
    xh = (
        kernels.pack_activations(x)
        if reads_packed
        else cp.full((kernels.packed_rows(n_rows), x.shape[1]), np.nan, cp.float16)
    )
    base = cp.asarray(rng.standard_normal((n_rows, 72)).astype(np.float32))
    saved = build.MATMUL_CONFIG
    try:
        for tile in (64, 128):
            build.MATMUL_CONFIG = build.MatmulConfig(gemm_tile=tile)
            out = []
            for packed in (None, xh):
                y = cp.full((n_rows, 72), np.nan, dtype=cp.float32)
                kernels.matmul(w, x, y, xh=packed)
                acc = base.copy()
                kernels.matmul(w, x, acc, accumulate=True, xh=packed)
                out.append((y, acc))
            (y0, a0), (y1, a1) = out
            assert bool(cp.isfinite(y0).all())
            assert cp.array_equal(y0, y1), f"gemm tile {tile}"
            assert cp.array_equal(a0, a1), f"gemm tile {tile}"
    finally:
        build.MATMUL_CONFIG = saved


@pytest.mark.parametrize("ggml_type", [*QUANTIZED, weights.F16])
@pytest.mark.parametrize("n_rows", [1, 3, 5, 8])
def test_deep_narrow_kernels_give_the_plain_kernels_bits(ggml_type: int, n_rows: int) -> None:
    """The `_1d` kernels (two super-blocks in flight per warp, chosen for narrow products) give
    the plain single-n-tile kernels' results bit for bit, f32 and packed activations, with an
    even K split over the four classes and an uneven one (3 super-blocks per warp; 4 or 5: the
    three buffers taking turns end at each of their places); so do they with their ring of raw
    blocks (MatmulConfig.deep_turns off)."""
    import cupy as cp

    rng = np.random.default_rng(90 + 10 * ggml_type + n_rows)
    configs = [build.MatmulConfig(deep_narrow=deep) for deep in (False, True)]
    configs.append(build.MatmulConfig(deep_turns=False))
    for cfg, suffix in zip(configs, ("_1", "_1d", "_1d"), strict=True):
        assert cfg.row_tile(ggml_type, n_rows, False, 72, 132).name.endswith(suffix)
    for cols in (256 * 12, 256 * 19):
        w, _ = _weight(ggml_type, 72, cols, int(rng.integers(1 << 30)))
        x = cp.asarray(rng.standard_normal((n_rows, cols)).astype(np.float32))
        _assert_same_bits_under(configs, w, x)


def _row_tilings() -> Iterator[build.MatmulConfig]:
    """The default row tiling, the deep single-n-tile kernels everywhere, single-n-tile row
    groups and the `_2` kernels for few rows, each set as build.MATMUL_CONFIG in turn (the
    default put back after)."""
    saved = build.MATMUL_CONFIG
    configs = [saved, build.MatmulConfig(deep_all=True), build.MatmulConfig(max_nt=1)]
    try:
        for cfg in [*configs, build.MatmulConfig(few_rows=0)]:
            build.MATMUL_CONFIG = cfg
            yield cfg
    finally:
        build.MATMUL_CONFIG = saved


@pytest.mark.parametrize("ggml_type", [weights.Q4_K, weights.Q6_K, weights.Q8_0])
@pytest.mark.parametrize("n_rows", [9, 12, 20, 32])
def test_row_groups_of_narrower_kernels_give_the_same_bits(ggml_type: int, n_rows: int) -> None:
    """MatmulConfig.max_nt 1 and 2 (more rows as further row groups of CTAs on the same weight
    tiles) and the `_2f` kernels of passes of few rows (one m-tile per warp), on and off, give
    the default tiling's results bit for bit, f32 and packed activations; so does the ring of
    raw blocks instead of two buffers taking turns (MatmulConfig.turns)."""
    import cupy as cp

    rng = np.random.default_rng(110 + 10 * ggml_type + n_rows)
    w, _ = _weight(ggml_type, 72, 256 * 7, int(rng.integers(1 << 30)))
    x = cp.asarray(rng.standard_normal((n_rows, 256 * 7)).astype(np.float32))
    configs = [build.MatmulConfig(max_nt=n) for n in (build.MAX_NT, 2, 1)]
    configs += [build.MatmulConfig(few_rows=n) for n in (0, 16)]
    configs.append(build.MatmulConfig(turns=False))  # the row kernels' ring of raw blocks
    if n_rows <= 12:  # the default runs `_2f` here, few_rows=0 the `_2` kernel
        assert configs[0].row_tile(ggml_type, n_rows, True, 72, 132).name.endswith("_2f")
        assert configs[3].row_tile(ggml_type, n_rows, True, 72, 132).name.endswith("_2")
    _assert_same_bits_under(configs, w, x)


def _assert_same_bits_under(configs: list[build.MatmulConfig], w: Any, x: Any) -> None:
    """W x under each tiling, from f32 and from packed activations: all bit for bit the first."""
    import cupy as cp

    xh = kernels.pack_activations(x)
    saved = build.MATMUL_CONFIG
    out = []
    try:
        for cfg in configs:
            build.MATMUL_CONFIG = cfg
            for packed in (None, xh):
                y = cp.full((x.shape[0], w.rows), np.nan, dtype=cp.float32)
                kernels.matmul(w, x, y, xh=packed)
                out.append(y)
    finally:
        build.MATMUL_CONFIG = saved
    assert bool(cp.isfinite(out[0]).all())
    for y in out[1:]:
        assert cp.array_equal(y, out[0])


@pytest.mark.parametrize(
    "ggml_type", [weights.Q4_K, weights.Q5_K, weights.Q6_K, weights.Q8_0, weights.F16]
)
@pytest.mark.parametrize("n_rows", [1, 3, 4, 7, 12, 20, 40])
def test_gate_up_product_finishing_swiglu_gives_product_then_swiglu_bits(
    ggml_type: int, n_rows: int
) -> None:
    """kernels.matmul_swiglu on a gate|up weight with rows alternating in groups of 8 writes
    exactly the packed h that the product followed by Ops.swiglu(interleaved) writes, under
    every row tiling (1-4 n-tiles, the `_1d`/`_2f` variants, two row groups at 40 rows), from
    f32 and packed activations; and h is silu(gate) * up of the halves (numpy, f16 operands)."""
    import cupy as cp

    from engine.cuda.kernels import Ops
    from tests.gpu.test_cuda_ops import SMALL  # the ops module its tests build

    rng = np.random.default_rng(300 + 10 * ggml_type + n_rows)
    F, K = 48, 768
    raw = weights.random_block_bytes(ggml_type, 2 * F, K, int(rng.integers(1 << 30)), xp=np)
    dense = quants.dequantize(raw, ggml_type, (2 * F, K)).astype(np.float64)
    mixed = weights.interleave_halves(raw, ggml_type, 2 * F, K)
    w = weights.upload("gate+up", mixed, ggml_type, 2 * F, K)
    x = cp.asarray(rng.standard_normal((n_rows, K)).astype(np.float32))
    xh = kernels.pack_activations(x)
    ops = Ops(SMALL)
    rows = kernels.packed_rows(n_rows)

    gu = cp.full((n_rows, 2 * F), np.nan, dtype=cp.float32)
    kernels.matmul(w, x, gu, xh=xh)
    h = cp.full((n_rows, F), np.nan, dtype=cp.float32)
    want = cp.full((rows, kernels.packed_width(F)), np.nan, dtype=cp.float16)
    ops.swiglu(gu, h, want, interleaved=True)
    for cfg in _row_tilings():
        for packed in (None, xh):
            got = cp.full((rows, kernels.packed_width(F)), np.nan, dtype=cp.float16)
            kernels.matmul_swiglu(w, x, packed, got)
            # the columns past F pad the rows to whole groups of 8 quads: neither kernel
            # writes them
            assert cp.array_equal(
                kernels.unpack_activations(got, n_rows)[:n_rows, :F],
                kernels.unpack_activations(want, n_rows)[:n_rows, :F],
            ), (cfg, packed is None)
    xd = cp.asnumpy(x).astype(np.float64)
    g, u = xd @ dense[:F].T, xd @ dense[F:].T
    ref = g / (1 + np.exp(-g)) * u
    assert _rel(cp.asnumpy(h).astype(np.float64), ref) < 5 * F16_OPERAND_TOL


@pytest.mark.parametrize("types", sorted(build.PAIRED_TYPES))
@pytest.mark.parametrize("n_rows", [1, 3, 4, 7, 12, 20, 40])
def test_a_pair_of_products_in_one_launch_gives_two_launches_bits(
    types: tuple[int, int], n_rows: int
) -> None:
    """kernels.matmul_pair: two weights of different formats (72 and 40 rows: partial tiles)
    on the same packed activations, into their own columns of one output, in either order
    and under every row tiling: the bits of two launches; the columns of neither untouched."""
    import cupy as cp

    rng = np.random.default_rng(500 + 10 * types[0] + n_rows)
    w_a, _ = _weight(types[0], 72, 768, int(rng.integers(1 << 30)))
    w_b, _ = _weight(types[1], 40, 768, int(rng.integers(1 << 30)))
    x = cp.asarray(rng.standard_normal((n_rows, 768)).astype(np.float32))
    xh = kernels.pack_activations(x)
    want = cp.full((n_rows, 130), np.nan, dtype=cp.float32)  # b at 3.., a at 50..; 43-49 unused
    kernels.matmul(w_b, x, want[:, 3:43], xh=xh)
    kernels.matmul(w_a, x, want[:, 50:122], xh=xh)
    for cfg in _row_tilings():
        for parts in (((w_a, 50), (w_b, 3)), ((w_b, 3), (w_a, 50))):
            assert kernels.pairs(parts[0][0], parts[1][0], n_rows)
            got = cp.full((n_rows, 130), np.nan, dtype=cp.float32)
            kernels.matmul_pair(parts, x, xh, got)
            assert cp.array_equal(got, want, equal_nan=True), cfg
    assert bool(cp.isfinite(want[:, 3:43]).all() and cp.isfinite(want[:, 50:122]).all())


@pytest.mark.parametrize("n_rows", [1, 2, 3, 4, 9])
def test_pack_activations_layout(n_rows: int) -> None:
    """Each group of four stored x0 x2 x1 x3, rounded to nearest f16; rows in groups of g = 1,
    4 or 8 by the row count that store quad by quad their rows' quads side by side, quad q of a
    row in slot q with bits 0 and 2 swapped, rows padded to 32 halves (common.cuh packed_at);
    unpack inverts."""
    import cupy as cp

    K = 40  # a group of 8 quads and a part of the next
    x = cp.arange(n_rows * K, dtype=cp.float32).reshape(n_rows, K) + 0.1
    g = {1: 1, 2: 4, 3: 4, 4: 4, 9: 8}[n_rows]
    assert 1 << kernels.packed_group(n_rows) == g
    packed = cp.asnumpy(kernels.pack_activations(x))
    assert packed.shape == (-(-n_rows // g) * g, 64) == (kernels.packed_rows(n_rows), 64)
    flat = packed.reshape(-1)
    for r in range(n_rows):
        for q in range(K // 4):
            slot = (q & ~5) | ((q & 1) << 2) | ((q >> 2) & 1)
            at = (r // g) * g * 64 + (slot * g + r % g) * 4
            want = [x[r, 4 * q + i].item() for i in (0, 2, 1, 3)]
            assert flat[at : at + 4].tolist() == np.array(want, np.float16).tolist()
    back = kernels.unpack_activations(kernels.pack_activations(x), n_rows)
    assert cp.array_equal(back[:n_rows, :K], x.astype(cp.float16))
    assert not bool(back[n_rows:].any()) and not bool(back[:, K:].any())  # padding: zero


def test_matmul_rejects_misshapen_packed_activations() -> None:
    import cupy as cp

    w, _ = _weight(weights.Q4_K, 32, 512, 1)
    x, y = cp.zeros((2, 512), cp.float32), cp.zeros((2, 32), cp.float32)
    with pytest.raises(ValueError, match="packed"):
        kernels.matmul(w, x, y, xh=cp.zeros((2, 256), cp.float16))
    with pytest.raises(ValueError, match="packed"):
        kernels.matmul(w, x, y, xh=cp.zeros((2, 512), cp.float32))
    with pytest.raises(ValueError, match="packed"):  # 2 rows need a whole group of 4
        kernels.matmul(w, x, y, xh=cp.zeros((2, 512), cp.float16))


@pytest.mark.parametrize("ggml_type", [weights.Q4_K, weights.Q6_K])
def test_matmul_accumulates_into_output(ggml_type: int) -> None:
    import cupy as cp

    rng = np.random.default_rng(7)
    w, dense = _weight(ggml_type, 64, 512, 3)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    base = rng.standard_normal((3, 64)).astype(np.float32)
    y = cp.asarray(base)
    kernels.matmul(w, cp.asarray(x), y, accumulate=True)
    assert _rel(cp.asnumpy(y) - base, x.astype(np.float64) @ dense.T) < F16_OPERAND_TOL


@pytest.mark.parametrize("ggml_type", [*QUANTIZED, weights.F32])
def test_matmul_rows_do_not_depend_on_the_batch(ggml_type: int) -> None:
    """A row's product is bit-identical alone, in a batch of 8, 20, 40 (row kernel) or 140
    (tiled kernel) rows (batch invariance)."""
    import cupy as cp

    rng = np.random.default_rng(11)
    w, _ = _weight(ggml_type, 96, 1024, 5)
    x = cp.asarray(rng.standard_normal((140, 1024)).astype(np.float32))
    full = cp.full((140, 96), np.nan, dtype=cp.float32)
    kernels.matmul(w, x, full)
    for count in (1, 8, 20, 40):
        part = cp.full((count, 96), np.nan, dtype=cp.float32)
        kernels.matmul(w, cp.ascontiguousarray(x[:count]), part)
        assert cp.array_equal(part, full[:count]), f"rows changed with a batch of {count}"
    last = cp.full((1, 96), np.nan, dtype=cp.float32)
    kernels.matmul(w, cp.ascontiguousarray(x[137:138]), last)
    assert cp.array_equal(last[0], full[137])


@pytest.mark.parametrize("ggml_type", FORMATS)
def test_embedding_rows_are_exact_dequantization(ggml_type: int) -> None:
    import cupy as cp

    w, dense = _weight(ggml_type, 50, 768, 21 + ggml_type)  # three CTAs per row
    tokens = np.array([3, 0, 49, 3, 17], dtype=np.int32)
    out = cp.full((5, 768), np.nan, dtype=cp.float32)
    kernels.embed(w, cp.asarray(tokens), out)
    np.testing.assert_allclose(cp.asnumpy(out), dense[tokens], rtol=1e-6, atol=1e-7)


def test_matmul_rejects_bad_shapes() -> None:
    import cupy as cp

    w, _ = _weight(weights.Q4_K, 32, 256, 1)
    with pytest.raises(kernels.LaunchError):
        kernels.matmul(w, cp.zeros((2, 128), dtype=cp.float32), cp.zeros((2, 32), dtype=cp.float32))
    with pytest.raises(weights.WeightFormatError):
        weights.random_weight("odd", weights.Q8_0, 4, 96, 0)
    raw = weights.random_block_bytes(weights.Q5_K, 16, 512, 2)
    raw[176 * 5 : 176 * 5 + 2] = cp.asarray(np.array([8.0], np.float16).view(np.uint8))
    with pytest.raises(weights.WeightFormatError, match="block scale d"):
        weights.from_device_bytes("big", raw, weights.Q5_K, 16, 512)

"""The CUDA weight layout made on the CPU: engine/cuda/weights.tile_major puts every unit (one
row's 256 elements) where quant.cuh's unit_index looks for it, and pads the rows with zeros."""

from __future__ import annotations

import numpy as np
import pytest

from engine.cuda import weights


def unit_index(rows_cols: tuple[int, int], row: int, sb: int) -> int:
    """quant.cuh's unit_index, in Python."""
    _, cols = rows_cols
    return ((row >> 4) * (cols >> 8) + sb) * 16 + (row & 15)


@pytest.mark.parametrize(
    "ggml_type", [weights.Q4_K, weights.Q5_K, weights.Q6_K, weights.Q8_0, weights.F16]
)
@pytest.mark.parametrize("rows", [16, 37, 48])
def test_units_land_at_unit_index(ggml_type: int, rows: int) -> None:
    cols = 768
    raw = weights.random_block_bytes(ggml_type, rows, cols, seed=rows, xp=np)
    per, nbytes = weights.BLOCK_BYTES[ggml_type]
    unit = 256 // per * nbytes
    out = weights.tile_major(raw, ggml_type, rows, cols)
    padded = -(-rows // 16) * 16
    assert out.shape == (padded * (cols // 256) * unit,)
    units = out.reshape(-1, unit)
    original = raw.reshape(rows, cols // 256, unit)
    for row in range(padded):
        for sb in range(cols // 256):
            got = units[unit_index((rows, cols), row, sb)]
            want = original[row, sb] if row < rows else np.zeros(unit, np.uint8)
            np.testing.assert_array_equal(got, want)


def test_rejects_a_row_length_that_is_not_whole_super_blocks() -> None:
    with pytest.raises(weights.WeightFormatError):
        weights.check_shape("odd", weights.Q8_0, 4, 96)


def test_rejects_more_rows_than_the_products_grid_takes() -> None:
    # f32 weights run on mm_f32_exact, whose grid puts the rows on x: no such cap
    weights.check_shape("wide", weights.F32, weights.MAX_PRODUCT_ROWS + 16, 256)
    weights.check_shape("edge", weights.Q4_K, weights.MAX_PRODUCT_ROWS, 256)
    with pytest.raises(weights.WeightFormatError, match="llama-server"):
        weights.check_shape("huge", weights.Q4_K, weights.MAX_PRODUCT_ROWS + 1, 256)


@pytest.mark.parametrize("ggml_type", [weights.Q4_K, weights.Q6_K, weights.Q8_0, weights.F16])
def test_gate_up_halves_alternate_in_groups_of_eight(ggml_type: int) -> None:
    """interleave_halves: row 16i + j of the result is the gate's row 8i + j (j < 8), else the
    up's row 8i + j - 8; the bytes of every row unchanged (matmul.cu MM_SWIGLU reads gate and
    up of one feature 8 rows apart in a 16-row tile)."""
    rows, cols = 48, 512  # gate and up of 24 rows each
    raw = weights.random_block_bytes(ggml_type, rows, cols, seed=7, xp=np)
    row_bytes = weights.tensor_bytes(ggml_type, 1, cols)
    original = raw.reshape(rows, row_bytes)
    out = weights.interleave_halves(raw, ggml_type, rows, cols).reshape(rows, row_bytes)
    half = rows // 2
    for r in range(rows):
        group, j = divmod(r, 16)
        want = original[8 * group + j] if j < 8 else original[half + 8 * group + j - 8]
        np.testing.assert_array_equal(out[r], want)


def test_interleave_refuses_halves_of_partial_groups() -> None:
    raw = weights.random_block_bytes(weights.Q8_0, 20, 256, seed=1, xp=np)
    with pytest.raises(weights.WeightFormatError):
        weights.interleave_halves(raw, weights.Q8_0, 20, 256)

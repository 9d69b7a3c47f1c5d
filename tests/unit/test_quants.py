"""engine.quants: bit-exact dequantization against gguf-py, encoders as good as llama.cpp's."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants

from engine import quants

BLOCK_TYPES = [quants.Q8_0, quants.Q4_K, quants.Q5_K, quants.Q6_K]
ALL_TYPES = [quants.F32, quants.F16, quants.BF16, *BLOCK_TYPES]

# Relative RMS round-trip error of llama.cpp's own reference quantizers (ggml-quants.c
# quantize_row_*_ref, compiled standalone) on `_gaussian()` below. Our encoders follow the
# same search, so they must land within 0.5% of these; 96-99.7% of blocks come out identical
# (the rest differ by float summation order).
LLAMACPP_REL_RMSE = {
    quants.Q8_0: 0.00536,
    quants.Q4_K: 0.07142,
    quants.Q5_K: 0.03611,
    quants.Q6_K: 0.01774,
}


def _gaussian() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((256, 1024)).astype(np.float32)


def _random_blocks(ggml_type: int, n_blocks: int, seed: int, sane_scales: bool) -> np.ndarray:
    """Random bytes for n_blocks blocks; with sane_scales the fp16 scale fields are finite."""
    fmt = quants.FORMATS[ggml_type]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n_blocks, fmt.type_size), dtype=np.uint8)
    if sane_scales:
        scale = rng.uniform(-0.1, 0.1, size=(n_blocks, 2)).astype("<f2").view(np.uint8)
        if ggml_type in (quants.Q4_K, quants.Q5_K):
            raw[:, 0:4] = scale
        elif ggml_type == quants.Q6_K:
            raw[:, 208:210] = scale[:, 0:2]
        else:
            raw[:, 0:2] = scale[:, 0:2]
    return raw


@pytest.mark.parametrize("sane_scales", [True, False], ids=["finite", "any-bits"])
@pytest.mark.parametrize("ggml_type", BLOCK_TYPES, ids=lambda t: quants.FORMATS[t].name)
def test_block_dequantize_is_bit_identical_to_gguf(ggml_type: int, sane_scales: bool) -> None:
    fmt = quants.FORMATS[ggml_type]
    raw = _random_blocks(ggml_type, 96, seed=ggml_type, sane_scales=sane_scales).reshape(8, -1)
    ours = quants.dequantize(raw, ggml_type, (8, 12 * fmt.block_size))
    with np.errstate(invalid="ignore", over="ignore"):
        ref = gguf_quants.dequantize(raw, GGMLQuantizationType(ggml_type))
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))  # bits, NaN included


@pytest.mark.parametrize("ggml_type", [quants.F16, quants.BF16], ids=["F16", "BF16"])
def test_half_formats_match_gguf_both_ways(ggml_type: int) -> None:
    values = np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32) * 100
    values[0, :4] = [np.inf, -np.inf, np.nan, 0.0]
    encoded = quants.quantize(values, ggml_type)
    ref = gguf_quants.quantize(values, GGMLQuantizationType(ggml_type))
    assert np.array_equal(encoded, ref.view(np.uint8).reshape(encoded.shape))
    decoded = quants.dequantize(encoded, ggml_type, values.shape)
    assert np.array_equal(
        decoded.view(np.uint32),
        gguf_quants.dequantize(ref, GGMLQuantizationType(ggml_type)).view(np.uint32),
    )


def test_f32_round_trip_is_exact() -> None:
    values = np.random.default_rng(4).standard_normal((3, 5)).astype(np.float32)
    assert np.array_equal(
        quants.dequantize(quants.quantize(values, quants.F32), quants.F32, (3, 5)), values
    )


def test_q8_0_encoder_is_bit_identical_to_gguf() -> None:
    values = _gaussian()
    values[0, :32] = 0.0  # an all-zero block
    values[1, :32] = 0.5  # ties at the rounding midpoint
    ref = gguf_quants.quantize(values, GGMLQuantizationType.Q8_0)
    assert np.array_equal(quants.quantize(values, quants.Q8_0), ref)


@pytest.mark.parametrize("ggml_type", BLOCK_TYPES, ids=lambda t: quants.FORMATS[t].name)
def test_encoder_error_is_within_llamacpp_quantizer(ggml_type: int) -> None:
    values = _gaussian()
    decoded = quants.dequantize(quants.quantize(values, ggml_type), ggml_type, values.shape)
    rel_rmse = float(np.sqrt(np.mean((decoded - values) ** 2)) / np.std(values))
    assert rel_rmse <= LLAMACPP_REL_RMSE[ggml_type] * 1.005, rel_rmse


@pytest.mark.parametrize("ggml_type", BLOCK_TYPES, ids=lambda t: quants.FORMATS[t].name)
def test_encoders_handle_degenerate_rows(ggml_type: int) -> None:
    rows = np.zeros((5, 256), dtype=np.float32)
    rows[1] = 3.0  # constant positive
    rows[2] = -2.5  # constant negative
    rows[3] = np.linspace(-1e-3, 1e4, 256)  # huge dynamic range
    rows[4, 7] = 1.0  # a single spike
    decoded = quants.dequantize(quants.quantize(rows, ggml_type), ggml_type, rows.shape)
    assert np.isfinite(decoded).all()
    assert np.array_equal(decoded[0], rows[0])
    assert np.allclose(decoded[1:3], rows[1:3], rtol=0.02)
    assert abs(decoded[4, 7] - 1.0) < 0.05 and np.abs(np.delete(decoded[4], 7)).max() < 0.05


def test_block_layout_constants() -> None:
    sizes = {
        quants.FORMATS[t].name: (quants.FORMATS[t].block_size, quants.FORMATS[t].type_size)
        for t in ALL_TYPES
    }
    assert sizes == {
        "F32": (1, 4),
        "F16": (1, 2),
        "BF16": (1, 2),
        "Q8_0": (32, 34),
        "Q4_K": (256, 144),
        "Q5_K": (256, 176),
        "Q6_K": (256, 210),
    }
    for t in ALL_TYPES:
        block, size = gguf_quants.GGML_QUANT_SIZES[GGMLQuantizationType(t)]
        assert (block, size) == (quants.FORMATS[t].block_size, quants.FORMATS[t].type_size)


def test_bad_input_gives_clear_errors() -> None:
    with pytest.raises(quants.QuantError, match="unsupported ggml type 2"):
        quants.dequantize(np.zeros(18, np.uint8), 2, (32,))
    with pytest.raises(quants.QuantError, match="not a multiple of the Q4_K block size 256"):
        quants.quantize(np.zeros((2, 100), np.float32), quants.Q4_K)
    with pytest.raises(quants.QuantError, match="needs 288 bytes, got 144"):
        quants.dequantize(np.zeros(144, np.uint8), quants.Q4_K, (2, 256))


def test_pack_unpack_scale_min_round_trip() -> None:
    rng = np.random.default_rng(5)
    sc = rng.integers(0, 64, size=(50, 8), dtype=np.uint8)
    mn = rng.integers(0, 64, size=(50, 8), dtype=np.uint8)
    got_sc, got_mn = quants.unpack_scale_min_k4(quants.pack_scale_min_k4(sc, mn))
    assert np.array_equal(got_sc, sc) and np.array_equal(got_mn, mn)

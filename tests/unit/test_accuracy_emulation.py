"""bench/accuracy_emulation.py: its roundings are the ones it claims, and they stay inside the
block that asks for them (the reference is shared by every other test)."""

from __future__ import annotations

import numpy as np

from bench import accuracy_emulation as emu
from engine import quants, reference, reference_ops, reference_state


def _k4_blocks(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((n, quants.QK_K)).astype(np.float32) * 0.05
    return quants.quantize(values.reshape(-1), quants.Q4_K).reshape(n, -1)


def test_q8_0_round_trip_is_a_q8_0_rounding() -> None:
    x = np.random.default_rng(0).standard_normal((3, 2, 64)).astype(np.float32)
    once = emu.q8_0_round_trip(x)
    assert once.shape == x.shape
    step = np.abs(x).reshape(-1, 32).max(axis=1) / 127  # one q8_0 step per 32-wide block
    assert (np.abs(once - x).reshape(-1, 32) <= step[:, None] * 0.51 + 1e-7).all()
    assert np.array_equal(emu.q8_0_round_trip(once), once)  # already on the grid


def test_gpu_q4_k_is_about_one_rounding_off_the_exact_weights() -> None:
    blocks = _k4_blocks(8, 1)
    exact = quants._deq_q4_k(blocks).astype(np.float64)
    gpu = emu._gpu_q4_k(blocks)
    once = emu._f16(exact)
    assert np.array_equal(gpu, gpu.astype(np.float16))  # f16 numbers, as the mma takes them
    assert not np.array_equal(gpu, exact)
    # d*sc*q exact and -dmin*m as an f16 pair: within about one f16 rounding of each weight,
    # where rounding d*sc and dmin*m first (the fragments before) put every weight several
    # times further off
    assert np.abs(gpu - exact).mean() < 2 * np.abs(once - exact).mean()


def test_emulation_stays_inside_its_block() -> None:
    append, linear = reference_state.KVCache.append, reference.linear
    table = dict(quants._DEQUANT_BLOCKS)

    def stand_in(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return reference_ops.linear(x, w)

    with emu.emulated({"kv", "gpu"}, stand_in), emu.dequantized_as("gpu"):
        assert reference_state.KVCache.append is not append
        assert reference.linear is stand_in
        assert quants._DEQUANT_BLOCKS[quants.Q4_K] is emu._gpu_q4_k
    assert reference_state.KVCache.append is append
    assert reference.linear is linear
    assert table == quants._DEQUANT_BLOCKS


def test_int_planes_keep_about_16_bits_and_one_plane_8() -> None:
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    top = np.abs(x).reshape(3, 2, 32).max(axis=2, keepdims=True)  # per 32-wide block
    two = emu.int_planes(x, 2).reshape(3, 2, 32)
    one = emu.int_planes(x, 1).reshape(3, 2, 32)
    err2 = np.abs(two - x.reshape(3, 2, 32))
    err1 = np.abs(one - x.reshape(3, 2, 32))
    assert (err2 <= top / (127 * 254) * 0.51 + 1e-9).all()  # half a step of the low plane
    assert (err1 <= top / 127 * 0.51 + 1e-9).all()
    assert err2.max() < err1.max() / 50
    assert np.array_equal(emu.int_planes(np.zeros((1, 32), np.float32), 2), np.zeros((1, 32)))


def test_one_plane_up_to_511_is_integers_a_quarter_of_int8s_step() -> None:
    """`int10`: one plane of integers up to 511 per 32 elements, exact in f16 (x / s whole)."""
    x = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    top = np.abs(x).reshape(3, 2, 32).max(axis=2, keepdims=True)
    got = emu.int_planes(x, 1, 32, 511).reshape(3, 2, 32)
    codes = got / (top / 511)
    assert np.allclose(codes, np.round(codes), atol=1e-3) and np.abs(codes).max() <= 511 + 1e-3
    assert (np.abs(got - x.reshape(3, 2, 32)) <= top / 511 * 0.51 + 1e-9).all()
    assert emu.INT_SOURCES["int10"] == (1, 32, 511)


def test_int_activations_round_only_the_quantized_weights_inputs() -> None:
    rng = np.random.default_rng(3)
    raw = quants.quantize(rng.standard_normal(256 * 4).astype(np.float32), quants.Q4_K)
    exact = quants.dequantize
    with emu.quantized_weights_recorded() as ids:
        quantized = quants.dequantize(raw, quants.Q4_K, (4, 256))
        plain = quants.dequantize(rng.standard_normal(4 * 256).astype("<f4").view(np.uint8), quants.F32, (4, 256))  # fmt: skip
    assert quants.dequantize is exact
    assert ids == {id(quantized)}
    linear = emu.int_activations(ids, 2)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    assert np.array_equal(linear(x, plain), reference_ops.linear(x, plain))
    assert np.array_equal(
        linear(x, quantized), reference_ops.linear(emu.int_planes(x, 2), quantized)
    )
    assert not np.array_equal(linear(x, quantized), reference_ops.linear(x, quantized))


def test_int_planes_in_super_blocks_scale_by_the_super_blocks_largest() -> None:
    """`int256` (the one-row integer kernels' activations): one scale per 256 elements, so the
    error bound follows the super-block's largest |x|, not each 32-element block's."""
    x = np.random.default_rng(4).standard_normal((2, 512)).astype(np.float32)
    x[0, 5] = 40.0  # one large value sets the first super-block's scale
    top = np.abs(x).reshape(2, 2, 256).max(axis=2, keepdims=True)
    got = emu.int_planes(x, 2, 256).reshape(2, 2, 256)
    err = np.abs(got - x.reshape(2, 2, 256))
    assert (err <= top / (127 * 254) * 0.51 + 1e-9).all()
    assert err[0, 0].max() > err[0, 1].max()  # the coarser scale rounds coarser
    assert emu.INT_SOURCES["int256"] == (2, 256, 127)


def test_bf16_rounds_to_the_nearest_with_ties_to_even() -> None:
    x = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-9, -3.14159], np.float32)
    got = emu._bf16(x)
    # 1 + 2^-8 and 1 + 3*2^-8 sit halfway between bf16 neighbours: ties go to the even one
    assert got.tolist() == [1.0, 1.0, 1.0 + 2.0**-6, 1.0, -3.140625]
    assert np.array_equal(emu._bf16(got), got)


def test_state_rounding_rounds_after_every_row_and_only_inside_its_block() -> None:
    """state16: the delta rule's state leaves every row as f16 numbers, so a pass of two rows
    gives what two passes of one row give (the rounding does not depend on the chunking)."""
    from engine import reference_deltanet as rd

    exact = rd.delta_rule
    shape = rd.DeltaNetShape(n_k_heads=1, n_v_heads=2, k_dim=8, v_dim=8, conv_kernel=4, eps=1e-6)
    rng = np.random.default_rng(5)
    q, k = (rng.standard_normal((2, 1, 8)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((2, 2, 8)).astype(np.float32)
    beta, gamma = rng.random((2, 2)).astype(np.float32), -rng.random((2, 2)).astype(np.float32)
    start = rng.standard_normal((2, 8, 8)).astype(np.float32)
    with emu.state_rounded_per_row(emu.STATE_ROUNDINGS["state16"]):
        both, s_both = rd.delta_rule(q, k, v, beta, gamma, s := start.copy(), shape), s
        s_rows = start.copy()
        rows = [rd.delta_rule(q[t : t + 1], k[t : t + 1], v[t : t + 1], beta[t : t + 1], gamma[t : t + 1], s_rows, shape) for t in (0, 1)]  # fmt: skip
    assert rd.delta_rule is exact
    assert np.array_equal(s_both, s_both.astype(np.float16).astype(np.float32))
    assert np.array_equal(s_both, s_rows) and np.array_equal(both, np.concatenate(rows))
    plain = start.copy()
    rd.delta_rule(q, k, v, beta, gamma, plain, shape)
    assert not np.array_equal(plain, s_both)

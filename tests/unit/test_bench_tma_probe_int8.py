"""bench/tma_probe.py's fragment block for the rows_i8f* kernels: every lane's 16 bytes are the
ones rows_i8m4/8/12 gather from the row buffers for the same sub-blocks, so both kernels multiply
the same integers (CPU: numpy stands in for CuPy)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from bench import tma_probe

I8F_QUAD_SB = 5 * 512  # tma_probe.cu: bytes per quad of rows and super-block


def _lane_bytes(rows: list[np.ndarray], k: int, q: int, sb: int, lane: int) -> tuple[list[np.ndarray], list[np.ndarray]]:  # fmt: skip
    """What lane (gid, t) of rows_i8m4's n-tile q loads for super-block sb: its B bytes of each
    sub-block (hi or lo of row 4q + gid / 2, bytes 8t .. 8t + 7) and its two mins' fragments."""
    nsb = k // 256
    xm_off = 2 * k + 16 * -(-nsb // 4) + 4 * (k // 32)
    gid, t = lane >> 2, lane & 3
    row = 4 * q + gid // 2
    zero = np.zeros(8, np.int8)
    if row >= len(rows):
        return [zero] * 8, [zero] * 2
    x = rows[row]
    planes = [x[(gid & 1) * k + sb * 256 + 32 * s + 8 * t :][:8] for s in range(8)]
    mins = []
    for part in range(2):
        u = xm_off + 8 * (sb * 32 + (2 * part + (gid & 1)) * 4 + t)
        mins.append(x[u : u + 8])
    return planes, mins


@pytest.mark.parametrize("n_rows", [1, 4, 7, 12])
def test_fragment_block_holds_what_the_gathering_kernels_load(n_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "cupy", np)
    k = 768
    x = np.random.default_rng(n_rows).standard_normal((n_rows, k)).astype(np.float32)
    rows = [tma_probe.int8_activations(r) for r in x]
    block = tma_probe.int8_fragments(rows, k)
    quads, nsb = -(-n_rows // 4), k // 256
    assert block.dtype == np.int8 and block.size == quads * nsb * I8F_QUAD_SB
    for q in range(quads):
        for sb in range(nsb):
            base = (q * nsb + sb) * I8F_QUAD_SB
            for lane in range(32):
                planes, mins = _lane_bytes(rows, k, q, sb, lane)
                for p in range(4):
                    got = block[base + 512 * p + 16 * lane :][:16]
                    np.testing.assert_array_equal(got, np.concatenate(planes[2 * p : 2 * p + 2]))
                got = block[base + 2048 + 16 * lane :][:16]
                np.testing.assert_array_equal(got, np.concatenate(mins))


def test_h8_rows_hold_the_same_integers_in_the_lanes_k_order(monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """gemm_h8's f16 form of a row: its planes are int8_activations' hi and lo, exact, each group
    of 8 in H8_ORDER; its mins' sums give back int8_activations' B fragments (64a + b)."""
    monkeypatch.setitem(sys.modules, "cupy", np)
    k, nsb = 768, 3
    x = np.random.default_rng(5).standard_normal(k).astype(np.float32) * 3
    row = tma_probe.int8_activations(x)
    h8 = tma_probe.h8_activations(row, k)
    planes = h8[: 4 * k].view(np.float16).reshape(2, k // 8, 8)
    want = row[: 2 * k].reshape(2, k // 8, 8)[:, :, list(tma_probe.H8_ORDER)]
    np.testing.assert_array_equal(planes, want.astype(np.float16))
    assert (planes.astype(np.int32) == want).all()  # exact integers
    sx_bytes = 16 * -(-nsb // 4)
    np.testing.assert_array_equal(h8[4 * k : 4 * k + sx_bytes], row[2 * k : 2 * k + sx_bytes])
    mins = h8[4 * k + sx_bytes :].view(np.float16).reshape(nsb, 2, 2, 8).astype(np.int32)
    xm_off = 2 * k + sx_bytes + 4 * (k // 32)
    xm = row[xm_off : xm_off + nsb * 256].reshape(nsb, 8, 4, 2, 4)  # [sb][column][t][b0, b1][byte]
    for part in range(2):
        for ab in range(2):
            column = xm[:, 2 * part + ab, :, :, 0]  # sub-block t in b0, t + 4 in b1
            np.testing.assert_array_equal(mins[:, part, ab, :4], column[:, :, 0])
            np.testing.assert_array_equal(mins[:, part, ab, 4:], column[:, :, 1])
    sums = row[: 2 * k].reshape(2, nsb, 8, 32).astype(np.int32).sum(axis=3)
    np.testing.assert_array_equal(64 * mins[:, :, 1] + mins[:, :, 0], sums.transpose(1, 0, 2))


def test_each_kernel_reads_its_form_of_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """int8_rows: the rows' int8_activations back to back; rows_i8f* the same followed by their
    fragment block; gemm_h8 each row's h8_activations."""
    monkeypatch.setitem(sys.modules, "cupy", np)
    x = np.random.default_rng(9).standard_normal((6, 512)).astype(np.float32)
    rows = [tma_probe.int8_activations(r) for r in x]
    forms = {k: tma_probe.int8_rows(tma_probe.int8_form_name(k), x) for k in ("rows_i8m8", "rows_i8f8", "gemm_h8")}  # fmt: skip
    plain, size = forms["rows_i8m8"]
    np.testing.assert_array_equal(plain, np.concatenate(rows))
    assert size == rows[0].size
    fragments, frag_size = forms["rows_i8f8"]
    np.testing.assert_array_equal(
        fragments, np.concatenate([*rows, tma_probe.int8_fragments(rows, 512)])
    )
    assert frag_size == size
    h8, h8_size = forms["gemm_h8"]
    np.testing.assert_array_equal(
        h8, np.concatenate([tma_probe.h8_activations(r, 512) for r in rows])
    )
    assert h8_size == h8.size // len(rows)

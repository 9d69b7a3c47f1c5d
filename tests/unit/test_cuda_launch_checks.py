"""The fused product launchers refuse, before anything reaches the GPU, what their kernels
cannot do (numpy arrays stand in for device arrays: the checks read only shapes, types and
strides): kernels.matmul_swiglu and kernels.matmul_pair."""

from __future__ import annotations

import numpy as np
import pytest

from engine.cuda import kernels
from engine.cuda.weights import F32, Q4_K, Q6_K, Q8_0, GpuWeight


def _weight(gtype: int, rows: int, cols: int = 256) -> GpuWeight:
    return GpuWeight(f"w{gtype}", gtype, rows, cols, ())


def _packed(rows: int, cols: int = 256) -> np.ndarray:
    return np.zeros((kernels.packed_rows(rows), cols), np.float16)


def test_matmul_swiglu_takes_only_gate_up_weights_on_the_row_kernels() -> None:
    x = np.zeros((200, 256), np.float32)
    with pytest.raises(kernels.LaunchError, match="gate"):
        kernels.matmul_swiglu(_weight(F32, 32), x[:2], None, _packed(2, 16))
    with pytest.raises(kernels.LaunchError, match="gate"):  # 2F rows in whole 16-row tiles
        kernels.matmul_swiglu(_weight(Q4_K, 40), x[:2], None, _packed(2, 20))
    with pytest.raises(kernels.LaunchError, match="tiled"):  # a prompt chunk: wmat_gemm
        kernels.matmul_swiglu(_weight(Q4_K, 32), x, None, _packed(200, 16))
    with pytest.raises(kernels.LaunchError, match="packed"):  # 5 rows: a whole group of 8
        kernels.matmul_swiglu(_weight(Q4_K, 32), x[:5], None, np.zeros((5, 16), np.float16))
    with pytest.raises(kernels.LaunchError, match="contiguous"):  # F = 16: rows of 32 halves
        kernels.matmul_swiglu(_weight(Q4_K, 32), x[:1], None, np.zeros((1, 64), np.float16))


def test_matmul_pair_takes_two_formats_it_has_a_kernel_for_into_separate_columns() -> None:
    q4, q6, q8 = _weight(Q4_K, 32), _weight(Q6_K, 16), _weight(Q8_0, 16)
    x, y = np.zeros((200, 256), np.float32), np.zeros((200, 64), np.float32)
    assert kernels.pairs(q4, q6, 1) and kernels.pairs(q6, q4, 127)
    assert not kernels.pairs(q4, q8, 1)  # no kernel for this pair: two launches
    assert not kernels.pairs(q4, q6, 200)  # a prompt chunk: the tiled kernel
    assert not kernels.pairs(q4, _weight(Q6_K, 16, 512), 1)  # different inputs
    with pytest.raises(kernels.LaunchError, match="no pair"):
        kernels.matmul_pair(((q4, 0), (q8, 32)), x[:2], _packed(2), y)
    with pytest.raises(kernels.LaunchError, match="packed"):
        kernels.matmul_pair(((q4, 0), (q6, 32)), x[:2], None, y)
    with pytest.raises(kernels.LaunchError, match="cannot hold"):
        kernels.matmul_pair(((q4, 0), (q6, 56)), x[:2], _packed(2), y)
    with pytest.raises(kernels.LaunchError, match="overlap"):
        kernels.matmul_pair(((q4, 0), (q6, 24)), x[:2], _packed(2), y)


def test_a_mixers_packed_output_must_be_a_whole_pass_of_its_rows() -> None:
    """Ops.dn_recur / Ops.attention's packed copy of y (for the output product): f16 rows of
    exactly y's width, enough of them for the pass, beside contiguous f32 outputs."""
    y, yh = np.zeros((5, 32), np.float32), np.zeros((kernels.packed_rows(5), 32), np.float16)
    ptr, lg = kernels.Ops._packed_output(yh, y, "dn_recur")
    assert ptr is yh and int(lg) == kernels.packed_group(5)
    null, _ = kernels.Ops._packed_output(None, None, "dn_recur")
    assert int(null) == 0
    with pytest.raises(kernels.LaunchError, match="needs outputs"):
        kernels.Ops._packed_output(yh, None, "dn_recur")
    with pytest.raises(kernels.LaunchError, match="contiguous"):
        kernels.Ops._packed_output(np.zeros((8, 64), np.float16), y, "attention")
    with pytest.raises(kernels.LaunchError, match="packed activations"):
        kernels.Ops._packed_output(yh[:4], y, "attention")
    with pytest.raises(kernels.LaunchError, match="contiguous"):
        kernels.Ops._packed_output(yh, np.zeros((5, 64), np.float32)[:, :32], "attention")

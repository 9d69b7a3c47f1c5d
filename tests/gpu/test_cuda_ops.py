"""The op kernels (RMSNorm, SwiGLU, Gated DeltaNet conv + recurrence + commit/replay, attention
over the paged q8_0 pool, sampling) against the numpy reference functions of engine/reference_*.py
on fresh random inputs with poisoned outputs. Both a small and the 27B head shape are built.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from engine import reference_attention as ra
from engine import reference_deltanet as rd
from engine import sampling
from engine.backend import SamplingParams
from engine.cuda.build import KernelDims
from engine.cuda.forward import penalty_lists, sampling_rows
from engine.cuda.kernels import Ops, packed_rows, unpack_activations
from engine.reference_ops import rms_norm, rope_neox_partial, sigmoid, silu
from engine.reference_weights import DeltaNetWeights

pytestmark = pytest.mark.gpu

SMALL = KernelDims(dn_dk=64, dn_dv=64, dn_hk=2, att_d=64, att_hq=4, att_hkv=2, att_nrot=16)
BIG = KernelDims(att_tc=0)  # the 27B head shapes, attention on the CUDA cores
EPS = 1e-6


def _rel(out: np.ndarray, ref: np.ndarray) -> float:
    assert np.isfinite(out).all(), "output has NaN/inf (unwritten?)"
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


def _dev(a: np.ndarray):
    import cupy as cp

    return cp.asarray(np.ascontiguousarray(a))


def test_rmsnorm_and_swiglu() -> None:
    import cupy as cp

    ops = Ops(SMALL)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 768)).astype(np.float32) * 3
    w = rng.standard_normal(768).astype(np.float32)
    y = cp.full((7, 768), np.nan, dtype=cp.float32)
    ops.rmsnorm(_dev(x), _dev(w), y, EPS)
    assert _rel(cp.asnumpy(y), rms_norm(x, w, EPS)) < 1e-5
    gu = rng.standard_normal((5, 2 * 384)).astype(np.float32)
    h = cp.full((5, 384), np.nan, dtype=cp.float32)
    ops.swiglu(_dev(gu), h)
    assert _rel(cp.asnumpy(h), silu(gu[:, :384]) * gu[:, 384:]) < 1e-5


def test_rmsnorm_and_swiglu_packed_outputs_are_their_f32_outputs_packed() -> None:
    """The packed f16 copies the products read (kernels.pack_activations: rows interleaved in
    groups by the pass's row count) beside the f32 outputs: the same values, same rounding, same
    layout; the f32 outputs unchanged by asking for them. A norm over the first 512 of 768
    columns (n < row width) leaves the rest unwritten."""
    import cupy as cp

    from engine.cuda.kernels import pack_activations

    ops = Ops(SMALL)
    rng = np.random.default_rng(2)
    x = _dev(rng.standard_normal((11, 768)).astype(np.float32) * 3)
    w = _dev(rng.standard_normal(768).astype(np.float32))
    y0, y1 = (cp.full((11, 768), np.nan, dtype=cp.float32) for _ in range(2))
    yh = cp.full((16, 768), np.nan, dtype=cp.float16)
    ops.rmsnorm(x, w, y0, EPS)
    ops.rmsnorm(x, w, y1, EPS, yh=yh)
    assert cp.array_equal(y0, y1)
    assert cp.array_equal(unpack_activations(yh, 11)[:11], y1.astype(cp.float16))
    assert cp.array_equal(yh[:8], pack_activations(y1)[:8])  # the first group, whole
    for rows in (1, 2, 3, 4):  # smaller groups for smaller passes (pad rows left unwritten)
        yg = cp.full((4, 768), np.nan, dtype=cp.float16)
        ops.rmsnorm(x[:rows], w, y1[:rows], EPS, yh=yg)
        got = unpack_activations(yg, rows)[:rows]
        assert cp.array_equal(got, y1[:rows].astype(cp.float16)), rows
        if rows in (1, 4):  # whole groups: the very bits pack_activations gives
            assert cp.array_equal(yg[:rows], pack_activations(y1[:rows])), rows
    yp = cp.full((11, 768), np.nan, dtype=cp.float32)
    part = cp.full((16, 768), np.nan, dtype=cp.float16)
    ops.rmsnorm(x, w[:512], yp, EPS, n=512, yh=part)
    natural = unpack_activations(part, 11)
    assert cp.array_equal(natural[:11, :512], yp[:, :512].astype(cp.float16))
    assert bool(cp.isnan(natural[:, 512:]).all()) and bool(cp.isnan(natural[11:]).all())
    gu = _dev(rng.standard_normal((5, 2 * 384)).astype(np.float32))
    h0, h1 = (cp.full((5, 384), np.nan, dtype=cp.float32) for _ in range(2))
    hh = cp.full((8, 384), np.nan, dtype=cp.float16)
    ops.swiglu(gu, h0)
    ops.swiglu(gu, h1, hh)
    assert cp.array_equal(h0, h1)
    assert cp.array_equal(unpack_activations(hh, 5)[:5], h1.astype(cp.float16))
    with pytest.raises(ValueError, match="packed"):  # 5 rows need a whole group of 8
        ops.swiglu(gu, h1, cp.zeros((5, 384), cp.float16))


def test_swiglu_of_interleaved_gate_up_is_swiglu_of_the_halves() -> None:
    """With `interleaved` (a gate|up weight's rows alternating in groups of 8) gate and up of
    feature i are columns 16 (i / 8) + i % 8 and the one 8 after it: the same bits as the plain
    kernel on the halves laid side by side."""
    import cupy as cp

    ops = Ops(SMALL)
    rng = np.random.default_rng(3)
    gate, up = (_dev(rng.standard_normal((5, 384)).astype(np.float32)) for _ in range(2))
    mixed = cp.stack([gate.reshape(5, 48, 8), up.reshape(5, 48, 8)], axis=2).reshape(5, 768)
    h0, h1 = (cp.full((5, 384), np.nan, dtype=cp.float32) for _ in range(2))
    hh0, hh1 = (cp.full((8, 384), np.nan, dtype=cp.float16) for _ in range(2))
    ops.swiglu(cp.concatenate([gate, up], axis=1), h0, hh0)
    ops.swiglu(cp.ascontiguousarray(mixed), h1, hh1, interleaved=True)
    assert bool(cp.isfinite(h0).all())
    assert cp.array_equal(h1, h0)
    assert cp.array_equal(hh1, hh0, equal_nan=True)  # the group's 3 pad rows unwritten in both


@pytest.mark.parametrize("n_src", [3, 19])
@pytest.mark.parametrize("picks", [[2], [1, 0, 1], [18, 0, 9, 9, 7, 15, 3, 8, 11, 2]])
def test_gather_packed_moves_whole_rows_between_groups(n_src: int, picks: list[int]) -> None:
    """The LM head's gather of sampled rows from packed activations: row idx[i] of the source
    becomes row i of the destination, each laid out for its own pass's row count (groups of 4
    and 8 rows in, 1, 4 and 8 out), repeats allowed."""
    import cupy as cp

    from engine.cuda.kernels import pack_activations

    ops = Ops(SMALL)
    rng = np.random.default_rng(3)
    x = _dev(rng.standard_normal((n_src, 256)).astype(np.float32))
    idx = cp.asarray(np.array(picks, np.int32) % n_src)
    dst = cp.full((16, 256), np.nan, dtype=cp.float16)
    ops.gather_packed(pack_activations(x), n_src, idx, dst)
    got = unpack_activations(dst, len(picks))[: len(picks)]
    assert cp.array_equal(got, x[idx].astype(cp.float16))


def _deltanet_case(dims: KernelDims, hv: int) -> dict[str, Any]:
    """Inputs of the DeltaNet op tests: 8 rows, 4 state slots; two segments (rows): slot,
    start, rows, commit, keep. As in the backend, a segment with drafts keeps nothing in the
    pass; the replay keeps its 2 accepted rows after "verification"."""
    dk, hk = dims.dn_dk, dims.dn_hk
    shape = rd.DeltaNetShape(n_k_heads=hk, n_v_heads=hv, k_dim=dk, v_dim=dk, conv_kernel=4, eps=EPS)
    C, T = shape.conv_channels, 8
    rng = np.random.default_rng(2 + hv)
    return dict(
        shape=shape,
        mix=rng.standard_normal((T, C)).astype(np.float32),
        conv_w=(rng.standard_normal((C, 4)) * 0.5).astype(np.float32),
        conv_st=rng.standard_normal((4, 3, C)).astype(np.float32),
        z=rng.standard_normal((T, hv * dk)).astype(np.float32),
        beta_alpha=(rng.standard_normal((2, T, hv)) * 2).astype(np.float32),
        ssm_a=-np.exp(rng.standard_normal(hv)).astype(np.float32),
        dt_bias=rng.standard_normal(hv).astype(np.float32),
        ssm_norm=(1 + 0.1 * rng.standard_normal(dk)).astype(np.float32),
        state=(rng.standard_normal((4, hv, dk, dk)) * 0.1).astype(np.float32),
        row_slot=np.array([1, 1, 1, 3, 3, 3, 3, 3], dtype=np.int32),
        row_first=np.array([0, 0, 0, 3, 3, 3, 3, 3], dtype=np.int32),
        seg=np.array([[1, 3], [0, 3], [3, 5], [1, 0], [3, 0]], dtype=np.int32),
        replay=np.array([[3], [3], [2], [1], [2]], dtype=np.int32),
    )


def _deltanet_run(dims: KernelDims, hv: int, case: dict[str, Any], split: bool) -> tuple[Any, Any, Any, Any, Any]:  # fmt: skip
    """dn_conv, the pass of both segments (dn_recur_split if split; y also packed), then the
    replay of slot 3: (u, y, state, conv, packed y)."""
    import cupy as cp

    ops = Ops(dims)
    T, C = case["mix"].shape
    beta, alpha = case["beta_alpha"]
    d_mix, d_st, d_state = _dev(case["mix"]), _dev(case["conv_st"]), _dev(case["state"])
    u = cp.full((T, C), np.nan, dtype=cp.float32)
    y = cp.full((T, hv * dims.dn_dk), np.nan, dtype=cp.float32)
    yh = cp.full((packed_rows(T), hv * dims.dn_dk), np.nan, dtype=cp.float16)
    ops.dn_conv(d_mix, _dev(case["conv_w"]), d_st, u, _dev(case["row_slot"]), _dev(case["row_first"]))  # fmt: skip
    ssm_a, dt_bias, ssm_norm = _dev(case["ssm_a"]), _dev(case["dt_bias"]), _dev(case["ssm_norm"])
    args = (_dev(case["z"]), _dev(beta), _dev(alpha), ssm_a, dt_bias, ssm_norm, d_state)
    ops.dn_recur(u, *args, y, _dev(case["seg"]), 2, hv, commit=(d_mix, d_st, 0, 0), split=split, yh=yh)  # fmt: skip
    ops.dn_recur(u, *args, None, _dev(case["replay"]), 1, hv, commit=(d_mix, d_st, 0, 0), split=split)  # fmt: skip
    return u, y, d_state, d_st, yh


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("dims,hv", [(SMALL, 4), (BIG, 6)])
def test_deltanet_conv_recurrence_commit_and_replay(dims: KernelDims, hv: int, split: bool) -> None:  # fmt: skip
    """Two segments: slot 1 commits its 3 rows; slot 3 runs 5 rows without writing its state,
    then is replayed over its first 2 rows (a verification that accepted 1 draft). The conv
    state is committed by the recurrence kernel in both passes (slot 1 after the first, slot 3
    after the replay), every channel of every head: compared exactly. Split: dn_cb state
    columns per CTA (dn_recur_split), the gated norm as its own kernel."""
    import cupy as cp

    case = _deltanet_case(dims, hv)
    shape, mix, conv_st, conv_w = case["shape"], case["mix"], case["conv_st"], case["conv_w"]
    z, (beta, alpha), state, ssm_norm = case["z"], case["beta_alpha"], case["state"], case["ssm_norm"]  # fmt: skip
    dk = dims.dn_dk
    u, y, d_state, d_st, yh = _deltanet_run(dims, hv, case, split)
    T = y.shape[0]  # the output product's packed rows
    assert cp.array_equal(unpack_activations(yh, T)[:T], y.astype(cp.float16))

    unused = np.zeros((1, 1), np.float32)  # projections: not read by gates()
    weights = DeltaNetWeights(qkv=unused, z=unused, conv=conv_w, dt_bias=case["dt_bias"], a=case["ssm_a"], beta=unused, alpha=unused, norm=ssm_norm, out=unused)  # fmt: skip
    for slot, start, n, n_keep in ((1, 0, 3, 3), (3, 3, 5, 2)):
        rows = slice(start, start + n)
        u_ref, _ = rd.causal_conv_silu(mix[rows], conv_st[slot], conv_w)
        q, k, v = rd.split_qkv(u_ref, shape)
        normed = np.concatenate([q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)], axis=1)
        assert _rel(cp.asnumpy(u[rows]), normed) < 1e-5
        b_s, gamma = rd.gates(alpha[rows], beta[rows], weights)
        s_ref = state[slot].copy()
        o = rd.delta_rule(q, k, v, b_s, gamma, s_ref, shape)
        y_ref = rms_norm(o, ssm_norm, EPS) * silu(z[rows].reshape(n, hv, dk))
        assert _rel(cp.asnumpy(y[rows]), y_ref.reshape(n, -1)) < 2e-4
        s_keep = state[slot].copy()
        rd.delta_rule(
            q[:n_keep], k[:n_keep], v[:n_keep], b_s[:n_keep], gamma[:n_keep], s_keep, shape
        )
        assert _rel(cp.asnumpy(d_state[slot]), s_keep) < 2e-4
        _, conv_keep = rd.causal_conv_silu(mix[start : start + n_keep], conv_st[slot], conv_w)
        np.testing.assert_array_equal(cp.asnumpy(d_st[slot]), conv_keep)
    for untouched in (0, 2):
        np.testing.assert_array_equal(cp.asnumpy(d_state[untouched]), state[untouched])


@pytest.mark.parametrize("dims,hv", [(SMALL, 4), (BIG, 6)])
def test_deltanet_column_split_gives_the_whole_head_bits(dims: KernelDims, hv: int) -> None:
    """dn_recur_split (dn_cb columns per CTA, the norm apart) and dn_recur (a head per CTA, the
    norm inside): the same outputs, states and conv states, bit for bit."""
    import cupy as cp

    case = _deltanet_case(dims, hv)
    split = _deltanet_run(dims, hv, case, True)
    whole = _deltanet_run(dims, hv, case, False)
    assert dims.dn_cb < dims.dn_dv
    for a, b in zip(split, whole, strict=True):
        assert cp.array_equal(a, b)


def _q8_roundtrip(x: np.ndarray) -> np.ndarray:
    blocks = x.reshape(*x.shape[:-1], -1, 32).astype(np.float32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    q = np.rint(np.where(d > 0, blocks / np.where(d > 0, d, 1), 0))
    return (q * d.astype(np.float16).astype(np.float32)).reshape(x.shape)


# few splits: each split's part of the context spans several chunks
FEW_SPLITS = {"att_splits": 4}
# attn_decode's chunks of 64 positions (the default is 16)
WIDE_CHUNKS = {"att_core_chunk": 64}
# attn_decode_tc for every row (27B heads only: the default for them from position 2048)
TENSOR_CORES = {"att_tc": 1, "att_core_below": 0}
# rows below position 300 on the CUDA cores, the others on the tensor cores, in each launch
STRADDLING = {"att_tc": 1, "att_core_below": 300}


@pytest.mark.parametrize(
    "dims",
    [
        SMALL,
        BIG,
        replace(SMALL, **FEW_SPLITS),
        replace(BIG, **FEW_SPLITS),
        replace(SMALL, **WIDE_CHUNKS),
        replace(BIG, **WIDE_CHUNKS, **FEW_SPLITS),
        replace(BIG, **TENSOR_CORES),
        replace(BIG, **FEW_SPLITS, **TENSOR_CORES),
        replace(BIG, **STRADDLING),
    ],
)
def test_attention_over_paged_q8_pool(dims: KernelDims) -> None:
    """Two slots with histories of 21 and 600 tokens written in the same launch as their new
    rows (prefill path: causal inside the step), pages scattered over the pool; 621 rows run in
    groups of 64, a row's context in att_splits parts merged in order (chunks of
    att_core_chunk positions on the CUDA cores, 64 on the tensor cores)."""
    import cupy as cp

    ops = Ops(dims)
    assert (ops.attention_kernel == "attn_decode_tc") == bool(dims.att_tc and dims.att_d == 256)
    d, hq, hkv, base = dims.att_d, dims.att_hq, dims.att_hkv, 1e7
    lengths = (21, 600)  # the second spans 10 chunks of 64
    rng = np.random.default_rng(dims.att_d)
    page_table = rng.permutation(128).astype(np.int32).reshape(2, 64)
    row_slot = np.concatenate([np.full(n, s, dtype=np.int32) for s, n in enumerate(lengths)])
    row_pos = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
    T = row_slot.shape[0]
    qg = rng.standard_normal((T, hq, 2, d)).astype(np.float32)
    kf, vf = rng.standard_normal((2, T, hkv * d)).astype(np.float32)
    q_norm, k_norm = (1 + 0.1 * rng.standard_normal((2, d))).astype(np.float32)
    pool_tokens = 128 * dims.kv_page
    pool = (cp.zeros((pool_tokens, hkv, d), cp.int8), cp.zeros((pool_tokens, hkv, d // 32), cp.float16),
            cp.zeros((pool_tokens, hkv, d), cp.int8), cp.zeros((pool_tokens, hkv, d // 32), cp.float16))  # fmt: skip
    q = cp.full((T, hq, d), np.nan, dtype=cp.float32)
    y = cp.full((T, hq * d), np.nan, dtype=cp.float32)
    args = (_dev(page_table), _dev(row_slot), _dev(row_pos))
    # one fused projection buffer, as in the backend: q+gate | k | v share a row stride
    pa = _dev(np.concatenate([qg.reshape(T, -1), kf, vf], axis=1))
    qw = hq * 2 * d
    d_qg, d_kf, d_vf = pa, pa[:, qw:], pa[:, qw + hkv * d :]
    ops.attn_prep(d_qg, d_kf, d_vf, _dev(q_norm), _dev(k_norm), q, pool, *args, base)
    scale = 1.0 / np.sqrt(d)
    ops.attention(q, d_qg, pool, *args, scale, y, ops.attention_parts(T))
    # launches of 5 rows, with the packed copy for the output product: the same y, and the
    # packed rows of the whole pass (each launch's rows at their place in it)
    y5 = cp.full((T, hq * d), np.nan, dtype=cp.float32)
    yh = cp.full((packed_rows(T), hq * d), np.nan, dtype=cp.float16)
    ops.attention(q, d_qg, pool, *args, scale, y5, ops.attention_parts(5), yh=yh)
    assert cp.array_equal(y5, y)
    assert cp.array_equal(unpack_activations(yh, T)[:T], y.astype(cp.float16))

    start = 0
    for n in lengths:
        rows = slice(start, start + n)
        pos = np.arange(n)
        q_ref = rope_neox_partial(rms_norm(qg[rows, :, 0], q_norm, EPS), pos, dims.att_nrot, base)
        k_ref = rope_neox_partial(
            rms_norm(kf[rows].reshape(n, hkv, d), k_norm, EPS), pos, dims.att_nrot, base
        )
        v_ref = vf[rows].reshape(n, hkv, d)
        assert _rel(cp.asnumpy(q[rows]), q_ref) < 1e-5
        gate = sigmoid(qg[rows, :, 1].reshape(n, hq * d))
        quantized = ra.causal_attention(q_ref, _q8_roundtrip(k_ref), _q8_roundtrip(v_ref), 0, scale)
        exact = ra.causal_attention(q_ref, k_ref, v_ref, 0, scale)
        out = cp.asnumpy(y[rows])
        # f32 FMAs: 2e-4; the tensor-core kernel rounds q, p and v*scale to f16 (the products'
        # operand precision)
        tol = 2e-3 if ops.attention_kernel == "attn_decode_tc" else 2e-4
        assert _rel(out, quantized.reshape(n, -1) * gate) < tol
        assert _rel(out, exact.reshape(n, -1) * gate) < 2e-2
        start += n


def _sample(
    ops: Ops,
    logits: np.ndarray,
    params: list[SamplingParams],
    counters: list[int],
    contexts: list[list[int]],
) -> np.ndarray:
    import cupy as cp

    fp, ip = sampling_rows(params, counters)
    off, pen_tok, pen_cnt = penalty_lists(contexts, [len(ctx) for ctx in contexts])
    out = cp.full(len(params), -1, dtype=cp.int32)
    ops.sample(
        _dev(logits),
        _dev(fp),
        _dev(ip),
        _dev(off),
        _dev(pen_tok),
        _dev(pen_cnt),
        out,
    )
    return cp.asnumpy(out)


def test_greedy_with_penalties_matches_reference() -> None:
    ops = Ops(SMALL)
    rng = np.random.default_rng(5)
    V = 248320
    logits = (rng.standard_normal((6, V)) * 3).astype(np.float32)
    logits[0, [17, 99]] = 50.0  # exact tie: lowest id wins
    params = [
        SamplingParams(
            temperature=0.0,
            top_k=0,
            top_p=1.0,
            min_p=0.0,
            repetition_penalty=r,
            frequency_penalty=f,
            presence_penalty=p,
        )
        for r, f, p in (
            (1, 0, 0),
            (1.3, 0, 0),
            (1, 0.5, 0),
            (1, 0, 1.5),
            (1.1, 0.2, 0.3),
            (1, 0, 0),
        )
    ]
    contexts = [[], *[list(np.argsort(-row)[:5]) * 2 for row in logits[1:5]], []]
    got = _sample(ops, logits.copy(), params, [0] * 6, contexts)
    assert got[0] == 17
    for i in range(1, 6):
        want = int(np.argmax(sampling.apply_penalties(logits[i], contexts[i], params[i])))
        assert got[i] == want


# sample.cu's paths: the fast one (top_k <= 1,024, min_p, or top_p alone bounded by the threads'
# maxima) and the full search (the tests below)
@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.7, top_k=12, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0),
    SamplingParams(temperature=1.3, top_k=0, top_p=1.0, min_p=0.1),
    SamplingParams(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05),
    SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.02),
    SamplingParams(temperature=0.6, top_k=20, top_p=0.95, min_p=0.0),
])  # fmt: skip
def test_sampled_frequencies_follow_the_reference_distribution(params: SamplingParams) -> None:
    rng = np.random.default_rng(9)
    _check_frequencies(params, (rng.standard_normal(3000) * 2).astype(np.float32))


def test_sampled_frequencies_when_the_fast_path_overflows() -> None:
    """400 large logits in the first warp's chunk of the vocabulary: more candidates than its
    share of the fast path's buffer, so the full search draws (the same distribution)."""
    rng = np.random.default_rng(4)
    row = rng.standard_normal(8192).astype(np.float32)
    row[:400] += 6.0
    _check_frequencies(SamplingParams(temperature=1.0, top_k=300, top_p=1.0, min_p=0.0), row)


def test_sampled_frequencies_when_the_maxima_hold_too_little() -> None:
    """A nearly flat row of 8,192 tokens: the threads' maxima (one in eight logits) hold far
    less than top_p of the mass, so top_p alone has no bound and the full search draws."""
    rng = np.random.default_rng(6)
    row = (rng.standard_normal(8192) * 0.1).astype(np.float32)
    _check_frequencies(SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0), row)


def _check_frequencies(params: SamplingParams, row: np.ndarray) -> None:
    """6,000 draws of one row: only the reference's candidates, at its probabilities."""
    ops = Ops(SMALL)
    M, V = 6000, row.size
    got = _sample(ops, np.tile(row, (M, 1)), [params] * M, list(range(M)), [[]] * M)
    cands = sampling.candidates(row, params)
    assert set(got.tolist()) <= set(cands.ids.tolist()), "a filtered-out token was drawn"
    freq = np.bincount(got, minlength=V)[cands.ids] / M
    sigma = np.sqrt(cands.probs * (1 - cands.probs) / M)
    assert np.all(np.abs(freq - cands.probs) < 5 * sigma + 2e-3)


@pytest.mark.parametrize("top_k", [0, 40])  # the full search; the fast path
def test_draws_depend_only_on_seed_and_counter(top_k: int) -> None:
    ops = Ops(SMALL)
    rng = np.random.default_rng(3)
    logits = np.tile((rng.standard_normal(5000) * 0.5).astype(np.float32), (4, 1))
    p = SamplingParams(temperature=1.0, top_k=top_k, top_p=1.0, min_p=0.0, seed=1234)
    a = _sample(ops, logits.copy(), [p] * 4, [7, 8, 7, 9], [[]] * 4)
    assert a[0] == a[2]
    b = _sample(ops, logits[:1].copy(), [p], [7], [[]])
    assert b[0] == a[0]

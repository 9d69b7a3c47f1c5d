"""Thin Python launchers for the CUDA kernels: check shapes, pick the instantiation, launch on the
current CuPy stream (so a caller can capture a whole step into one CUDA graph). Every array
argument is a contiguous cupy array; shapes are written next to each function.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from engine.cuda import build, launch
from engine.cuda.build import KernelDims
from engine.cuda.weights import F32, GpuWeight

ATT_ROWS_PER_LAUNCH = 64  # attention runs in groups of rows so its split scratch stays small
ATT_POS_END = 2**31 - 1  # the attention kernels' row filter: positions lo <= pos < hi


class LaunchError(ValueError):
    """A kernel was called with arrays of the wrong shape or type."""


def _i32(v: int) -> np.int32:
    return np.int32(v)


RMSNORM_THREADS = 1024  # threads per row of rmsnorm_rows (one CTA per row: see Ops.rmsnorm)
EMBED_THREADS = 256  # embed_rows: a CTA per row and block of this many elements, one a thread


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise LaunchError(msg)


def packed_group(n_rows: int) -> int:
    """log2 of the rows per group of a pass's packed activations (common.cuh `packed_at`): a
    single row alone, 2-4 rows in a group of 4, more in groups of 8 (an n-tile of the
    products). The product kernels are compiled for these three (matmul.cu mmh1_, mmh4_, mmh_)."""
    return 0 if n_rows <= 1 else 2 if n_rows <= 4 else 3


def packed_rows(n_rows: int) -> int:
    """Rows a buffer of packed activations needs for a pass of n_rows rows (whole groups)."""
    g = 1 << packed_group(n_rows)
    return -(-n_rows // g) * g


def packed_width(k: int) -> int:
    """Halves per row of a buffer of packed activations for rows of k elements: k rounded up to
    32, as common.cuh `packed_at` moves quads within groups of 8 (`packed_quad_slots`)."""
    return -(-k // 32) * 32


def packed_quad_slots(n_quads: int) -> np.ndarray:
    """Where each quad of a packed row is stored among the row's quads (common.cuh
    `packed_quad_slot`: bits 0 and 2 of the quad index swapped; its own inverse). n_quads % 8
    == 0."""
    q = np.arange(n_quads)
    return (q & ~5) | ((q & 1) << 2) | ((q >> 2) & 1)


def pack_rows(xp: Any, x: Any) -> Any:
    """`pack_activations` with the array module xp (numpy or cupy): the layout, for tests on
    either side."""
    R, K = x.shape
    g, W = 1 << packed_group(R), packed_width(K)
    rows = xp.zeros((packed_rows(R), W), xp.float32)
    rows[:R, :K] = x
    quads = rows.reshape(-1, g, W // 4, 4)[:, :, :, [0, 2, 1, 3]].transpose(0, 2, 1, 3)
    out = xp.empty_like(quads)
    out[:, xp.asarray(packed_quad_slots(W // 4))] = quads
    return out.astype(xp.float16).reshape(-1, W)


def pack_activations(x: Any) -> Any:
    """x (f32 [R][K], K % 4 == 0) as the products' packed f16 activations, what rmsnorm and
    swiglu write beside their f32 output: each group of four stored x0 x2 x1 x3 (common.cuh
    `pack_b`), rows in groups of 2^packed_group(R) that store quad by quad their rows' quads
    side by side, the quads of each group of 8 in the order `packed_quad_slots` says
    (`packed_at`): f16 [packed_rows(R)][packed_width(K)], the rows past R and the columns past
    K zero. For tests and benchmarks: the forward pass gets them from the producers."""
    import cupy as cp

    return pack_rows(cp, x)


def unpack_activations(xh: Any, n_rows: int) -> Any:
    """The first packed_rows(n_rows) rows of packed activations written for a pass of n_rows
    rows (`pack_activations`), back in natural order (f16, all xh.shape[1] columns); for tests."""
    import cupy as cp

    g, rows, W = 1 << packed_group(n_rows), packed_rows(n_rows), xh.shape[1]
    quads = xh[:rows].reshape(rows // g, W // 4, g, 4)[:, cp.asarray(packed_quad_slots(W // 4))]
    return cp.ascontiguousarray(quads[:, :, :, [0, 2, 1, 3]].transpose(0, 2, 1, 3)).reshape(rows, W)


# the row kernels' epilogues (matmul.cu MM_STORE, MM_ADD, MM_SWIGLU)
_STORE, _ADD, _SWIGLU = 0, 1, 2


def matmul(w: GpuWeight, x: Any, y: Any, accumulate: bool = False, xh: Any = None) -> None:
    """y[r][:N] (+)= W x[r][:K].  x: f32 [R][ldx >= K], y: f32 [R][ldy >= N]. xh (optional):
    the same rows packed as f16 (`pack_activations`), read instead of x by every kernel but
    the exact f32 one (same results: x is rounded to f16 the same way either way)."""
    R = x.shape[0]
    _check(y.dtype == np.float32, "matmul wants f32 activations")
    _check(
        y.shape[1] >= w.rows and y.shape[0] >= R, f"matmul {w.name}: bad shapes {x.shape} {y.shape}"
    )
    _product(w, x, xh, (y, _i32(y.strides[0] // 4)), _ADD if accumulate else _STORE)


def matmul_swiglu(w: GpuWeight, x: Any, xh: Any, hh: Any) -> None:
    """hh = h packed for the products (`pack_activations` of f16 [R][F]), h = silu(gate) * up of
    the gate|up weight w (2F rows alternating in groups of 8: weights.interleave_halves) times
    x: the product and Ops.swiglu in one launch, with their bits. x, xh: as `matmul`; only
    products on the row kernels (fewer than gemm_min_rows rows) of quantized or f16 weights."""
    R, F = x.shape[0], w.rows // 2
    _check(w.ggml_type != F32 and w.rows % 16 == 0, f"matmul_swiglu {w.name}: not a gate|up weight")
    _check(not build.MATMUL_CONFIG.tiled(R), f"matmul_swiglu: {R} rows run the tiled kernel")
    out = _packed(hh, R, F, "matmul_swiglu")
    _check(
        out[1] == packed_width(F), "matmul_swiglu: hh must be contiguous rows of packed_width(F)"
    )
    _product(w, x, xh, out, _SWIGLU)


def pairs(w_a: GpuWeight, w_b: GpuWeight, n_rows: int) -> bool:
    """Whether matmul_pair runs these two weights at n_rows rows in one launch."""
    cfg = build.MATMUL_CONFIG
    types = tuple(sorted((w_a.ggml_type, w_b.ggml_type)))
    return (
        cfg.pair_products
        and types in build.PAIRED_TYPES
        and w_a.cols == w_b.cols
        and not cfg.tiled(n_rows)
    )


def matmul_pair(
    parts: tuple[tuple[GpuWeight, int], tuple[GpuWeight, int]], x: Any, xh: Any, y: Any
) -> None:
    """y[r][o:o + N] = W x[r] for both (W, o) of `parts`, two weights of different formats
    (`pairs` says which) on the same activations, in one launch. x: f32 [R][ldx >= K], xh its
    packed rows (`pack_activations`: required), y: f32 [R][ldy]."""
    (w_a, o_a), (w_b, o_b) = sorted(parts, key=lambda p: p[0].ggml_type)
    R = x.shape[0]
    _check(pairs(w_a, w_b, R), f"matmul_pair: no pair kernel for {w_a.name}, {w_b.name}")
    _check(xh is not None, "matmul_pair: packed activations required")
    _check(y.dtype == np.float32, "matmul wants f32 activations")
    _check(
        y.shape[0] >= R
        and y.shape[1] >= max(o_a + w_a.rows, o_b + w_b.rows)
        and min(o_a, o_b) >= 0,
        f"matmul_pair: output {y.shape} cannot hold columns {o_a}+{w_a.rows}, {o_b}+{w_b.rows}",
    )
    _check(
        o_a + w_a.rows <= o_b or o_b + w_b.rows <= o_a,
        f"matmul_pair: columns {o_a}+{w_a.rows} and {o_b}+{w_b.rows} overlap",
    )
    packed = _activations(x, xh, w_a.cols, "matmul_pair")
    if R == 0:
        return
    types = (w_a.ggml_type, w_b.ggml_type)
    tile = build.MATMUL_CONFIG.pair_tile(types, R, w_a.rows + w_b.rows, _sm_count())
    fn = launch.kernel(build.matmul_module(build.MATMUL_CONFIG), tile.name)
    tiles = -(-w_a.rows // tile.rows_per_cta) + -(-w_b.rows // tile.rows_per_cta)
    args = (
        *w_a.pointers(),
        _i32(w_a.rows),
        *w_b.pointers(),
        _i32(w_b.rows),
        _i32(w_a.cols),
        *packed,
        y,
        _i32(y.strides[0] // 4),
        _i32(o_a),
        _i32(o_b),
        _i32(R),
        _i32(_STORE),
    )
    fn((-(-R // tile.rows_per_group), tiles), (tile.threads,), args)


def _activations(x: Any, xh: Any, cols: int, what: str) -> tuple[Any, Any]:
    """A product's input rows checked (f32 [R][>= cols]) -> their packed copy's (pointer, row
    stride) as `_packed` gives it."""
    _check(x.dtype == np.float32, "matmul wants f32 activations")
    _check(x.shape[1] >= cols, f"{what}: bad input shape {x.shape}")
    return _packed(xh, x.shape[0], cols, what)


def _product(w: GpuWeight, x: Any, xh: Any, out: tuple[Any, Any], mode: int) -> None:
    """Launch W x into `out` (the output and its row stride in elements) with epilogue mode."""
    R = x.shape[0]
    packed = _activations(x, xh, w.cols, f"matmul {w.name}")
    _check(x.strides[1] == 4 and x.strides[0] % 16 == 0, "matmul: x rows must be 16-byte aligned")
    if R == 0:
        return
    shape = (_i32(w.rows), _i32(w.cols))
    io = (x, _i32(x.strides[0] // 4), *out, _i32(R), _i32(mode))
    if w.ggml_type == F32:
        fn = launch.kernel(build.matmul_module(build.MATMUL_CONFIG), "mm_f32_exact")
        grid = ((w.rows + 3) // 4, (R + 7) // 8)
        fn(grid, (128,), (w.planes[0], *shape, *io))
        return
    cfg = build.MATMUL_CONFIG
    tile = cfg.row_tile(w.ggml_type, R, xh is not None, w.rows, _sm_count())
    if tile.packed:
        io = (*packed, *io[2:])
    args = (*w.pointers(), *shape, *io)
    fn = launch.kernel(build.matmul_module(cfg), tile.name)
    # x: row groups of the same weight tile run side by side (the tile is read from L2 after
    # the first); y: weight tiles
    grid = (-(-R // tile.rows_per_group), -(-w.rows // tile.rows_per_cta))
    fn(grid, (tile.threads,), args)


def attention_launches(
    kernel: str, core_below: int, shallow: bool, deep: bool
) -> list[tuple[str, int, int]]:
    """The attention kernels a pass launches, each with the row positions it takes (lo <= pos <
    hi): attn_decode_tc from core_below on (KernelDims.att_core_below), attn_decode below it; a
    kernel whose range holds none of the pass's rows (shallow: some row below core_below; deep:
    some row at or past it) is left out, as its CTAs would all return at once."""
    if kernel != "attn_decode_tc" or core_below <= 0:
        return [(kernel, 0, ATT_POS_END)]
    launches = [("attn_decode", 0, core_below)] if shallow else []
    return launches + ([(kernel, core_below, ATT_POS_END)] if deep else [])


@cache
def _sm_count() -> int:
    import cupy as cp

    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


def _packed(arr: Any, rows: int, cols: int, what: str) -> tuple[Any, Any]:
    """(pointer, row stride in halves) of an optional buffer of packed f16 activations
    (`pack_activations`) for rows x cols, checked; (null, 0) for None."""
    if arr is None:
        return np.uint64(0), _i32(0)
    need = packed_rows(rows)
    _check(
        arr.dtype == np.float16 and arr.shape[0] >= need and arr.shape[1] >= cols,
        f"{what}: packed activations {arr.dtype} {arr.shape}, need f16 [{need}][{cols}]",
    )
    _check(
        arr.strides[1] == 2 and arr.strides[0] % 64 == 0,
        f"{what}: packed activation rows must be whole multiples of 32 halves (packed_width)",
    )
    return arr, _i32(arr.strides[0] // 2)


def embed(w: GpuWeight, tokens: Any, out: Any) -> None:
    """out[t] = dequantized row tokens[t] of w.  tokens: i32 [T], out: f32 [T][K]."""
    _check(out.shape == (tokens.shape[0], w.cols), "embed: bad output shape")
    fn = launch.kernel(build.matmul_module(), "embed_rows")
    fn(
        (tokens.shape[0], -(-w.cols // EMBED_THREADS)),
        (EMBED_THREADS,),
        (*w.pointers(), _i32(w.rows), _i32(w.cols), _i32(w.ggml_type), tokens, out),
    )


class Ops:
    """Launchers of the op kernels compiled for one model shape."""

    def __init__(self, dims: KernelDims) -> None:
        self.dims = dims
        self.mod = build.ops_module(dims)

    def _fn(self, name: str) -> Any:
        return launch.kernel(self.mod, name)

    def rmsnorm(self, x: Any, w: Any, y: Any, eps: float, n: int | None = None, yh: Any = None) -> None:  # fmt: skip
        """y[t][:n] = RMSNorm_w(x[t][:n]).  x, y: f32 [T][ld]; yh (optional): the same values
        packed for the products (f16 [T][ld'], see `pack_activations`)."""
        n = w.shape[0] if n is None else n
        packed = _packed(yh, y.shape[0], n, "rmsnorm")
        lg = _i32(packed_group(y.shape[0]))
        rows = (x, _i32(x.strides[0] // 4), w, y, _i32(y.strides[0] // 4), *packed, lg)
        # one CTA per row: at decode a norm is one row, and 1,024 threads issue its 1,280 float4
        # loads (5,120 features) in one round instead of five
        threads = RMSNORM_THREADS
        self._fn("rmsnorm_rows")((x.shape[0],), (threads,), (*rows, _i32(n), np.float32(eps)))

    def swiglu(self, gu: Any, h: Any, hh: Any = None, interleaved: bool = False) -> None:
        """h = silu(gate) * up.  gu: f32 [T][2F], gate | up, or with `interleaved` their columns
        alternating in groups of 8 (what a gate|up weight so laid out gives:
        weights.interleave_halves); h: f32 [T][F] (contiguous); hh (optional): h packed for the
        products (f16 [T][packed_width(F)] or wider)."""
        T, F = h.shape
        _check(F % 4 == 0 and h.flags.c_contiguous, "swiglu: h must be contiguous, F % 4 == 0")
        _check(not interleaved or F % 8 == 0, "swiglu: interleaved gate|up needs F % 8 == 0")
        _check(gu.shape == (T, 2 * F) and gu.flags.c_contiguous, "swiglu: gu must be [T][2F]")
        hp, ldh = _packed(hh, T, F, "swiglu")
        args = (hp, ldh, _i32(packed_group(T)), _i32(F), _i32(T), _i32(int(interleaved)))
        self._fn("swiglu_rows")((min(4096, (T * F // 4 + 255) // 256),), (256,), (gu, h, *args))

    def gather(self, src: Any, idx: Any, dst: Any) -> None:
        """dst[i] = src[idx[i]].  src: f32 [.][n], idx: i32 [M], dst: f32 [M][n]."""
        self._fn("gather_rows")((idx.shape[0],), (256,), (src, idx, dst, _i32(src.shape[1])))

    def gather_packed(self, src: Any, n_src: int, idx: Any, dst: Any) -> None:
        """Row i of dst = row idx[i] of src, both packed activations (`pack_activations`): src
        as written for a pass of n_src rows (f16 [packed_rows(n_src)][K], contiguous rows),
        idx: i32 [M], dst: f16 [packed_rows(M)][K] (contiguous rows)."""
        M, K = idx.shape[0], src.shape[1]
        _check(
            src.strides == (2 * K, 2) and dst.strides == (2 * K, 2) and dst.shape[1] == K,
            "gather_packed: src and dst must be contiguous rows of the same width",
        )
        _check(
            src.shape[0] >= packed_rows(n_src) and dst.shape[0] >= packed_rows(M) and K % 32 == 0,
            "gather_packed: bad shapes (rows of packed_width halves)",
        )
        lgs = (_i32(packed_group(n_src)), idx, dst, _i32(packed_group(M)))
        self._fn("gather_packed")((M,), (256,), (src, *lgs, _i32(K)))

    def dn_conv(
        self, mix: Any, conv_w: Any, conv_st: Any, u: Any, row_slot: Any, row_first: Any
    ) -> None:
        """u = conv+SiLU(+L2) of mix.  mix: f32 [T][ldm >= C] (a view); u: f32 [T][C];
        conv_w [C][4]; conv_st [slots][3][C]; row_slot, row_first: i32 [T]."""
        T, C = u.shape
        args = (mix, _i32(mix.strides[0] // 4), conv_w, conv_st, u, row_slot, row_first, _i32(C))
        self._fn("dn_conv")((C // self.dims.dn_dk, T), (self.dims.dn_dk,), args)

    def dn_recur(
        self,
        u: Any,
        z: Any,
        beta: Any,
        alpha: Any,
        ssm_a: Any,
        dt_bias: Any,
        ssm_norm: Any,
        state: Any,
        y: Any | None,
        seg: Any,
        n_seg: int,
        hv: int,
        layers: int = 1,
        strides: tuple[int, int, int, int] = (0, 0, 0, 0),
        commit: tuple[Any, Any, int, int] | None = None,
        split: bool = False,
        yh: Any = None,
    ) -> None:
        """Delta rule per value head over each segment's seg[2] rows; the state is written back
        where seg[3] != 0; y = None replays without output.  seg: i32 [5][S] = slot, start,
        rows, commit, keep; u [T][C]; z [T][ldz]; beta/alpha [T][ldg]; state
        [slots][hv][dk][dv]; y [T][hv*dv]. commit = (mix, conv_st, mix_lstride, st_lstride):
        also the conv state after each segment's first seg[4] rows (mix: f32 [.][ldm >= C] view
        of the pre-conv rows, conv_st [slots][3][C]; strides between layers, elements). split:
        dn_cb state columns per block (dn_recur_split, for long segments: same results). yh:
        y also packed for the output product (`pack_activations` of a pass of y's rows)."""
        yptr = y if y is not None else np.uintp(0)
        packed = self._packed_output(yh, y, "dn_recur")
        if commit is None:
            conv: tuple[Any, ...] = (np.uintp(0), _i32(0), np.uintp(0), np.int64(0), np.int64(0))
        else:
            mix, conv_st, mix_lstride, st_lstride = commit
            ldm = _i32(mix.strides[-2] // 4)
            conv = (mix, ldm, conv_st, np.int64(mix_lstride), np.int64(st_lstride))
        # two threads per state column, a head's columns or dn_cb per block; the conv commit's
        # blocks after the recurrence blocks (deltanet.cu)
        d = self.dims
        cols = d.dn_cb if split else d.dn_dv
        threads, per_head = 2 * cols, d.dn_dv // cols
        C = 2 * d.dn_hk * d.dn_dk + hv * d.dn_dv
        blocks = hv * per_head + (-(-C // threads) if commit is not None else 0)
        norm_apart = y is not None and per_head > 1  # dn_gate_norm, below
        _check(not norm_apart or layers == 1, "dn_recur: outputs for one layer at a time")
        self._fn("dn_recur_split" if split else "dn_recur")(
            (blocks, n_seg, layers),
            (threads,),
            (
                u,
                z,
                _i32(z.strides[0] // 4),
                beta,
                alpha,
                _i32(beta.strides[0] // 4),
                ssm_a,
                dt_bias,
                ssm_norm,
                state,
                yptr,
                seg[0],
                seg[1],
                seg[2],
                seg[3],
                _i32(hv),
                *(np.int64(s) for s in strides),
                *conv[:3],
                seg[4],
                *conv[3:],
                *packed,
            ),
        )
        if norm_apart:
            ldz = _i32(z.strides[0] // 4)
            args = (y, z, ldz, ssm_norm, seg[1], seg[2], _i32(hv), *packed)
            self._fn("dn_gate_norm")((hv, n_seg), (256,), args)

    @staticmethod
    def _packed_output(yh: Any, y: Any, what: str) -> tuple[Any, Any]:
        """(yh or null, lg): a producer's packed copy of y's rows (a whole pass), checked."""
        if yh is None:
            return np.uintp(0), _i32(0)
        _check(y is not None, f"{what}: a packed copy needs outputs")
        T, K = y.shape
        _check(
            _packed(yh, T, K, what)[1] == K and y.strides == (4 * K, 4),
            f"{what}: y and its packed copy must be contiguous rows of {K}",
        )
        return yh, _i32(packed_group(T))

    def attn_prep(
        self,
        qg: Any,
        kf: Any,
        vf: Any,
        q_norm: Any,
        k_norm: Any,
        q: Any,
        pool: tuple[Any, Any, Any, Any],
        page_table: Any,
        row_slot: Any,
        row_pos: Any,
        freq_base: float,
    ) -> None:
        """Norm + RoPE of q and k; K/V into the q8_0 pool.  pool = (kq, kd, vq, vd)."""
        d = self.dims
        theta_scale = np.float32(freq_base ** (-2.0 / d.att_nrot))
        self._fn("attn_prep")(
            (qg.shape[0], d.att_hq + d.att_hkv),
            (d.att_d,),
            (
                qg,
                kf,
                vf,
                _i32(qg.strides[0] // 4),
                q_norm,
                k_norm,
                q,
                *pool,
                page_table,
                _i32(page_table.shape[1]),
                row_slot,
                row_pos,
                theta_scale,
            ),
        )

    @property
    def attention_kernel(self) -> str:
        """attn_decode_tc where asked for (KernelDims.att_tc) and built (256-wide heads, at most 8
        query heads per KV head), else attn_decode."""
        d = self.dims
        tc = d.att_tc and d.att_d == 256 and d.att_hq // d.att_hkv <= 8
        return "attn_decode_tc" if tc else "attn_decode"

    def attention_parts(self, max_rows: int) -> tuple[Any, Any]:
        """Scratch for the context split of up to ATT_ROWS_PER_LAUNCH rows at a time:
        part_o f32 [rows][hkv][splits][group][d], part_ml [..][2]."""
        import cupy as cp

        d = self.dims
        rows = min(max_rows, ATT_ROWS_PER_LAUNCH)
        shape = (rows, d.att_hkv, d.att_splits, d.att_hq // d.att_hkv)
        return cp.zeros((*shape, d.att_d), cp.float32), cp.zeros((*shape, 2), cp.float32)

    def attention(self, q: Any, qg: Any, pool: tuple[Any, Any, Any, Any], page_table: Any, row_slot: Any, row_pos: Any, scale: float, y: Any, parts: tuple[Any, Any], shallow: bool = True, deep: bool = True, yh: Any = None) -> None:  # fmt: skip
        """y = softmax(q K^T) V * sigmoid(gate) over positions 0..row_pos, split over the context
        in att_splits CTAs then merged, parts.shape[0] rows per launch.  q: f32 [T][hq][d];
        y: f32 [T][hq*d]; parts from attention_parts(). With the tensor-core kernel, rows below
        position att_core_below run attn_decode; shallow = False promises there are none, deep
        = False that there are none at or past it (attention_launches). yh: y also packed for the
        output product (`pack_activations` of the pass's T rows)."""
        T, hkv, group = q.shape[0], self.dims.att_hkv, parts[0].shape[0]
        yh, lg = self._packed_output(yh, y[:T], "attention")
        ld = _i32(qg.strides[0] // 4)
        kernel, below = self.attention_kernel, self.dims.att_core_below
        launches = attention_launches(kernel, below, shallow, deep)
        for r0 in range(0, T, group):
            r1 = min(T, r0 + group)
            meta = (page_table, _i32(page_table.shape[1]), row_slot[r0:r1], row_pos[r0:r1])
            for name, lo, hi in launches:
                args = (q[r0:r1], *pool, *meta, np.float32(scale), *parts, _i32(lo), _i32(hi))
                self._fn(name)((r1 - r0, hkv, self.dims.att_splits), (128,), args)
            merge = (qg[r0:r1], ld, *parts, y[r0:r1], yh, lg, _i32(r0))
            self._fn("attn_merge")((r1 - r0, hkv, self.dims.att_hq // hkv), (256,), merge)

    def sample(
        self,
        logits: Any,
        fparams: Any,
        iparams: Any,
        pen_off: Any,
        pen_tok: Any,
        pen_cnt: Any,
        out: Any,
    ) -> None:
        """One token per logits row.  logits f32 [M][V] (modified), fparams f32 [M][8],
        iparams i32 [M][4], pen_off i32 [M+1], pen_tok/pen_cnt i32 [P], out i32 [M]."""
        M, V = logits.shape
        self._fn("sample_rows")(
            (M,), (1024,), (logits, _i32(V), fparams, iparams, pen_off, pen_tok, pen_cnt, out)
        )

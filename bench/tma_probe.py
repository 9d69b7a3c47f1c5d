"""A probe, not an engine path: the Q4_K row product fed by the bulk-copy engine into a ring of
shared memory (bench/tma_probe.cu, sm_90+) against matmul.cu's row kernels, on the same weights:
every Q4_K matrix of the 27B Q4_K_M trunk, and one large matrix for the steady streaming rate.

With --set ablation: the engine's one-row kernel with parts of its work taken out (the
activation loads, the dequantization, the mma, the weight loads), each timed the same way, to
see which part of a warp's chain sets the products' rate.

With --set launch: the weight loads alone, each CTA streaming an equal share of a matrix's bytes
on grids of 2, 4 and 8 CTAs per SM or one CTA per 16-row tile, each consecutive pair of launches
ordered as the engine's products are, as its small kernels are, or not at all; beside the
ablation's loads alone on the engine's tiles. It tells what the step's loss at the launch
boundaries is made of: a grid that fits the SMs badly (the flat kernels on full grids near the
floor), or the dependency between consecutive launches (only the unordered ones near it).

With --set stage: the same loads in `flat`'s order with 16-48 KiB per CTA asked into shared
memory before the wait (does the boundary's loss shrink with more bytes in flight across it?).

With --set steal: the same loads with each CTA taking 16 KiB chunks from a counter per product
until none is left, ordered as the products or not (is the loss the spread of the CTAs' ends?).

With --set walk: every product's loads in one persistent launch, each product waiting for the
one before it on a counter per product after its first round is asked for (the CTAs counted
one by one or in groups of 8), against no wait and a plain barrier (does a counter cost less
than a launch boundary's ~1.5 us?).

With --set ring: the walk through a ring in shared memory whose loads run up to 184 KiB per CTA
ahead of the reads across the products, the reads waiting as the walk's (does the dependency
still cost once the bytes in flight need not stop at it?).

With --set anatomy: `flat`'s loads, ordered and not, and the engine's one-row kernel (whole and
its loads alone) on its tiles, with each CTA stamping the global timer at its entry, when its
wait returns, when its first round has arrived and at its end: what a launch boundary's cost is
made of (the spread of the CTAs' ends, the dependency itself, the successor's first round), and
whether the CTAs that end last sit on the same SMs launch after launch.

With --set tail: the engine's one-row kernel (rows_abl_all) with each product's last partial
wave of tiles run by CTAs of 8 or 16 warps splitting K, or by 2 or 4 CTAs of 4 warps per tile,
a shorter chain each (a timing bound: those CTAs' sums are not the engine's; is the tail v54b
measured worth a new sum order?).

With --set shares: the one-row kernel on a persistent grid whose warps take equal runs of each
product's (tile, super-block) sequence, each super-block summed apart and a tile's sums added in
K order by the warp that completes it (a new sum order; is an equal share worth it?).

With --set int8: the one-row Q4_K product on integer mma, the activation row as two int8 parts
(would an integer design take the arithmetic off the one-row step?).

Prints (1) whether each probe kernel gives the engine's bits (largest difference, 0 expected;
the ablations give no products and are not checked), (2) per row count the time of one graph
of all Q4_K products, each way, with the achieved TB/s against the read bandwidth measured in
the same run.

    python bench/tma_probe.py [--set tma|ablation|launch|stage|steal|walk|ring|anatomy|tail|shares|int8] [--rows 1,4] [--giant-gb 2] [--json F] [--stamps F]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import manifest, require_gpu  # noqa: E402
from bench.decode import model_matrices, product_inputs, read_bandwidth, time_graph  # noqa: E402
from engine.cuda import build, kernels, launch, weights  # noqa: E402

PROBE = Path(__file__).with_name("tma_probe.cu")
THREADS = 32 * build.MATMUL_CONFIG.nw
# (kernel, CTAs per SM of a persistent grid; 0: one CTA per tile) for 1 row and for 2-4 rows;
# rows1 / rows4: the engine's wmat_rows itself (the `_1` kernels, which kernels.matmul replaces
# by the deep `_1d` ones for narrow products); the persistent kernels end in "p"
VARIANTS = {
    1: [("rows1", 0), ("q4k_tma1_2", 0), ("q4k_tma1_3", 0), ("q4k_tma1_4", 0),
        ("q4k_tma1_3m5", 0), ("q4k_tma1_4p", 4)],
    4: [("rows4", 0), ("q4k_tma4_2", 0), ("q4k_tma4_3", 0), ("q4k_tma4_4p", 4)],
}  # fmt: skip


# --set ablation: the engine's one-row kernel with parts of its work taken out (tma_probe.cu
# ABL_*): rows_abl_all is the whole kernel again (it must give rows1's bits and time); the others
# give no products, only times
ABLATION = {
    1: [("rows1", 0), ("rows_abl_all", 0), ("rows_abl_nob", 0), ("rows_abl_nodeq", 0),
        ("rows_abl_nomma", 0), ("rows_abl_now", 0), ("rows_abl_now_nob", 0),
        ("rows_abl_loads", 0), ("rows_abl_noprep", 0), ("rows_abl_cheap", 0),
        ("rows_abl_cheap_noprep", 0), ("rows_abl_split", 0), ("rows_abl_split_noprep", 0),
        ("rows_abl_split_k8", 0), ("rows_abl_split_sums", 0), ("rows_abl_split_s1688", 0)],
}  # fmt: skip
CHECKED_ABLATIONS = ("rows1", "rows_abl_all")
# --set launch (tma_probe.cu flat_*): per_sm 0 = one CTA per 16-row tile, else that many per SM
LAUNCH = {
    1: [("rows1", 0), ("rows_abl_loads", 0), ("flat", 0), ("flat", 2), ("flat", 4), ("flat", 8),
        ("flat_early", 4), ("flat_nodep", 4), ("flat_nodep", 8)],
}  # fmt: skip
# --set stage (tma_probe.cu flat_stage*): `flat` with 16-48 KiB per CTA asked into shared memory
# before the wait, on grids where two launches' CTAs fit an SM together and (32 at 4) where not
STAGE = {
    1: [("flat", 4), ("flat_nodep", 4), ("flat_stage16", 4), ("flat_stage24", 4),
        ("flat_stage32", 4), ("flat", 3), ("flat_stage32", 3), ("flat", 2), ("flat_stage48", 2)],
}  # fmt: skip
# --set steal (tma_probe.cu steal*): chunks taken from a counter per product, ordered or not
STEAL = {
    1: [("flat", 4), ("flat_nodep", 4), ("steal", 4), ("steal_nodep", 4), ("steal", 2),
        ("steal", 8)],
}  # fmt: skip
WALK_GROUP = 8  # tma_probe.cu WALK_GROUP: the CTAs of a group counter (walk_tree)
# --set walk (tma_probe.cu walk_*): all products in one persistent launch, per_sm CTAs per SM,
# a counter per product for the dependency (split: the wait after the first round is asked)
WALK = {
    1: [("flat", 4), ("flat_nodep", 4), ("walk_free", 4), ("walk_split", 4), ("walk_barrier", 4),
        ("walk_tree", 4), ("walk_free", 8), ("walk_split", 8), ("walk_tree", 8), ("walk_split", 2)],
}  # fmt: skip
# --set ring (tma_probe.cu walk_ring*): the walk through a ring of NS rounds of 8 KiB per CTA in
# shared memory, the loads running ahead across the products (walk_ringNS: the dependency kept;
# _free: none), beside v35a's walk at 8 CTAs per SM and `flat` (v35e also had walk_ring1_release
# at 16 CTAs per SM: 40 registers x 128 threads x 16 CTAs do not fit an SM, so its wait ran out)
RING = {
    1: [("flat", 4), ("walk_free", 8), ("walk_split", 8), ("walk_ring24_free", 1), ("walk_ring24", 1),
        ("walk_ring12_free", 2), ("walk_ring12", 2), ("walk_ring6", 2), ("walk_ring6_free", 4),
        ("walk_ring6", 4), ("walk_ring3", 4), ("walk_ring3_free", 8), ("walk_ring3", 8),
        ("walk_ring12_paused", 2), ("walk_ring3_paused", 8), ("walk_ring12_release", 2),
        ("walk_ring3_release", 8), ("walk_ring1_release", 8)],
}  # fmt: skip
# --set anatomy (tma_probe.cu *_stamped): `flat` p4 with per-CTA timer stamps, ordered and not, and
# the engine's one-row kernel (rows_abl_all: the `_1` kernel for every product) whole and as its
# loads alone, one CTA per tile; each beside the same kernel without stamps (what they cost)
ANATOMY = {
    1: [("flat", 4), ("flat_stamped", 4), ("flat_nodep", 4), ("flat_stamped_nodep", 4),
        ("rows_abl_all", 0), ("rows_abl_all_stamped", 0), ("rows_abl_loads", 0),
        ("rows_abl_loads_stamped", 0)],
}  # fmt: skip
# --set tail (tma_probe.cu rows_abl_tail*): rows_abl_all with each product's last partial wave
# (its tiles past a multiple of 4 CTAs per SM, where there are more tiles than that) on CTAs of 8
# or 16 warps splitting K (v54d), or on 2 or 4 CTAs of 4 warps per tile, the bulk's CTA size (v54e)
TAIL = {
    1: [("rows_abl_all", 0), ("rows_abl_tail8", 0), ("rows_abl_tail16", 0), ("rows_abl_tail4s2", 0),
        ("rows_abl_tail4s4", 0)],
}  # fmt: skip
# --set shares (tma_probe.cu rows_shares): the one-row kernel on equal runs of (tile, super-block)
# per warp of a persistent grid, beside the engine's grid and `flat`'s loads alone
SHARES = {1: [("rows_abl_all", 0), ("rows_shares", 4), ("flat", 4)]}
SHARES_PART = 1 << 23  # floats of rows_shares's per-super-block sums (16 per super-block)
SHARES_TILES = 1 << 16  # its tile counters
STAMPS = 5  # tma_probe.cu STAMPS: entry, wait returned, first round in, end, SM
# the CTAs whose stamps one stamped kernel's buffer holds: every launch of a run, one after another
STAMP_CTAS = 1 << 20

# variants that choose a kernel per product by its tiles and the SMs, as the engine's
# MatmulConfig.row_tile does: rows_i8m_auto takes the deep kernel where its grid fits one wave
CHOSEN: dict[str, Callable[[int, int], str]] = {
    "rows_i8m_auto": lambda tiles, sms: "rows_i8m_d" if tiles <= 3 * sms else "rows_i8m",
}
# bytes of one activation stage of gemm_i8p (tma_probe.cu G8_STAGE: 32 rows x (576 + 192) + 128)
GEMM_I8_STAGE = 32 * (576 + 192) + 4 * 32
# and of gemm_h8 (H8_STAGE: 32 rows x (2 x 576 + 80) + 128)
GEMM_H8_STAGE = 32 * (2 * 576 + 80) + 4 * 32
# the gemm kernels with two activation stages in dynamic shared memory: one stage's bytes
PIPELINED = {"gemm_i8p": GEMM_I8_STAGE, "gemm_i8s": GEMM_I8_STAGE, "gemm_h8": GEMM_H8_STAGE}
# bytes of one ring round per CTA (tma_probe.cu ring_loads: LU x 16 x threads)
RING_ROUND = 8 * 1024
# --set int8 (tma_probe.cu rows_i8*): the one-row Q4_K product on integer mma with the activation
# row as two int8 parts, beside the engine's kernel and v31a's ablations (no dequantization; the
# loads alone)
INT8 = {
    1: [("rows1", 0), ("rows_abl_nodeq", 0), ("rows_abl_loads", 0), ("rows_i8", 0),
        ("rows_i8_nomin", 0), ("rows_i8m", 0), ("rows_i8m_d", 0), ("rows_i8m_auto", 0)],
    4: [("rows4", 0), ("rows_i8m4", 0), ("rows_i8f4", 0), ("rows_i8m4x2", 0), ("rows_i8m4s", 0)],
    8: [("rows_i8m8", 0), ("rows_i8f8", 0), ("rows_i8m8s", 0)],
    12: [("rows_i8m12", 0), ("rows_i8f12", 0), ("rows_i8m12s", 0)],
    16: [("rows_i8f16", 0)],
    20: [("rows_i8f20", 0)],
    512: [("gemm_i8", 0), ("gemm_i8p", 0), ("gemm_i8s", 0), ("gemm_h8", 0)],
}  # fmt: skip
SETS = {
    "tma": VARIANTS, "ablation": ABLATION, "launch": LAUNCH, "stage": STAGE, "steal": STEAL,
    "walk": WALK, "ring": RING, "anatomy": ANATOMY, "tail": TAIL, "shares": SHARES, "int8": INT8,
}  # fmt: skip


def checked(kernel: str) -> bool:
    """Whether a probe kernel computes the product (the ablations and loads alone do not)."""
    return kernel in CHECKED_ABLATIONS or not (
        "_abl_" in kernel or kernel.startswith(("flat", "steal", "walk"))
    )


def int8_activations(x: Any) -> Any:
    """One f32 activation row [K] as rows_i8 reads it (tma_probe.cu): int8 hi [K], int8 lo [K],
    f32 s / 16 per super-block, f32 sub-block sums of x, the mins' B fragments; x ~= s * (hi +
    lo / 254), s = the super-block's largest |x| / 127."""
    import cupy as cp

    k = x.shape[0]
    blocks = x.reshape(-1, 256)
    s = cp.abs(blocks).max(axis=1, keepdims=True) / 127
    s = cp.where(s > 0, s, 1).astype(cp.float32)
    q = blocks / s
    hi = cp.clip(cp.rint(q), -127, 127)
    lo = cp.clip(cp.rint((q - hi) * 254), -127, 127)
    nsb = k // 256
    sx = cp.zeros(4 * -(-nsb // 4), cp.float32)  # padded: every part starts 16-byte aligned
    sx[:nsb] = s[:, 0] / 16
    sums = x.reshape(-1, 32).sum(axis=1, dtype=cp.float32)
    # the mins' B fragments: per super-block, column, lane t: b0 = k 4t.. (sub-block t in slot 0),
    # b1 = k 16 + 4t.. (sub-block t + 4); columns 0, 1: XH = sum of hi = 64a + b as b, a; 2, 3: XL
    xm = cp.zeros((nsb, 8, 4, 2, 4), cp.int8)
    for col, part in ((0, hi), (2, lo)):
        total = part.reshape(nsb, 8, 32).sum(axis=2).astype(cp.int32)  # |total| <= 4,064
        for c, v in ((col, total & 63), (col + 1, total >> 6)):
            xm[:, c, :, 0, 0] = v[:, :4]
            xm[:, c, :, 1, 0] = v[:, 4:]
    parts = [hi.astype(cp.int8).ravel(), lo.astype(cp.int8).ravel(), sx.view(cp.int8), sums.view(cp.int8),
             xm.ravel()]  # fmt: skip
    return cp.concatenate(parts)


def int8_fragments(rows: list[Any], k: int) -> Any:
    """The fragment block rows_i8f* read after the row buffers (tma_probe.cu I8F_QUAD_SB): the
    rows' int8 planes and mins' fragments (int8_activations) in the order the lanes load them,
    per quad of rows and super-block; a quad's missing rows are zeros."""
    import cupy as cp

    nsb = k // 256
    xm_off = 2 * k + 16 * -(-nsb // 4) + 4 * (k // 32)
    quads = -(-len(rows) // 4)
    zero = cp.zeros_like(rows[0])
    padded = [*rows, *[zero] * (4 * quads - len(rows))]
    buf = cp.stack(padded).reshape(quads, 4, -1)  # [q, j, bytes]
    # planes: [q, j, plane, sb, p, odd, t, 8] -> [q, sb, p, j, plane, t, odd, 8]
    planes = buf[:, :, : 2 * k].reshape(quads, 4, 2, nsb, 4, 2, 4, 8)
    planes = planes.transpose(0, 3, 4, 1, 2, 6, 5, 7).reshape(quads, nsb, 4 * 512)
    # mins: columns 0-3 of [q, j, sb, column, t, 8] as [q, j, sb, part, plane, t, 8] -> [q, sb, j,
    # plane, t, part, 8] (columns 4-7 are zeros, read by no lane)
    mins = buf[:, :, xm_off : xm_off + nsb * 256].reshape(quads, 4, nsb, 8, 4, 8)[:, :, :, :4]
    mins = mins.reshape(quads, 4, nsb, 2, 2, 4, 8)
    mins = mins.transpose(0, 2, 1, 4, 5, 3, 6).reshape(quads, nsb, 512)
    return cp.ascontiguousarray(cp.concatenate([planes, mins], axis=2)).ravel()


# gemm_h8's order of the 8 elements of each group in its f16 planes (tma_probe.cu: lane t's
# first k16 step holds elements 8t + 0, 2 | 1, 3 of a sub-block, its second 4, 6 | 5, 7)
H8_ORDER = (0, 2, 1, 3, 4, 6, 5, 7)


def h8_activations(row: Any, k: int) -> Any:
    """One row's int8_activations as gemm_h8 reads them: f16 hi [K] and lo [K] (groups of 8 in
    H8_ORDER), the same f32 s / 16 [K / 256, padded to 4], f16 mins' sums [K / 256][XH, XL][b,
    a][8 sub-blocks] (b = sum & 63, a = sum >> 6, as int8_activations' B fragments)."""
    import cupy as cp

    nsb = k // 256
    order = cp.asarray(H8_ORDER)
    planes = row[: 2 * k].view(cp.int8).reshape(2, k // 8, 8)[:, :, order].astype(cp.float16)
    sx_bytes = 16 * -(-nsb // 4)
    sx = row[2 * k : 2 * k + sx_bytes]
    sums = planes.astype(cp.int32).reshape(2, nsb, 8, 32).sum(axis=3)  # [part][sb][sub-block]
    mins = cp.stack([sums & 63, sums >> 6], axis=2).transpose(1, 0, 2, 3).astype(cp.float16)
    return cp.concatenate(
        [planes.ravel().view(cp.int8), sx.view(cp.int8), mins.ravel().view(cp.int8)]
    )


# the kernels that read int8_rows (their activation rows as integers), and those of them whose
# every row must be rows_i8m's bits (check)
INT8_KERNELS = ("rows_i8", "gemm_i8", "gemm_h8")
ROWS_I8M_BITS = ("rows_i8m4", "rows_i8m8", "rows_i8m12", "rows_i8f", "rows_i8m_d", "gemm_i8", "gemm_h8")  # fmt: skip


def int8_form_name(kernel: str) -> str:
    """Which form of the activation rows an INT8_KERNELS kernel reads (int8_rows)."""
    return "h8" if kernel == "gemm_h8" else "fragments" if kernel.startswith("rows_i8f") else "rows"


def int8_rows(form: str, x: Any) -> tuple[Any, int]:
    """f32 rows x [R][K] as one buffer of the form's rows and the bytes of one row: `rows`, each
    row's int8_activations one after another; `fragments`, the same followed by their
    int8_fragments block (rows_i8f*); `h8`, each row's h8_activations (gemm_h8)."""
    import cupy as cp

    rows = [int8_activations(row) for row in x]
    if form == "h8":
        rows = [h8_activations(row, x.shape[1]) for row in rows]
    tail = [int8_fragments(rows, x.shape[1])] if form == "fragments" else []
    return cp.concatenate([*rows, *tail]), rows[0].size


# dynamic shared memory for the engine-shaped kernels ("rows*"): unused, it holds every kernel at
# 4 CTAs per SM (228 KiB per SM), where the ablations' fewer registers would allow 5
ROWS_SMEM = 46 * 1024


def variant_name(kernel: str, per_sm: int) -> str:
    return kernel if per_sm == 0 else f"{kernel}_p{per_sm}"


class Probe:
    """The probe's kernels, launched like kernels.matmul on packed activations."""

    def __init__(self, variants: dict[int, list[tuple[str, int]]]) -> None:
        import cupy as cp

        self.variants = variants
        text = build.inline_includes(PROBE.read_text())
        mod = cp.RawModule(code=text, options=("-std=c++17", *build.MATMUL_CONFIG.defines()))
        names = {k for vs in variants.values() for k, _ in vs} - set(CHOSEN)
        self.fns = {name: launch.kernel(mod, name) for name in names}
        self.timer = mod.get_function("timer_step")
        # two activation stages: dynamic shared memory over 48 KiB
        for name in PIPELINED.keys() & set(self.fns):
            self.fns[name].fn.max_dynamic_shared_size_bytes = 2 * PIPELINED[name]
        self.sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        # ROWS_SMEM, less what a kernel's static shared memory takes over the 48 KiB a launch
        # may ask without opting in
        self.rows_smem = {
            name: min(ROWS_SMEM, 48 * 1024 - int(fn.fn.attributes["shared_size_bytes"]))
            for name, fn in self.fns.items()
        }
        # the steal kernels' counters: a pair per product (by the weight's id), zeroed once
        self.counters = cp.zeros(2 * 4096, dtype=cp.int32)
        self.counter_pairs: dict[int, int] = {}
        self.failed = cp.zeros(1, dtype=cp.int32)  # the walk kernels' flag: a wait ran out
        # the stamped kernels' timer stamps (kernel -> u64 [STAMP_CTAS][STAMPS], made here: not
        # while a graph is being captured) and where each product's CTAs write theirs (kernel ->
        # {id(weight): (first CTA, CTAs)})
        self.stamps: dict[str, Any] = {
            k: cp.zeros((STAMP_CTAS, STAMPS), dtype=cp.uint64)
            for vs in variants.values()
            for k, _ in vs
            if k.endswith("_stamped") or "_stamped_" in k
        }
        self.stamp_slots: dict[str, dict[int, tuple[int, int]]] = {}
        shares = any(k == "rows_shares" for vs in variants.values() for k, _ in vs)
        self.shares_part = cp.zeros(SHARES_PART if shares else 1, dtype=cp.float32)
        self.shares_count = cp.zeros(SHARES_TILES if shares else 1, dtype=cp.uint32)
        # (int8_form_name, id(x)) -> (x, int8_rows of that form: the buffer, a row's bytes)
        self.int8_rows: dict[tuple[str, int], tuple[Any, Any, int]] = {}

    def resources(self) -> dict[str, dict[str, int]]:
        """Each kernel's registers per thread and static shared memory (whether two launches'
        CTAs can share an SM)."""
        keys = ("num_regs", "shared_size_bytes", "local_size_bytes")
        return {name: {k: int(fn.fn.attributes[k]) for k in keys} for name, fn in self.fns.items()}

    def walk(self, kernel: str, per_sm: int, mats: list[weights.GpuWeight], y: Any) -> Callable[[], None]:  # fmt: skip
        """All of mats' loads in one persistent launch of `kernel` (walk_*), per_sm CTAs per SM,
        its counters zeroed first (a memset node in the graph); self.failed says afterwards
        whether a wait ran out (the grid was not resident at once)."""
        import cupy as cp

        table = cp.asarray([[m.planes[0].data.ptr, m.rows, m.cols] for m in mats], dtype=cp.int64)
        # a counter per product, then (walk_tree) a row of group counters per product; or
        # (walk_ring*_paused) a counter per product every 32 (its own 128-byte line)
        groups = -(-per_sm * self.sms // WALK_GROUP)
        done = cp.zeros(len(mats) * (32 + groups), dtype=cp.uint32)
        args = (table, np.int32(len(mats)), done, self.failed, y)

        smem = 0
        if kernel.startswith("walk_ring"):  # NS rounds of ring in dynamic shared memory
            smem = int(kernel.removeprefix("walk_ring").split("_")[0]) * RING_ROUND
            self.fns[kernel].fn.max_dynamic_shared_size_bytes = smem

        def run() -> None:
            done.fill(0)
            self.fns[kernel]((per_sm * self.sms,), (THREADS,), args, shared_mem=smem)

        return run

    def product(self, kernel: str, per_sm: int, w: weights.GpuWeight, xh: Any, y: Any, R: int, ctas: int = 0, x: Any = None) -> None:  # fmt: skip
        """W xh into y[:R] with `kernel`: one CTA per tile (per_sm 0), per_sm CTAs per SM, or
        `ctas` CTAs when given; x: the f32 rows of xh (the int8 kernels read their own form of
        them, made once per x)."""
        if kernel in CHOSEN:
            kernel = CHOSEN[kernel](-(-w.rows // 16), self.sms)
        tiles = -(-w.rows // (32 if kernel.endswith("x2") else 16))  # x2: two m-tiles per warp
        grid = ctas or (tiles if per_sm == 0 else min(tiles, per_sm * self.sms))
        if kernel.startswith(("flat", "steal")) and per_sm:  # a full grid, whatever the rows
            grid = per_sm * self.sms
        i32 = np.int32
        ldx = i32(xh.shape[1])
        if kernel.startswith("steal"):  # X: the counters, ldx: this product's pair
            pair = self.counter_pairs.setdefault(id(w), len(self.counter_pairs))
            if 2 * pair >= self.counters.size:
                raise ValueError("tma_probe: more products than steal counters")
            xh, ldx = self.counters, i32(pair)
        stamps: tuple[Any, ...] = ()
        if kernel in self.stamps:  # this product's CTAs' stamps: after the products before it
            slots = self.stamp_slots.setdefault(kernel, {})
            if id(w) not in slots:
                first = sum(n for _, n in slots.values())
                if first + grid > STAMP_CTAS:
                    raise ValueError("tma_probe: more CTAs than stamps")
                slots[id(w)] = (first, grid)
            first, n = slots[id(w)]
            at = self.stamps[kernel][first : first + n]
            if kernel.startswith("flat"):  # X: this launch's stamps
                xh = at
            else:  # the engine-shaped kernels: one more argument
                stamps = (at,)
        if kernel.startswith(INT8_KERNELS):  # their own forms of x's rows, made once per x
            form = int8_form_name(kernel)
            if (form, id(x)) not in self.int8_rows:
                self.int8_rows[form, id(x)] = (x, *int8_rows(form, x))
            _, xh, size = self.int8_rows[form, id(x)]
            ldx = i32(size)
        args = (w.planes[0], i32(w.rows), i32(w.cols), xh, ldx, y, i32(y.shape[1]), i32(R), *stamps)
        if kernel == "rows_shares":  # a persistent grid, its sums and counters
            if (
                tiles * (w.cols // 256) * 16 > self.shares_part.size
                or tiles > self.shares_count.size
            ):
                raise ValueError("tma_probe: rows_shares's scratch is too small for this weight")
            self.fns[kernel](
                (per_sm * self.sms,), (THREADS,), (*args, self.shares_part, self.shares_count)
            )
            return
        if kernel.startswith("rows_abl_tail"):  # the bulk on rows_abl_all, the last wave here
            wave = 4 * self.sms  # rows_abl_all's CTAs resident at once
            tail = tiles % wave if tiles > wave else 0
            bulk = self.fns["rows_abl_all"]
            bulk((1, tiles - tail), (THREADS,), args, shared_mem=self.rows_smem["rows_abl_all"])
            if tail:  # rows_abl_tail<warps>[s<CTAs per tile>] (not "x": see `tiles` above)
                warps, _, split = kernel.removeprefix("rows_abl_tail").partition("s")
                ctas = tail * int(split or 1)
                self.fns[kernel]((1, ctas), (32 * int(warps),), (*args, i32(tiles - tail)))
            return
        if kernel.startswith("gemm"):  # 32 activation rows x 128 weight rows per CTA of 8 warps
            smem = 2 * PIPELINED.get(kernel, 0)  # two stages (__init__)
            self.fns[kernel]((-(-R // 32), -(-w.rows // 128)), (256,), args, shared_mem=smem)
        elif kernel.startswith("rows"):  # the engine's wmat_rows takes its tile from grid y
            self.fns[kernel]((1, grid), (THREADS,), args, shared_mem=self.rows_smem[kernel])
        else:
            self.fns[kernel]((grid,), (THREADS,), args)


def check(probe: Probe) -> dict[str, float]:
    """Largest |probe - engine| per variant over a few shapes (rows not a multiple of 16, K
    not a multiple of 4 super-blocks, persistent grids smaller than the tiles): 0 expected; for
    the int8 kernels (rows_i8*, gemm_i8), which round otherwise, relative to the largest |engine|,
    and (the multi-row ones) against rows_i8m row by row: 0 expected."""
    import cupy as cp

    out: dict[str, float] = {}
    shapes = [(72, 768), (1000, 1280), (5120, 6144), (34816, 5120)]
    for rows, cols in shapes:
        w = weights.random_weight("check", weights.Q4_K, rows, cols, rows + cols)
        for R, listed in probe.variants.items():
            variants = [(k, p) for k, p in listed if checked(k)]
            x = cp.random.default_rng(R).standard_normal((R, cols), dtype=cp.float32)
            xh = kernels.pack_activations(x)
            want = cp.full((R, rows), np.nan, cp.float32)
            kernels.matmul(w, x, want, xh=xh)
            # and each persistent kernel on a grid of 7 CTAs: every CTA walks many tiles
            persistent = [(k, 1, 7) for k, p in variants if k.endswith("p")]
            for kernel, per_sm, ctas in [*((k, p, 0) for k, p in variants), *persistent]:
                got = cp.full((R, rows), np.nan, cp.float32)
                probe.product(kernel, per_sm, w, xh, got, R, ctas, x)
                bad = float(cp.nan_to_num(cp.abs(got - want), nan=np.inf).max())
                key = f"{kernel}_7ctas" if ctas else variant_name(kernel, per_sm)
                if kernel.startswith(INT8_KERNELS):  # other roundings: relative to the largest
                    bad, key = bad / float(cp.abs(want).max()), f"{key}_relative"
                if kernel.startswith(ROWS_I8M_BITS):  # rows_i8m's bits
                    for r in sorted({0, 1, 2, 3, 31, 32, 33, R - 1} & set(range(R))):
                        one = cp.full((1, rows), np.nan, cp.float32)
                        probe.product("rows_i8m", 0, w, xh, one, 1, 0, x[r : r + 1])
                        diff = float(cp.nan_to_num(cp.abs(got[r] - one[0]), nan=np.inf).max())
                        bits = f"{kernel}_against_rows_i8m"
                        out[bits] = max(out.get(bits, 0.0), diff)
                out[key] = max(out.get(key, 0.0), bad)
    return out


def _us(v: Any) -> float | None:
    """ns -> us, 3 decimals (None for an empty value)."""
    return round(float(v) / 1e3, 3) if np.size(v) else None


def _sm_lateness(sm: list[Any], end: list[Any], end_med: Any) -> dict[str, Any]:
    """How far each SM's CTAs end after their launch's median, and whether the same SMs are late
    launch after launch (boundary_anatomy's last three keys)."""
    n_sm = max(int(s.max()) for s in sm) + 1
    per_sm = np.zeros((len(sm), n_sm))
    for i, (s, e) in enumerate(zip(sm, end, strict=True)):
        sums = np.bincount(s, weights=e - end_med[i], minlength=n_sm)
        per_sm[i] = sums / np.maximum(np.bincount(s, minlength=n_sm), 1)
    mean_late = per_sm.mean(axis=0)
    centred = per_sm - per_sm.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(centred, axis=1)
    dots = (centred[1:] * centred[:-1]).sum(axis=1) / np.maximum(norms[1:] * norms[:-1], 1e-9)
    last_sm = np.array([s[e.argmax()] for s, e in zip(sm, end, strict=True)])
    worst = np.argsort(mean_late)[::-1][:8]
    return {
        "sm_lateness_us": {
            "std": _us(mean_late.std()),
            "worst": {int(k): _us(mean_late[k]) for k in worst},
            "best": _us(mean_late.min()),
        },
        "lateness_corr": round(float(dots.mean()), 3) if dots.size else None,
        "last_on_worst8": round(float(np.isin(last_sm, worst).mean()), 3),
    }


def boundary_anatomy(stamps: Any, nbytes: list[int], bw: float) -> dict[str, Any]:
    """What the launch boundaries of one replay are made of. stamps: per launch, in the graph's
    order, its CTAs' stamps [C_i][STAMPS] (tma_probe.cu's stamped kernels: entry, wait returned,
    first round in, end, SM; ns; C_i may differ between launches), nbytes each launch's weight
    bytes, bw the read bandwidth (bytes/s).

    The replay's span (first wait returned -> last end) is split exactly, launch by launch, into
    `dependency` (the predecessor's last end -> this launch's first wait returned), `stream`
    (-> its median end) and `tail` (-> its last end), and `stream` set beside the bytes' floor.
    `tail90`: the last end less the launch's 90th percentile of ends (a last partial wave).
    `by_grid`: per grid size (a product shape), its launches' mean share of the span, tail and
    bytes' floor.
    `sm_lateness`: each SM's mean (end - launch median) over every launch; `lateness_corr`: the
    mean correlation between consecutive launches' per-SM lateness (near 1: the same SMs end
    last every time)."""
    launches = [np.asarray(a) for a in stamps]
    origin = int(launches[0][:, 1].astype(np.int64).min())
    t = [a[:, :4].astype(np.int64) - origin for a in launches]
    sm = [a[:, 4].astype(np.int64) for a in launches]
    entry, wait, first, end = ([a[:, i] for a in t] for i in range(4))

    def per(f: Any, parts: list[Any]) -> Any:
        return np.array([f(p) for p in parts], dtype=np.float64)

    end_max, end_med = per(np.max, end), per(np.median, end)
    end_p90 = per(lambda e: np.quantile(e, 0.9), end)
    wait_min, wait_max = per(np.min, wait), per(np.max, wait)
    ideal = np.asarray(nbytes, dtype=np.float64) / bw * 1e9
    dependency = np.concatenate([[0.0], wait_min[1:] - end_max[:-1]])
    stream = end_med - wait_min
    tail = end_max - end_med
    ctas = np.array([len(a) for a in t])
    whole = np.diff(np.concatenate([[wait_min[0]], end_max]))  # each launch's share of the span
    first_round = per(np.median, [f - w for f, w in zip(first, wait, strict=True)])
    return {
        "launches": len(t),
        "span_ms": round(float(end_max[-1] - wait_min[0]) / 1e6, 4),
        "floor_ms": round(float(ideal.sum()) / 1e6, 4),
        "dependency_ms": round(float(dependency.sum()) / 1e6, 4),
        "stream_ms": round(float(stream.sum()) / 1e6, 4),
        "tail_ms": round(float(tail.sum()) / 1e6, 4),
        "per_launch_us": {
            "dependency_median": _us(np.median(dependency[1:]) if len(t) > 1 else []),
            "tail_median": _us(np.median(tail)),
            "tail90_median": _us(np.median(end_max - end_p90)),
            "stream_over_floor_median": _us(np.median(stream - ideal)),
            "wait_spread_median": _us(np.median(wait_max - wait_min)),
            "first_round_after_wait_median": _us(np.median(first_round)),
            "resident_before_wait_median": _us(np.median(wait_min - per(np.median, entry))),
        },
        **_sm_lateness(sm, end, end_med),
        "by_grid": {  # per grid size (the products of one shape): mean us of each part
            int(n): {
                "launches": int(same.sum()),
                "share_us": _us(whole[same].mean()),
                "tail_us": _us(tail[same].mean()),
                "floor_us": _us(ideal[same].mean()),
            }
            for n in sorted(set(ctas.tolist()))
            for same in [ctas == n]
        },
    }


def timer_step(probe: Probe) -> list[int]:
    """The global timer's smallest step, changes, first and last reading (tma_probe.cu timer_step)."""
    import cupy as cp

    out = cp.zeros(4, dtype=cp.uint64)
    probe.timer((1,), (1,), (out, np.int32(200_000)))
    return [int(v) for v in out.get()]


def time_rows(probe: Probe, mats: list[weights.GpuWeight], R: int, nbytes: int, bw: float) -> dict[str, Any]:  # fmt: skip
    """One graph of every product at R rows: the engine's kernels, then each probe variant."""
    _x, xh, y, engine = product_inputs(mats, R)

    def probed(kernel: str, per_sm: int) -> Callable[[], None]:
        def run() -> None:
            for m in mats:
                probe.product(kernel, per_sm, m, xh[m.cols], y, R, x=_x[m.cols])

        return run

    variants: list[tuple[str, Callable[[], None]]] = [("engine", engine)]
    for k, p in probe.variants[R if R in probe.variants else 4 if R > 1 else 1]:
        run = probe.walk(k, p, mats, y) if k.startswith("walk") else probed(k, p)
        variants.append((variant_name(k, p), run))
    row: dict[str, Any] = {"rows": R}
    for name, fn in variants:
        probe.failed.fill(0)
        t = time_graph(fn)
        row[name] = {"ms": round(t * 1e3, 4), "tb_s": round(nbytes / t / 1e12, 3),
                     "x_floor": round(t / (nbytes / bw), 3)}  # fmt: skip
        if int(probe.failed.get()[0]):  # a wait ran out: the time is not the walk's
            row[name]["failed"] = True
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4", help="of 1, 4 (the sets other than tma, int8: 1)")
    parser.add_argument("--giant-gb", type=float, default=2.0, help="0: no steady-rate run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--stamps", type=Path, help="--set anatomy: the raw stamps (npz)")
    parser.add_argument(
        "--set",
        choices=tuple(SETS),
        default="tma",
        help="the bulk-copy kernels, the one-row kernel's ablations, the loads alone on other"
        " grids and launch orders, staged before the wait, taken in chunks, or walked in one launch"
        " (all but the first:"
        " one row only)",
    )
    args = parser.parse_args()
    require_gpu("bench/tma_probe.py")
    variants = SETS[args.set]
    rows = [int(r) for r in args.rows.split(",")]
    if any(r not in variants for r in rows):
        parser.error(f"--rows: of {sorted(variants)} for --set {args.set}")

    info: dict[str, Any] = {"manifest": manifest(), "set": args.set}
    probe = Probe(variants)
    info["check_max_abs_diff"] = check(probe)
    print("check", json.dumps(info["check_max_abs_diff"]), flush=True)
    info["kernels"] = probe.resources()
    print("kernels", json.dumps(info["kernels"]), flush=True)
    bw = read_bandwidth()
    info["read_tb_s"] = bw / 1e12
    if probe.stamps:
        info["timer_step"] = timer_step(probe)
        print("timer_step", json.dumps(info["timer_step"]), flush=True)
    raw: dict[str, Any] = {}
    runs = [("model_q4k", [m for m in model_matrices() if m.ggml_type == weights.Q4_K])]
    if args.giant_gb > 0:
        n = int(args.giant_gb * 1e9 / weights.tensor_bytes(weights.Q4_K, 1, 5120)) // 16 * 16
        runs.append(("giant", [weights.random_weight("giant", weights.Q4_K, n, 5120, 1)]))
    for label, mats in runs:
        nbytes = sum(m.nbytes for m in mats)
        print(f"{label}: {len(mats)} matrices, {nbytes / 1e9:.2f} GB; read {bw / 1e12:.3f} TB/s, "
              f"floor {nbytes / bw * 1e3:.3f} ms", flush=True)  # fmt: skip
        info[label] = []
        for R in rows:
            row = time_rows(probe, mats, R, nbytes, bw)
            for kernel, buf in probe.stamps.items():  # the last replay's stamps, this run's CTAs
                spans = [probe.stamp_slots[kernel][id(m)] for m in mats]
                held = buf[spans[0][0] : spans[-1][0] + spans[-1][1]].get()
                stamps = [held[f - spans[0][0] : f - spans[0][0] + n] for f, n in spans]
                row[f"{kernel}_anatomy"] = boundary_anatomy(stamps, [m.nbytes for m in mats], bw)
                raw[f"{label}_{kernel}"] = held
                raw[f"{label}_{kernel}_ctas"] = np.array([n for _, n in spans])
            info[label].append(row)
            print(label, json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    if args.stamps and raw:
        np.savez_compressed(args.stamps, **raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())

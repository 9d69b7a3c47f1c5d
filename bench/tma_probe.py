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

Prints (1) whether each probe kernel gives the engine's bits (largest difference, 0 expected;
the ablations give no products and are not checked), (2) per row count the time of one graph
of all Q4_K products, each way, with the achieved TB/s against the read bandwidth measured in
the same run.

    python bench/tma_probe.py [--set tma|ablation|launch|stage|steal] [--rows 1,4] [--giant-gb 2] [--json F]
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
SETS = {"tma": VARIANTS, "ablation": ABLATION, "launch": LAUNCH, "stage": STAGE, "steal": STEAL}


def checked(kernel: str) -> bool:
    """Whether a probe kernel computes the product (the ablations and loads alone do not)."""
    return kernel in CHECKED_ABLATIONS or not (
        "_abl_" in kernel or kernel.startswith(("flat", "steal"))
    )


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
        names = {k for vs in variants.values() for k, _ in vs}
        self.fns = {name: launch.kernel(mod, name) for name in names}
        self.sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
        # the steal kernels' counters: a pair per product (by the weight's id), zeroed once
        self.counters = cp.zeros(2 * 4096, dtype=cp.int32)
        self.counter_pairs: dict[int, int] = {}

    def resources(self) -> dict[str, dict[str, int]]:
        """Each kernel's registers per thread and static shared memory (whether two launches'
        CTAs can share an SM)."""
        keys = ("num_regs", "shared_size_bytes", "local_size_bytes")
        return {name: {k: int(fn.fn.attributes[k]) for k in keys} for name, fn in self.fns.items()}

    def product(self, kernel: str, per_sm: int, w: weights.GpuWeight, xh: Any, y: Any, R: int, ctas: int = 0) -> None:  # fmt: skip
        """W xh into y[:R] with `kernel`: one CTA per tile (per_sm 0), per_sm CTAs per SM, or
        `ctas` CTAs when given."""
        tiles = -(-w.rows // 16)
        grid = ctas or (tiles if per_sm == 0 else min(tiles, per_sm * self.sms))
        if kernel.startswith(("flat", "steal")) and per_sm:  # a full grid, whatever the rows
            grid = per_sm * self.sms
        i32 = np.int32
        x, ldx = xh, i32(xh.shape[1])
        if kernel.startswith("steal"):  # X: the counters, ldx: this product's pair
            pair = self.counter_pairs.setdefault(id(w), len(self.counter_pairs))
            if 2 * pair >= self.counters.size:
                raise ValueError("tma_probe: more products than steal counters")
            x, ldx = self.counters, i32(pair)
        args = (w.planes[0], i32(w.rows), i32(w.cols), x, ldx, y, i32(y.shape[1]), i32(R))
        if kernel.startswith("rows"):  # the engine's wmat_rows takes its tile from grid y
            self.fns[kernel]((1, grid), (THREADS,), args, shared_mem=ROWS_SMEM)
        else:
            self.fns[kernel]((grid,), (THREADS,), args)


def check(probe: Probe) -> dict[str, float]:
    """Largest |probe - engine| per variant over a few shapes (rows not a multiple of 16, K
    not a multiple of 4 super-blocks, persistent grids smaller than the tiles): 0 expected."""
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
                probe.product(kernel, per_sm, w, xh, got, R, ctas)
                bad = float(cp.nan_to_num(cp.abs(got - want), nan=np.inf).max())
                key = f"{kernel}_7ctas" if ctas else variant_name(kernel, per_sm)
                out[key] = max(out.get(key, 0.0), bad)
    return out


def time_rows(probe: Probe, mats: list[weights.GpuWeight], R: int, nbytes: int, bw: float) -> dict[str, Any]:  # fmt: skip
    """One graph of every product at R rows: the engine's kernels, then each probe variant."""
    _x, xh, y, engine = product_inputs(mats, R)

    def probed(kernel: str, per_sm: int) -> Callable[[], None]:
        def run() -> None:
            for m in mats:
                probe.product(kernel, per_sm, m, xh[m.cols], y, R)

        return run

    variants: list[tuple[str, Callable[[], None]]] = [("engine", engine)]
    variants += [(variant_name(k, p), probed(k, p)) for k, p in probe.variants[4 if R > 1 else 1]]
    row: dict[str, Any] = {"rows": R}
    for name, fn in variants:
        t = time_graph(fn)
        row[name] = {"ms": round(t * 1e3, 4), "tb_s": round(nbytes / t / 1e12, 3),
                     "x_floor": round(t / (nbytes / bw), 3)}  # fmt: skip
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4", help="of 1, 4 (the sets other than tma: 1)")
    parser.add_argument("--giant-gb", type=float, default=2.0, help="0: no steady-rate run")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--set",
        choices=tuple(SETS),
        default="tma",
        help="the bulk-copy kernels, the one-row kernel's ablations, the loads alone on other"
        " grids and launch orders, staged before the wait, or taken in chunks (all but the first:"
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
            info[label].append(row)
            print(label, json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A probe, not an engine path: do the ~4-5 us that each product launch loses (bench/NOTES.md
v24) come back when a step's products run inside ONE persistent kernel with a grid barrier
between consecutive products? bench/chain_probe.cu runs every Q4_K product of the 27B Q4_K_M
trunk in forward order with work items of one super-block of one 16-row tile shared evenly by
all warps: at one activation row on int_dot_probe.cu's dp4a loop (`chain_q4k`), at 2-8 rows on
its int8 mma loop over repacked code bytes (`chain_q4k_mma`), and at every row count on the
engine's own f16 fragments and packed activations (`chain_q4k_f16_<XL>`: today's numerics).

Prints, in one run and per row count, the time of all products:
  - `engine`: the engine's f16 row kernels (a graph of launches);
  - for each of `int` and `f16` (the probe's two inner loops):
    `_launches`: the probe's kernel launched once per product (a graph of launches);
    `_persistent`: one launch, a grid barrier after every product;
    `_persistent_l2_<a>`: the same, each warp asking its next a items of the next product into
      L2 before it waits at a barrier (the memory kept busy through the barrier);
    `_no_barrier`: one launch, no barrier (the streaming rate of the item walk alone);
    `_barriers_only`, `_barriers_only_1_per_sm`: the 431 barriers with no work, on the full grid
      and on one CTA per SM (the barrier's own cost: its ms / 431 per barrier);
with the achieved TB/s against the read bandwidth measured in the same run.

    python bench/chain_probe.py [--rows 1,4,8] [--json out.json]
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
from bench.decode import model_matrices, read_bandwidth  # noqa: E402
from bench.int_dot_probe import plane_buffers, quantize_into, repack_codes, timed  # noqa: E402
from engine.cuda import build, kernels, launch, weights  # noqa: E402

HERE = Path(__file__).parent
THREADS = 128  # 4 warps, as chain_q4k's launch bounds say
L2_AHEAD = (2, 6)  # items per warp asked into L2 before each barrier (the persistent_l2_<a> runs)
# ChainProduct (chain_probe.cu): five pointers, then rows, cols, tiles, items, ldx, pad
PRODUCT = np.dtype(
    [
        ("W", "<u8"),
        ("xq", "<u8"),
        ("xs", "<u8"),
        ("xst", "<u8"),
        ("xh", "<u8"),
        ("rows", "<i4"),
        ("cols", "<i4"),
        ("tiles", "<i4"),
        ("items", "<i4"),
        ("ldx", "<i4"),
        ("pad", "<i4"),
    ]
)


def chain_module() -> Any:
    """matmul.cu (the engine's f16 fragments, with the engine's tiling defines), then the int
    probe's kernels, then the chain kernels, in one module."""
    import cupy as cp

    probe = (HERE / "int_dot_probe.cu").read_text().replace('#include "quant.cuh"', "")
    text = build.module_source(build.MATMUL_SOURCES) + probe + (HERE / "chain_probe.cu").read_text()
    options = ("-std=c++17", *build.MATMUL_CONFIG.defines())
    return cp.RawModule(code=text, options=options)


MAX_ROWS = 8  # chain_q4k_mma's n-tile


def planes(module: Any, x: dict[int, Any]) -> dict[int, tuple[Any, Any, Any]]:
    """The activation rows x[K] (f32 [R][K], R <= 8) as the probe's planes: {K: (xq, xs, xst)}."""
    quant = module.get_function("quant_x2")
    out = {}
    for k, rows in x.items():
        bufs = plane_buffers(rows.shape[0], k)
        quantize_into(quant, rows, bufs)
        out[k] = bufs[:3]
    return out


def descriptors(mats: list[weights.GpuWeight], xplanes: dict[int, tuple[Any, Any, Any]], xh: dict[int, Any]) -> Any:  # fmt: skip
    """The ChainProduct table: each product's weights, its input's planes and packed f16 rows."""
    import cupy as cp

    table = np.zeros(len(mats), PRODUCT)
    for i, m in enumerate(mats):
        xq, xs, xst = xplanes[m.cols]
        tiles = -(-m.rows // 16)
        ptrs = (m.planes[0].data.ptr, xq.data.ptr, xs.data.ptr, xst.data.ptr, xh[m.cols].data.ptr)
        table[i] = (*ptrs, m.rows, m.cols, tiles, tiles * (m.cols // 256), m.cols, 0)
    return cp.asarray(table.view(np.uint8))


def chain_variants(module: Any, name: str, fn: Any, table: Any, n: int, grid: int, scratch: tuple[Any, Any, Any], extra: tuple[Any, ...]) -> list[tuple[str, Callable[[], None]]]:  # fmt: skip
    """The probe's ways of running the n products of `table` through kernel `name` (the module
    docstring's variants), each as (label, a function that launches it)."""
    import cupy as cp

    part, bar, failed = scratch
    size = PRODUCT.itemsize
    overlapped = launch.kernel(module, name)  # programmatic dependent launch, as the engine

    def persistent(flags: int, on: Any = table, blocks: int = grid) -> Callable[[], None]:
        def run() -> None:
            bar.fill(0)
            fn((blocks,), (THREADS,), (on, np.int32(n), part, bar, np.int32(flags), failed, *extra))  # fmt: skip

        return run

    # the same products with no items: the kernel passes its n - 1 barriers and does nothing else
    empty_rows = table.get().view(PRODUCT)
    empty_rows["items"] = 0
    empty = cp.asarray(empty_rows.view(np.uint8))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]

    def launches() -> None:
        for i in range(n):
            sub = table[i * size : (i + 1) * size]
            overlapped((grid,), (THREADS,), (sub, np.int32(1), part, bar, np.int32(0), failed, *extra))  # fmt: skip

    return [
        ("launches", launches),
        ("persistent", persistent(1)),
        *((f"persistent_l2_{a}", persistent(1 | a << 1)) for a in L2_AHEAD),
        ("no_barrier", persistent(0)),
        ("barriers_only", persistent(1, empty)),
        ("barriers_only_1_per_sm", persistent(1, empty, sms)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", default="1,4,8", help=f"activation rows per product, 1 to {MAX_ROWS}"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    require_gpu("bench/chain_probe.py")
    import cupy as cp
    from cupy_backends.cuda.api import driver

    info: dict[str, Any] = {"manifest": manifest()}
    mats = [m for m in model_matrices() if m.ggml_type == weights.Q4_K]
    packed = [repack_codes(m) for m in mats]
    module = chain_module()
    rows = [int(r) for r in args.rows.split(",")]
    if not all(1 <= r <= MAX_ROWS for r in rows):
        parser.error(f"--rows: 1 to {MAX_ROWS}")
    ks = sorted({m.cols for m in mats})
    x = {k: cp.random.default_rng(k).standard_normal((MAX_ROWS, k), dtype=cp.float32) for k in ks}
    xplanes = planes(module, x)
    part = cp.zeros(max((m.cols // 256) * m.rows for m in mats) * MAX_ROWS, cp.float32)
    bar = cp.zeros(1, cp.uint32)
    failed = cp.zeros(1, cp.int32)
    bw = read_bandwidth()
    nbytes = sum(m.nbytes for m in mats)
    info.update(read_tb_s=bw / 1e12, bytes=nbytes, products=len(mats))
    print(f"read {bw / 1e12:.3f} TB/s; {len(mats)} Q4_K products, {nbytes / 1e9:.2f} GB; floor {nbytes / bw * 1e3:.3f} ms")  # fmt: skip
    results = []
    for R in rows:
        xr = {k: v[:R] for k, v in x.items()}
        xh = {k: kernels.pack_activations(v) for k, v in xr.items()}
        y = cp.empty((R, max(m.rows for m in mats)), cp.float32)

        def engine(xr: dict[int, Any] = xr, xh: dict[int, Any] = xh, y: Any = y) -> None:
            for m in mats:
                kernels.matmul(m, xr[m.cols], y, xh=xh[m.cols])

        row: dict[str, Any] = {"rows": R}
        runs: list[tuple[str, Callable[[], None]]] = [("engine", engine)]
        # the integer kernel of this row count (dp4a or int8 mma), then the engine's f16 numerics
        int_name = "chain_q4k" if R == 1 else "chain_q4k_mma"
        f16_name = f"chain_q4k_f16_{kernels.packed_group(R)}"
        for label, name, source, extra in (
            ("int", int_name, mats if R == 1 else packed, () if R == 1 else (np.int32(R),)),
            ("f16", f16_name, mats, (np.int32(R),)),
        ):
            fn = module.get_function(name)
            per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, THREADS, 0)
            grid = per_sm * cp.cuda.Device().attributes["MultiProcessorCount"]
            row[f"{label}_kernel"], row[f"{label}_grid"] = name, grid
            table = descriptors(source, xplanes, xh)
            for variant, run in chain_variants(module, name, fn, table, len(mats), grid, (part, bar, failed), extra):  # fmt: skip
                runs.append((f"{label}_{variant}", run))
        for label, launch_fn in runs:
            row[label] = timed(launch_fn, nbytes, bw)
        results.append(row)
        print("rows", json.dumps(row), flush=True)
    info["results"] = results
    info["barrier_spin_ran_out"] = bool(int(failed.get()[0]))
    print("barrier spin ran out (CTAs not all resident):", info["barrier_spin_ran_out"])
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A probe, not an engine path: do the ~4-5 us that each product launch loses (bench/NOTES.md
v24) come back when a step's products run inside ONE persistent kernel with a grid barrier
between consecutive products? bench/chain_probe.cu runs every Q4_K product of the 27B Q4_K_M
trunk in forward order, one activation row, on int_dot_probe.cu's dp4a inner loop, with work
items of one super-block of one 16-row tile shared evenly by all warps.

Prints, in one run, the time of all products:
  - `launches`: the same kernel launched once per product (a graph of launches);
  - `persistent`: one launch, a grid barrier after every product;
  - `no_barrier`: one launch, no barrier (the streaming rate of the item walk alone);
  - `engine`: the engine's f16 row kernels (a graph of launches);
with the achieved TB/s against the read bandwidth measured in the same run.

    python bench/chain_probe.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import manifest, require_gpu  # noqa: E402
from bench.decode import model_matrices, read_bandwidth, time_graph  # noqa: E402
from engine.cuda import build, kernels, launch, weights  # noqa: E402

HERE = Path(__file__).parent
THREADS = 128  # 4 warps, as chain_q4k's launch bounds say
# ChainProduct (chain_probe.cu): three pointers, then rows, cols, tiles, items
PRODUCT = np.dtype(
    [
        ("W", "<u8"),
        ("xq", "<u8"),
        ("xs", "<u8"),
        ("rows", "<i4"),
        ("cols", "<i4"),
        ("tiles", "<i4"),
        ("items", "<i4"),
    ]
)


def chain_module() -> Any:
    import cupy as cp

    probe = (HERE / "int_dot_probe.cu").read_text()
    text = probe.replace('#include "quant.cuh"', build.module_source(("quant.cuh",)))
    return cp.RawModule(code=text + (HERE / "chain_probe.cu").read_text(), options=("-std=c++17",))


def planes(module: Any, ks: list[int]) -> dict[int, tuple[Any, Any]]:
    """One activation row per K, quantized to the probe's planes: {K: (xq, xs)}."""
    import cupy as cp

    quant = module.get_function("quant_x2")
    out = {}
    for k in ks:
        x = cp.random.default_rng(k).standard_normal((1, k), dtype=cp.float32)
        xq = cp.zeros(k * 2 // 4, cp.uint32)
        xs = cp.zeros((k // 32, 2), cp.float32)
        xst = cp.zeros((k // 32 * 8, 2), cp.float32)
        quant(((k // 32 + 7) // 8,), (256,), (x, np.int32(k), np.int32(1), xq, xs, xst))
        out[k] = (xq, xs)
    return out


def descriptors(mats: list[weights.GpuWeight], xplanes: dict[int, tuple[Any, Any]]) -> Any:
    import cupy as cp

    table = np.zeros(len(mats), PRODUCT)
    for i, m in enumerate(mats):
        xq, xs = xplanes[m.cols]
        tiles = -(-m.rows // 16)
        table[i] = (m.planes[0].data.ptr, xq.data.ptr, xs.data.ptr, m.rows, m.cols, tiles, tiles * (m.cols // 256))  # fmt: skip
    return cp.asarray(table.view(np.uint8))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    require_gpu("bench/chain_probe.py")
    import cupy as cp
    from cupy_backends.cuda.api import driver

    info: dict[str, Any] = {"manifest": manifest()}
    mats = [m for m in model_matrices() if m.ggml_type == weights.Q4_K]
    module = chain_module()
    chain = module.get_function("chain_q4k")
    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(chain.kernel.ptr, THREADS, 0)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    grid = per_sm * sms
    xplanes = planes(module, sorted({m.cols for m in mats}))
    table = descriptors(mats, xplanes)
    part = cp.zeros(max((m.cols // 256) * m.rows for m in mats), cp.float32)
    bar = cp.zeros(1, cp.uint32)
    failed = cp.zeros(1, cp.int32)
    n = len(mats)
    size = PRODUCT.itemsize

    def persistent(barriers: int) -> Any:
        def launch() -> None:
            bar.fill(0)
            args = (table, np.int32(n), part, bar, np.int32(barriers), failed)
            chain((grid,), (THREADS,), args)

        return launch

    overlapped = launch.kernel(module, "chain_q4k")  # programmatic dependent launch, as the engine

    def launches() -> None:
        for i in range(n):
            sub = table[i * size : (i + 1) * size]
            overlapped((grid,), (THREADS,), (sub, np.int32(1), part, bar, np.int32(0), failed))

    x1 = {k: cp.random.default_rng(k).standard_normal((1, k), dtype=cp.float32) for k in xplanes}
    xh = {k: kernels.pack_activations(v) for k, v in x1.items()}
    y = cp.empty((1, max(m.rows for m in mats)), cp.float32)

    def engine() -> None:
        for m in mats:
            kernels.matmul(m, x1[m.cols], y, xh=xh[m.cols])

    bw = read_bandwidth()
    nbytes = sum(m.nbytes for m in mats)
    info.update(read_tb_s=bw / 1e12, bytes=nbytes, products=n, grid=grid, ctas_per_sm=per_sm)
    print(f"read {bw / 1e12:.3f} TB/s; {n} Q4_K products, {nbytes / 1e9:.2f} GB; floor {nbytes / bw * 1e3:.3f} ms; grid {grid} ({per_sm}/SM)")  # fmt: skip
    results = {}
    for name, fn in (("engine", engine), ("launches", launches), ("persistent", persistent(1)), ("no_barrier", persistent(0))):  # fmt: skip
        t = time_graph(fn)
        results[name] = {"ms": t * 1e3, "tb_s": nbytes / t / 1e12, "x_floor": t / (nbytes / bw)}
        print(name, json.dumps(results[name]), flush=True)
    info["results"] = results
    info["barrier_spin_ran_out"] = bool(int(failed.get()[0]))
    print("barrier spin ran out (CTAs not all resident):", info["barrier_spin_ran_out"])
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

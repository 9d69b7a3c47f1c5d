"""Every kernel of whole decode steps on the 27B shape, each timed by Nsight Compute, so the
step's small operations can be told apart from the gaps between kernels (the device has ncu):

  ncu --profile-from-start off --clock-control none --cache-control none --csv --page raw \\
      --metrics gpu__time_duration.sum python3 bench/step_kernels.py > kernels.csv
  python3 bench/step_kernels.py --report kernels.csv

The first form builds the random 27B model and CudaBackend as bench/decode.py does, sets up each
step of --steps as decode.py's time_rows does (slot i's rows at positions context..), runs it
three times unprofiled, then once between cudaProfilerStart and Stop: ncu times each kernel of
that run alone (serialized, so without the overlap of programmatic dependent launch; L2 kept
warm). The second form reads ncu's CSV and prints, per step, each kernel's count, total and mean
microseconds and the sum; a step starts at its embedding kernel (embed_rows). `--config
FIELD=INT+...` runs the step's products under that MatmulConfig (bench/product_kernels.py's
settings; gpu_check.sh kernels passes CONFIG), so a tiling's kernels can be timed beside the
default's (bench/NOTES.md v44a).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import add_config_argument, ncu_raw_rows  # noqa: E402

K = TypeVar("K", bound=tuple[Any, ...])  # a kernel record: (name, ...)
FIRST_KERNEL = "embed_rows"  # engine/cuda/kernels.embed: the first launch of every step
METRIC = "gpu__time_duration.sum"
TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def parse_steps(arg: str) -> list[list[int]]:
    """'1;1,1,1,1;2,2,2,2,2,2' -> per step, the rows of each slot."""
    steps = [[int(r) for r in part.split(",")] for part in arg.split(";") if part]
    if not steps or any(not s or min(s) < 1 for s in steps):
        raise ValueError(f"--steps: slots' row counts, steps split by ';' (got {arg!r})")
    return steps


def read_ncu_csv(lines: Iterable[str]) -> list[tuple[str, float]]:
    """(kernel name, microseconds) in launch order from `ncu --csv --page raw` output (other
    lines, e.g. the program's own, are skipped; the row after the header holds the units)."""
    units, launches = ncu_raw_rows(lines)
    if not units:
        raise ValueError("no ncu CSV rows with a 'Kernel Name' column in the input")
    if METRIC not in units:
        raise ValueError(f"ncu CSV without 'Kernel Name' and {METRIC} columns")
    scale = TO_US.get(units[METRIC].strip())
    if scale is None:
        raise ValueError(f"unknown unit {units[METRIC]!r} for {METRIC}")
    return [
        (r["Kernel Name"].split("(")[0].strip(), float(r[METRIC].replace(",", "")) * scale)
        for r in launches
    ]


def split_steps(kernels: Sequence[K]) -> list[list[K]]:
    """The kernel sequence (tuples whose first item is the kernel's name) cut before each
    FIRST_KERNEL (whatever comes before the first is dropped)."""
    steps: list[list[K]] = []
    for kernel in kernels:
        if kernel[0] == FIRST_KERNEL:
            steps.append([])
        if steps:
            steps[-1].append(kernel)
    return steps


def summarize(step: list[tuple[str, float]]) -> dict[str, Any]:
    """Per kernel name: count, total and mean microseconds (largest total first); and the sum."""
    by: dict[str, list[float]] = {}
    for name, us in step:
        by.setdefault(name, []).append(us)
    kernels = sorted(
        (
            {"kernel": k, "count": len(v), "total_us": sum(v), "mean_us": sum(v) / len(v)}
            for k, v in by.items()
        ),
        key=lambda r: -float(r["total_us"]),
    )
    return {"launches": len(step), "sum_us": sum(us for _, us in step), "kernels": kernels}


def report(path: Path) -> int:
    steps = split_steps(read_ncu_csv(path.read_text().splitlines()))
    out = [summarize(s) for s in steps]
    for i, s in enumerate(out):
        print(f"step {i}: {s['launches']} launches, kernels alone {s['sum_us'] / 1e3:.3f} ms")
        for k in s["kernels"]:
            print(
                f"  {k['kernel']:32s} {k['count']:4d} x {k['mean_us']:8.2f} us = {k['total_us'] / 1e3:7.3f} ms"
            )
    print(json.dumps(out))
    return 0


def profile(steps: list[list[int]], context: int, config: str = "default") -> int:
    from bench.common import manifest, require_gpu

    require_gpu("bench/step_kernels.py")
    import cupy as cp

    from bench.decode import bench_backend, step_layout
    from bench.product_kernels import matmul_config
    from engine.cuda import build

    build.MATMUL_CONFIG = matmul_config(config)
    print(json.dumps({**manifest(), "matmul_config": config}), flush=True)
    backend = bench_backend()
    for per_slot in steps:
        lay = step_layout(backend, per_slot, context, max(per_slot))
        for _ in range(3):  # compile, load and warm every kernel of the step
            backend.fwd.step_launches(lay)
        cp.cuda.Device().synchronize()
        cp.cuda.profiler.start()
        backend.fwd.step_launches(lay)
        cp.cuda.Device().synchronize()
        cp.cuda.profiler.stop()
        print(f"profiled step: slots' rows {per_slot}, context {context}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="1;1,1,1,1;2,2,2,2,2,2", help="slots' rows per step")
    parser.add_argument("--context", type=int, default=512)
    add_config_argument(parser)
    parser.add_argument("--report", type=Path, help="ncu CSV to summarize (no GPU needed)")
    args = parser.parse_args()
    if args.report:
        return report(args.report)
    return profile(parse_steps(args.steps), args.context, args.config)


if __name__ == "__main__":
    raise SystemExit(main())

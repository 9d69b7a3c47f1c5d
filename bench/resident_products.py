"""Weight products timed with their weights held in L2, beside the same product read from DRAM,
under MatmulConfig settings: how fast a kernel's instructions let it go when memory is not what
bounds it.

Why: at one activation row the H200 (4.45 TB/s) runs the Q4_K products at ~73 % of its read
rate, bound by their instructions, while the H100 (3.06 TB/s) runs the same kernels at ~91 %,
bound by DRAM (bench/NOTES.md v40, v41h). A change that cuts instructions therefore shows on an
H100 only where the weights come from L2, which both cards read faster than their DRAM. A graph
replays each product back to back, so a weight smaller than L2 stays there after the first.

    python3 bench/resident_products.py --configs "default;turns=0" --rows 1,12

(--configs: MatmulConfig settings as in bench/product_kernels.py; a bench branch's switch, such
as the min-term ablation's `ablate_mins=1`, goes there too.)

Prints, per product shape, row count and setting: microseconds per product, the weight bytes
read per second, and the ratio to the first setting's time in the same run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import manifest, require_gpu, table  # noqa: E402
from bench.decode import time_graph  # noqa: E402
from bench.product_kernels import matmul_config  # noqa: E402
from engine.cuda import build, kernels, weights  # noqa: E402

# Q4_K weights of the 27B's K (5,120 columns): 23.6 and 35.4 MB (both held by an H100's 50 MB
# L2 and an H200's 60 MB), and gate|up's 100 MB, which no L2 holds
SHAPES = {"q4_k": weights.Q4_K, "q5_k": weights.Q5_K, "q6_k": weights.Q6_K, "q8_0": weights.Q8_0}
DEFAULT_SHAPES = "q4_k:8192x5120,q4_k:12288x5120,q4_k:34816x5120"
LAUNCHES = 20  # products per graph replay: ~1 us of node overhead against ~5-30 us each


def parse_shape(text: str) -> tuple[str, int, int, int]:
    """ "q4_k:8192x5120" -> (name, ggml type, rows, cols)."""
    fmt, _, dims = text.partition(":")
    rows, _, cols = dims.partition("x")
    if fmt not in SHAPES or not rows.isdigit() or not cols.isdigit():
        raise SystemExit(f"bad shape {text!r}: FORMAT:ROWSxCOLS, FORMAT one of {sorted(SHAPES)}")
    return fmt, SHAPES[fmt], int(rows), int(cols)


def product_seconds(w: weights.GpuWeight, x: Any, xh: Any, y: Any) -> float:
    """Median seconds of one product y = W x under build.MATMUL_CONFIG, from graph replays of
    LAUNCHES products back to back."""

    def launch() -> None:
        for _ in range(LAUNCHES):
            kernels.matmul(w, x, y, xh=xh)

    return time_graph(launch, reps=30) / LAUNCHES


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes", default=DEFAULT_SHAPES, help="FORMAT:ROWSxCOLS, comma-separated"
    )
    parser.add_argument("--rows", default="1,12", help="activation row counts")
    parser.add_argument("--configs", default="default", help='MatmulConfig settings, ";"-separated')
    args = parser.parse_args()
    require_gpu("bench/resident_products.py")
    import cupy as cp

    print(manifest(), flush=True)
    settings = args.configs.split(";")
    out: list[list[object]] = []
    for shape in args.shapes.split(","):
        fmt, ggml_type, rows, cols = parse_shape(shape)
        w = weights.random_weight(f"{fmt}_{rows}x{cols}", ggml_type, rows, cols, seed=rows)
        nbytes = w.nbytes
        for n_rows in (int(r) for r in args.rows.split(",")):
            x = cp.random.default_rng(n_rows).standard_normal((n_rows, cols), dtype=cp.float32)
            xh = kernels.pack_activations(x)
            y = cp.empty((n_rows, rows), dtype=cp.float32)
            base = None
            for setting in settings:
                build.MATMUL_CONFIG = matmul_config(setting)
                seconds = product_seconds(w, x, xh, y)
                base = base or seconds
                kernel = build.MATMUL_CONFIG.row_tile(
                    ggml_type,
                    n_rows,
                    True,
                    rows,
                    cp.cuda.Device().attributes["MultiProcessorCount"],
                ).name
                out.append(
                    [shape, n_rows, setting, kernel, f"{seconds * 1e6:.2f}",
                     f"{nbytes / seconds / 1e12:.2f}", f"{seconds / base:.3f}"]
                )  # fmt: skip
                print(" ".join(str(v) for v in out[-1]), flush=True)
    print(table(["shape", "rows", "setting", "kernel", "us", "TB/s", "vs first"], out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

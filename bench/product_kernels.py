"""Launch a few weight products of the 27B shape once each, for a profiler to read their
hardware counters (the device has Nsight Compute):

  ncu --clock-control none -k regex:mm --section SpeedOfLight --section WarpStateStats \
      python3 bench/product_kernels.py [--rows 1,4,12]

Products: ffn_gate+up (Q4_K, 34816 x 5120), ffn_down (Q6_K, 5120 x 17408) and ssm_out (Q4_K,
5120 x 6144), each at 1, 4 and 12 activation rows (random weights made on the GPU), on packed
f16 activations (mmh* kernels) as in the forward pass; ssm_out also on f32 rows (mm_* kernels,
what MatmulConfig.packed_mixer_out off gives it: the same weight, so the two differ only in the
activations).

--configs runs them under each MatmulConfig setting in turn, in one process (one profile):
"default;few_rows=8" puts the 12-row passes on the `_2` kernels (two m-tiles a warp) beside
the default `_2f` ones. A setting is fields joined by "+", each FIELD=INT.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import require_gpu, setting_fields  # noqa: E402
from engine.cuda import build, kernels, weights  # noqa: E402

PRODUCTS = [  # name, format, rows, cols, packed activations
    ("ffn_gate+up", weights.Q4_K, 34816, 5120, True),
    ("ffn_down", weights.Q6_K, 5120, 17408, True),
    ("ssm_out", weights.Q4_K, 5120, 6144, False),
    ("ssm_out packed", weights.Q4_K, 5120, 6144, True),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,4,12", help="activation row counts")
    parser.add_argument(
        "--configs", default="default", help='MatmulConfig settings, ";"-separated (see above)'
    )
    args = parser.parse_args()
    require_gpu("bench/product_kernels.py")
    import cupy as cp

    # the weights once: every setting multiplies the same ones
    mats = [weights.random_weight(name, g, rows, cols, seed=rows) for name, g, rows, cols, _ in PRODUCTS]  # fmt: skip
    for setting in args.configs.split(";"):
        build.MATMUL_CONFIG = matmul_config(setting)
        for w, (name, _, rows, cols, packed) in zip(mats, PRODUCTS, strict=True):
            for n_rows in (int(r) for r in args.rows.split(",")):
                x = cp.random.default_rng(n_rows).standard_normal((n_rows, cols), dtype=cp.float32)
                xh = kernels.pack_activations(x) if packed else None
                y = cp.empty((n_rows, rows), dtype=cp.float32)
                kernels.matmul(w, x, y, xh=xh)  # compile and warm up (ncu -k regex:mm sees both)
                kernels.matmul(w, x, y, xh=xh)
                cp.cuda.Device().synchronize()
                print(f"{setting}: {name} {rows}x{cols} rows={n_rows}", flush=True)
    return 0


def matmul_config(setting: str) -> build.MatmulConfig:
    """The MatmulConfig a setting names: "default", or FIELD=INT joined by "+"."""
    fields: dict[str, Any] = setting_fields("" if setting == "default" else setting)
    return build.MatmulConfig(**fields)


if __name__ == "__main__":
    raise SystemExit(main())

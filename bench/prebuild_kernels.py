"""Fill a kernel cache on a machine without a GPU: the product and op modules a device call will
load, compiled by NVRTC alone for the device's architecture, so that the call spends its device
time on the GPU rather than on NVRTC builds (a product module takes about a minute on one of the
device's cores, and a sweep of row variants builds several).

A cubin is found on the device only where its cache key matches (engine/cuda/build.cache_key:
the source, the options, the architecture, NVRTC's version and CuPy's), so this runs under the
device's CuPy and NVRTC versions: pip install cupy-cuda13x and nvidia-cuda-nvrtc at those
versions into any environment (`bash bench/gpu_check.sh` prints the device's). Where they differ,
the device builds as before and only the copying was spent. The cubins go to .kcache/ (ignored by
git; carry it), which bench/gpu_check.sh copies into the device's kernel cache.

    python bench/prebuild_kernels.py --keys turns,deep_turns   # default and those variants
    python bench/prebuild_kernels.py --dims att_splits=4       # and that op-module variant
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.cuda import build  # noqa: E402


def modules(keys: str, dims_settings: str = "") -> list[tuple[tuple[str, ...], Any, tuple[str, ...]]]:  # fmt: skip
    """(sources, dims, extra options) of every module a call with these row-variant keys loads:
    the product module of the defaults, of turns off (bench/gpu_check.sh's tests build both) and
    of each of bench/decode.py's row variants setting only these fields; the op module of the
    27B shape (the benchmarks' random model, 16-token KV pages), and of that shape under each
    of dims_settings (comma-separated KernelDims settings, FIELD=INT joined by "+")."""
    from dataclasses import replace

    from bench.common import setting_fields
    from bench.decode import row_variants_of
    from engine.cuda.model import Dims
    from engine.synthetic_plan import PRESETS

    configs = {build.MatmulConfig(), build.MatmulConfig(turns=False)}
    configs |= {build.MatmulConfig(**v) for v in row_variants_of(keys)}
    out = [(build.MATMUL_SOURCES, None, c.defines()) for c in configs]
    dims = Dims.of(PRESETS["27b"]).kernel_dims(16)
    variants = [replace(dims, **setting_fields(s)) for s in dims_settings.split(",") if s]
    ops = [(build.OPS_SOURCES, d, ()) for d in dict.fromkeys([dims, *variants])]
    return [*dict.fromkeys(out), *ops]


def _compile(job: tuple[tuple[str, ...], Any, tuple[str, ...], int, Path]) -> str:
    from cupy.cuda import compiler

    # CuPy picks cubin or PTX by asking the current device (memoized per device), and there is
    # none here: machine code for the architecture named, as it picks on the device itself
    compiler._get_arch_for_options_for_nvrtc = lambda arch=None: (f"-arch=sm_{arch}", "cubin")
    sources, dims, extra, arch, dest = job
    return build.module_cubin(sources, arch, dims, extra, cache=dest).name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability (90: H100/H200)")
    parser.add_argument("--keys", default="", help="bench/decode.py's row variants (--keys)")
    parser.add_argument(
        "--dims", default="", help='op-module KernelDims settings too ("a=1+b=2,c=3")'
    )
    parser.add_argument("--dest", type=Path, default=ROOT / ".kcache")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    import cupy

    args.dest.mkdir(parents=True, exist_ok=True)
    jobs = [(*m, args.arch, args.dest) for m in modules(args.keys, args.dims)]
    with ProcessPoolExecutor(args.jobs) as pool:
        for name in pool.map(_compile, jobs):
            print(f"sm_{args.arch} {name}", flush=True)
    versions = f"nvrtc {cupy.cuda.nvrtc.getVersion()} cupy {cupy.__version__}"
    (args.dest / "VERSIONS").write_text(versions + "\n")
    print(versions)


if __name__ == "__main__":
    main()

"""bench/prebuild_kernels.py's list of modules to compile (CPU, no GPU or NVRTC needed)."""

from __future__ import annotations

from typing import Any

from bench.prebuild_kernels import modules
from engine.cuda import build
from engine.cuda.build import KernelDims


def _op_dims(jobs: list[tuple[tuple[str, ...], Any, tuple[str, ...]]]) -> list[KernelDims]:
    return [d for s, d, _ in jobs if s == build.OPS_SOURCES and isinstance(d, KernelDims)]


def test_default_call_builds_one_op_module_and_the_product_defaults() -> None:
    jobs = modules("none")
    products = [extra for sources, _, extra in jobs if sources == build.MATMUL_SOURCES]
    assert build.MatmulConfig().defines() in products
    assert build.MatmulConfig(turns=False).defines() in products
    assert len(_op_dims(jobs)) == 1


def test_dims_settings_add_op_modules_with_those_fields() -> None:
    """Each KernelDims setting adds the benchmarks' op module with its fields changed; a setting
    equal to the defaults, or given twice, adds nothing."""
    base = _op_dims(modules("none"))[0]
    dims = _op_dims(
        modules("none", "att_splits=4+att_core_chunk=64,att_splits=4+att_core_chunk=64")
    )
    assert dims[0] == base
    assert len(dims) == 2
    assert (dims[1].att_splits, dims[1].att_core_chunk) == (4, 64)
    assert dims[1].dn_dk == base.dn_dk
    default = f"att_splits={base.att_splits}"
    assert len(_op_dims(modules("none", default))) == 1

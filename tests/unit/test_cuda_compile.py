"""Every CUDA source compiles with the local nvcc for sm_80, sm_86, sm_89 and sm_90 (portable:
no Hopper-only instruction on the only path), with the model dimensions of the 27B model and of
a small synthetic preset. Skipped only when nvcc is absent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine.cuda.build import (
    ALL_SOURCES,
    MATMUL_CONFIG,
    MATMUL_SOURCES,
    PAIRED_TYPES,
    TYPE_NAMES,
    KernelDims,
    MatmulConfig,
    module_source,
)
from engine.cuda.weights import F32

NVCC = shutil.which("nvcc")
ARCHS = ("80", "86", "89", "90")
SMALL = KernelDims(dn_dk=64, dn_dv=64, dn_hk=2, att_d=64, att_hq=4, att_hkv=2, att_nrot=16)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", ALL_SOURCES)
def test_source_compiles(source: str, arch: str, tmp_path: Path) -> None:
    """The text NVRTC gets (includes inlined), assembled to a cubin: ptxas also checks the
    static shared memory and register limits."""
    dims = KernelDims() if arch != "86" else SMALL  # both shapes, without doubling the time
    text = module_source((source,))
    extra: tuple[str, ...] = ()
    if source in MATMUL_SOURCES:
        extra = MATMUL_CONFIG.defines()
    src, out = tmp_path / source, tmp_path / "out.cubin"
    src.write_text(text)
    cmd = [str(NVCC), f"-arch=sm_{arch}", "-std=c++17", "--cubin", *dims.defines(), *extra]
    result = subprocess.run(
        [*cmd, "-o", str(out), str(src)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr
    assert out.stat().st_size > 0


def test_inlined_module_source_has_no_local_includes() -> None:
    text = module_source(ALL_SOURCES)
    assert '#include "' not in text
    assert text.count("OJ_DEV float h2f") == 1  # common.cuh inlined once


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_every_product_kernel_the_tiling_picks_exists(tmp_path: Path) -> None:
    """Every kernel name MatmulConfig.row_tile and pair_tile can give (formats, row counts, f32
    and packed activations, deep and plain, both gemm tiles) is declared in matmul.cu once its
    macros are expanded (nvcc -E)."""
    import re

    src = tmp_path / "matmul.cu"
    src.write_text(module_source(MATMUL_SOURCES))
    result = subprocess.run(
        [str(NVCC), "-E", "-std=c++17", *MATMUL_CONFIG.defines(), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # nvcc -E writes __global__ as __attribute__((global)), launch bounds likewise
    bounds = r"(?:__attribute__\(\(launch_bounds\([^()]*\)\)\)\s+)?"
    kernel = r"\(\(global\)\)\s+void\s+" + bounds + r"(\w+)\s*\("
    declared = set(re.findall(kernel, result.stdout))
    assert "mmh1_q4_k_1" in declared and "mm_f32_exact" in declared
    configs = [
        MatmulConfig(),
        MatmulConfig(deep_all=True),
        MatmulConfig(gemm_tile=64),
        MatmulConfig(max_nt=1),
        MatmulConfig(few_rows=0),
    ]
    for cfg in configs:
        for gtype in set(TYPE_NAMES) - {F32}:  # f32 weights: mm_f32_exact, not tiled
            for rows in (1, 2, 4, 5, 8, 9, 12, 13, 17, 25, 32, 127, 128, 512):
                for packed in (False, True):
                    for n_out in (1024, 5120, 34816):
                        name = cfg.row_tile(gtype, rows, packed, n_out, 132).name
                        assert name in declared, (cfg, gtype, rows, packed, name)
        for types in PAIRED_TYPES:  # the pair kernels of the row-kernel passes
            for rows in (1, 2, 4, 5, 8, 9, 12, 13, 17, 25, 32, 127):
                for n_out in (1024, 16480):
                    name = cfg.pair_tile(types, rows, n_out, 132).name
                    assert name in declared, (cfg, types, rows, name)

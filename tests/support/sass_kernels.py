"""A small mma loop compiled to a cubin for the SASS tools' tests (bench/sass_counts.py,
bench/sass_scoreboards.py): skips where nvcc or nvdisasm is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import sass_counts

# two mma per pass on the two loads of that pass (B, the second operand pair, from one LDG.64)
LOOP_MMA = """
#include "common.cuh"
extern "C" __global__ void loop_mma(const uint4* a, const uint2* b, float* y, int n) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const uint4 x = a[i];
        const uint2 v = b[i];
        mma_16816(acc, x.x, x.y, x.z, x.w, v.x, v.y);
        mma_16816(acc, x.y, x.x, x.w, x.z, v.y, v.x);
    }
    y[threadIdx.x] = acc[0] + acc[1] + acc[2] + acc[3];
}
"""


def loop_mma_cubin(tmp_path: Path, arch: int = 80) -> Path:
    """LOOP_MMA compiled by nvcc (the engine's includes inlined) for sm_{arch}."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    try:
        sass_counts.find_nvdisasm()
    except SystemExit:
        pytest.skip("needs nvdisasm (the dev extras' nvidia-cuda-nvdisasm)")
    source, cubin = tmp_path / "k.cu", tmp_path / "k.cubin"
    source.write_text(LOOP_MMA)
    sass_counts.compile_cubin(source, arch, (), cubin)
    return cubin

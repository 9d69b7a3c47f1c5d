"""Every CUDA source compiles with the local nvcc for sm_80, sm_86, sm_89 and sm_90 (portable:
no Hopper-only instruction on the only path), with the model dimensions of the 27B model and of
a small synthetic preset. Skipped only when nvcc is absent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine.cuda.build import ALL_SOURCES, MATMUL_CONFIG, MATMUL_SOURCES, KernelDims, module_source

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

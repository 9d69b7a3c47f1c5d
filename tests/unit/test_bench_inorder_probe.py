"""bench/inorder_probe.py's kernel compiles for every architecture the engine targets, and its
loads stay in the order the modes need (CPU: nvcc and, where installed, nvdisasm)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.inorder_probe import MODES, SOURCE

NVCC = shutil.which("nvcc")


def _compile(arch: str, tmp_path: Path) -> Path:
    src, out = tmp_path / "probe.cu", tmp_path / "probe.cubin"
    src.write_text(SOURCE)
    cmd = [str(NVCC), f"-arch=sm_{arch}", "--cubin", "-o", str(out), str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr
    return out


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["80", "86", "89", "90"])
def test_probe_compiles(arch: str, tmp_path: Path) -> None:
    assert _compile(arch, tmp_path).stat().st_size > 0


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_the_miss_is_issued_before_the_hit_where_the_mode_says(tmp_path: Path) -> None:
    """In the machine code, after_miss issues its volatile (DRAM) load before the chain's hit
    load, and after_cp_async its cp.async (LDGSTS) before it; the mode names match."""
    from bench.sass_counts import disassemble, find_nvdisasm

    try:
        find_nvdisasm()
    except SystemExit:
        pytest.skip("nvdisasm not installed")
    code = "\n".join(disassemble(_compile("90", tmp_path))["inorder_probe"])
    hit, miss = "LDG.E.CONSTANT", "LDG.E.STRONG.SYS"
    assert f"{miss}" in code and "LDGSTS" in code
    pairs = [(a, b) for a, b in zip(code.splitlines(), code.splitlines()[1:], strict=False)]
    assert any(miss in a and hit in b for a, b in pairs)  # after_miss, after_l2
    assert any(hit in a and miss in b for a, b in pairs)  # before_miss
    assert MODES[1] == "after_miss" and MODES[4] == "after_cp_async"

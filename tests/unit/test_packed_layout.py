"""The packed activations' layout agrees on both sides: common.cuh `packed_at` (what every
producer and product kernel indexes with), compiled here for the host with nvcc, against
kernels.pack_rows (what tests and benchmarks pack with), in numpy. Skipped only when nvcc is
absent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from engine.cuda import kernels

NVCC = shutil.which("nvcc")
COMMON = Path(kernels.__file__).with_name("common.cuh")


def _host_output(tmp_path: Path, program: str) -> str:
    """What a host program that includes the engine's CUDA headers prints (nvcc, then run)."""
    src, exe = tmp_path / "host.cu", tmp_path / "host"
    src.write_text(program)
    build = subprocess.run(
        [str(NVCC), "-std=c++17", f"-I{COMMON.parent}", "-o", str(exe), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


HOST_PROGRAM = """
#include <cstdio>
#include "common.cuh"
int main() {
    // every (row, quad start) of rows of 72 elements (two groups of 8 quads and a part) in a
    // buffer of 96 halves per row, for groups of 1, 4 and 8 rows
    const int lgs[3] = {0, 2, 3};
    for (int i = 0; i < 3; ++i)
        for (int r = 0; r < 11; ++r)
            for (int e = 0; e < 72; e += 4)
                std::printf("%d %d %d %zu\\n", lgs[i], r, e, packed_at(r, e, 96, lgs[i]));
    return 0;
}
"""


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_packed_at_is_where_pack_rows_puts_each_quad(tmp_path: Path) -> None:
    lines = _host_output(tmp_path, HOST_PROGRAM).split("\n")
    checked = 0
    for n_rows, lg in ((1, 0), (3, 2), (11, 3)):
        x = np.arange(n_rows * 72, dtype=np.float32).reshape(n_rows, 72)
        flat = kernels.pack_rows(np, x).reshape(-1)
        assert kernels.packed_width(72) == 96
        for line in lines:
            if not line:
                continue
            got_lg, r, e, at = (int(v) for v in line.split())
            if got_lg != lg or r >= n_rows:
                continue
            want = x[r, [e, e + 2, e + 1, e + 3]].astype(np.float16)
            assert flat[at : at + 4].tolist() == want.tolist(), (lg, r, e)
            checked += 1
    assert checked == (1 + 3 + 11) * 18


FRAGMENTS_PROGRAM = """
#include <cstdio>
#include "quant.cuh"
template <class Frag>
void show(const char* name) {
    for (int t = 0; t < 4; ++t)
        for (int c = 0; c < 16; ++c)
            std::printf("%s %d %d %d %d\\n", name, Frag::e0(t, c), Frag::e0(t, 0), Frag::e0(0, c),
                        packed_elem(Frag::e0(t, c)));
}
int main() {
    show<FragQ4K>("q4_k");
    show<FragQ5K>("q5_k");
    show<FragQ6K>("q6_k");
    show<FragQ8_0>("q8_0");
    show<FragF16>("f16");
    return 0;
}
"""


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_every_fragment_offset_splits_into_a_lane_part_and_a_chunk_part(tmp_path: Path) -> None:
    """matmul.cu b_pair moves a lane's part and a chunk's part of Frag::e0(t, c) to their quad
    slots apart: right only if e0(t, c) = e0(t, 0) + e0(0, c) with no bit in common, for every
    format (then the slot of the sum is the sum of the slots)."""
    out = _host_output(tmp_path, FRAGMENTS_PROGRAM).split()
    rows = [out[i : i + 5] for i in range(0, len(out), 5)]
    assert len(rows) == 5 * 4 * 16
    slots = kernels.packed_quad_slots(64)
    for name, *fields in rows:
        e0, lane, chunk, slot = (int(v) for v in fields)
        assert e0 == lane + chunk and lane & chunk == 0, (name, e0, lane, chunk)
        assert slot == 4 * int(slots[e0 // 4]) == 4 * int(slots[lane // 4] + slots[chunk // 4])


def test_quad_slots_swap_bits_0_and_2_and_are_their_own_inverse() -> None:
    slots = kernels.packed_quad_slots(16)
    assert slots.tolist() == [0, 4, 2, 6, 1, 5, 3, 7, 8, 12, 10, 14, 9, 13, 11, 15]
    assert slots[slots].tolist() == list(range(16))
    assert [kernels.packed_width(k) for k in (4, 32, 36, 5120)] == [32, 32, 64, 5120]

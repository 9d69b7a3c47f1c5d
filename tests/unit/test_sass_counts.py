"""bench/sass_counts.py: it finds a kernel's mma loop in nvdisasm's listing and counts its
instructions (the parser on a fixed listing; the whole path with nvcc and nvdisasm where both
are installed, as on the development and CI machines)."""

from __future__ import annotations

from pathlib import Path

from bench import sass_counts
from tests.support.sass_kernels import loop_mma_cubin

LISTING = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   HMMA.16816.F32 R8, R4, R12, R8 ;
        /*0030*/                   LOP3.LUT R5, R4, 0xf000f, RZ, 0xc0, !PT ;
.L_x_2:
        /*0040*/                   HMUL2 R6, R5, R7 ;
        /*0050*/                   HMMA.16816.F32 R8, R4, R12, R8 ;
        /*0060*/               @P0 BRA `(.L_x_2) ;
        /*0070*/              @!P1 BRA `(.L_x_1) ;
        /*0080*/                   EXIT ;
"""


def test_the_innermost_loop_with_mma_is_counted() -> None:
    loop = sass_counts.mma_loop(LISTING.splitlines())
    assert loop is not None
    # .L_x_2 .. its branch: HMUL2, HMMA, BRA (the outer loop holds 7 instructions)
    assert loop.opcodes == {"HMUL2": 1, "HMMA": 1, "BRA": 1}
    assert loop.per_superblock(mma_per_superblock=1) == 3


def test_a_kernel_without_an_mma_loop_has_none() -> None:
    lines = [line for line in LISTING.splitlines() if "HMMA" not in line]
    assert sass_counts.mma_loop(lines) is None


def test_a_compiled_kernel_loop_holds_its_two_mma(tmp_path: Path) -> None:
    cubin = loop_mma_cubin(tmp_path)
    kernels = sass_counts.disassemble(cubin)
    loop = sass_counts.mma_loop(kernels["loop_mma"])
    assert loop is not None and loop.mma == 2
    assert loop.opcodes["LDG"] == 2  # the two loads of one pass
    assert 6 <= loop.total <= 40


def test_integer_mma_counts_as_mma() -> None:
    """The integer probes' loops (IMMA, bench/tma_probe.cu rows_i8*) are found and counted like
    the f16 ones."""
    lines = LISTING.replace("HMMA.16816.F32", "IMMA.16832.S8.S8").splitlines()
    loop = sass_counts.mma_loop(lines)
    assert loop is not None and loop.mma == 1
    assert loop.opcodes == {"HMUL2": 1, "IMMA": 1, "BRA": 1}

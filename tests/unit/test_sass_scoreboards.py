"""bench/sass_scoreboards.py: the control bits decoded from nvdisasm's encodings, and which
producers each instruction of an mma loop waits for (on fixed listings; the whole path with nvcc
and nvdisasm where both are installed, as on the development and CI machines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import sass_counts, sass_scoreboards
from bench.sass_scoreboards import Control
from tests.support.sass_kernels import loop_mma_cubin

NO_SB = 7


def high_word(
    stall: int = 1, write: int = NO_SB, read: int = NO_SB, wait: int = 0, reuse: int = 0
) -> str:
    bits = stall | 1 << 4 | write << 5 | read << 8 | wait << 11 | reuse << 17
    return f"{bits << 41:#018x}"


def listing(rows: list[tuple[str, str]]) -> list[str]:
    """nvdisasm -hex lines of (instruction text or a label line, high word) rows."""
    lines, offset = [], 0
    for text, high in rows:
        if text.endswith(":"):
            lines.append(text)
            continue
        lines.append(f"        /*{offset:04x}*/   {text} ;   /* 0x0000000000000000 */")
        lines.append(f"                                    /* {high} */")
        offset += 16
    return lines


def test_control_bits_of_two_real_encodings() -> None:
    """Words from nvdisasm -hex of matmul.cu (sm_90): S2R counts on SB0; the SHF that reads
    its result waits on SB0."""
    s2r = Control.from_high_word(0x000E2E0000002100)
    assert (s2r.stall, s2r.yield_flag, s2r.write_sb, s2r.read_sb, s2r.wait_mask) == (
        7, True, 0, None, 0,
    )  # fmt: skip
    shf = Control.from_high_word(0x001FE2000001167B)
    assert (shf.stall, shf.write_sb, shf.read_sb, shf.waits_on()) == (1, None, None, [0])


def test_a_wait_names_every_load_counted_on_its_scoreboard() -> None:
    """The mma needs R6 (its B) but waits for R4's and R8's loads too: all three count on SB2.
    The second pass reports it; the load before the loop is cleared on the first."""
    rows = [
        ("LDG.E.64 R2, desc[UR4][R10.64]", high_word(write=2)),
        (".L_x_1:", ""),
        ("LDG.E.64 R6, desc[UR4][R10.64]", high_word(write=2)),
        ("LDG.E.64 R4, desc[UR4][R10.64+0x8]", high_word(write=2)),
        ("LDG.E.64 R8, desc[UR4][R10.64+0x10]", high_word(write=2)),
        ("HMMA.16816.F32 R12, R16, R6, R12", high_word(wait=1 << 2)),
        ("@P0 BRA `(.L_x_1)", high_word()),
    ]
    code, body = sass_scoreboards.encoded_instructions(listing(rows))
    assert body == range(1, 6)
    waits = sass_scoreboards.loop_waits(code, body)
    assert [(w.waiter, w.scoreboard, w.producers) for w in waits] == [(4, 2, (1, 2, 3))]
    assert "own 1, others 2, issued after own 2" in sass_scoreboards.describe(code, waits[0])


def test_depbar_waits_for_all_but_the_newest() -> None:
    """DEPBAR.LE SB1, 0x1 waits for the older of two counted loads (in-order completion); the
    mma's wait on SB1 then finds only the newer one."""
    rows = [
        (".L_x_1:", ""),
        ("LDG.E R4, desc[UR4][R10.64]", high_word(write=1)),
        ("LDG.E R5, desc[UR4][R10.64+0x4]", high_word(write=1)),
        ("DEPBAR.LE SB1, 0x1", high_word()),
        ("HMMA.16816.F32 R12, R16, R4, R12", high_word(wait=1 << 1)),
        ("@P0 BRA `(.L_x_1)", high_word()),
    ]
    code, body = sass_scoreboards.encoded_instructions(listing(rows))
    assert body is not None
    waits = sass_scoreboards.loop_waits(code, body)
    assert [(w.waiter, w.producers) for w in waits] == [(2, (0,)), (3, (1,))]
    assert waits[1].previous_pass == (False,)


def test_stall_samples_are_keyed_by_offset(tmp_path: Path) -> None:
    table = tmp_path / "sass.txt"
    table.write_text(
        "15800     8704   42 LDC R1, c[0x0][0x28]            no_inst=40 not_selected=2\n"
        "15840     8704    0 BSSY B0, 0x7f9ef1a15b40         \n"
        "158f0     8704   12 @P2   BRA 0x7f9ef1a15b30         short_sb=6 wait=5\n"
    )
    samples = sass_scoreboards.stall_samples(table)
    assert samples[0] == (8704, 42, "no_inst=40 not_selected=2")
    assert samples[0x40] == (8704, 0, "")
    assert samples[0xF0] == (8704, 12, "short_sb=6 wait=5")


def test_a_compiled_mma_waits_on_its_own_load(tmp_path: Path) -> None:
    """In a real sm_80 loop every global load counts on a scoreboard, and each mma waits on one
    that counts the load of its B operand."""
    cubin = loop_mma_cubin(tmp_path)
    code, body = sass_scoreboards.encoded_instructions(
        sass_counts.disassemble(cubin, encodings=True)["loop_mma"]
    )
    assert body is not None
    loads = [code[i] for i in body if code[i].opcode == "LDG"]
    assert loads and all(ld.control.write_sb is not None for ld in loads)
    waits = sass_scoreboards.loop_waits(code, body)
    for i in (i for i in body if code[i].opcode == "HMMA"):
        producers = {j for w in waits if w.waiter <= i for j in w.producers}
        assert any(code[j].written() & code[i].read() for j in producers)


def test_a_load_writes_as_many_registers_as_its_width() -> None:
    """The width comes from the opcode's modifiers, not from a 64-bit address operand."""
    control = Control.from_high_word(0)
    ld = sass_scoreboards.Instruction
    assert ld(0, "LDG", "@!P1 LDG.E.128 R68, desc[UR8][R156.64]", control).written() == {
        68, 69, 70, 71,
    }  # fmt: skip
    assert ld(0, "LDG", "LDG.E.64.CONSTANT R34, desc[UR8][R134.64]", control).written() == {34, 35}
    assert ld(0, "LDG", "LDG.E R4, desc[UR4][R10.64]", control).written() == {4}


def test_stall_samples_from_ncus_source_csv(tmp_path: Path) -> None:
    """The sass.csv that `gpu_check.sh stalls` brings back, read by stall_table's parser: the
    named kernel's first launch, offsets from its first address, reasons largest first."""
    columns = (
        '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
        '"stall_long_sb","stall_wait","stall_long_sb (Not Issued)"\n'
    )
    launch = (
        '"Kernel Name","mmh_q4_k_2f",\n' + columns
        + '"0x7f10","      PRMT R144, R46, R128, RZ","50","10","48","2","48"\n'
        + '"0x7f20","      HMMA.16816.F32 R96, R36, R88, R96","0","40","0","0","0"\n'
    )  # fmt: skip
    other = launch.replace("mmh_q4_k_2f", "mmh1_q4_k_1").replace('"50","10"', '"9","9"')
    (tmp_path / "sass.csv").write_text(other + launch)
    samples = sass_scoreboards.stall_samples(tmp_path / "sass.csv", "mmh_q4_k_2f")
    assert samples == {0: (10, 50, "long_sb=48 wait=2"), 0x10: (40, 0, "")}
    with pytest.raises(SystemExit, match="no profiled launch"):
        sass_scoreboards.stall_samples(tmp_path / "sass.csv", "mmh_q6_k_2f")

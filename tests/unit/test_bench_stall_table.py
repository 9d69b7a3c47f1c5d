"""bench/stall_table.py reads ncu's raw and source-page CSV exports (CPU; the format of the
files a `bash bench/gpu_check.sh stalls` call brings back)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench.stall_table import by_opcode, kernel_stalls, main, opcode, sass_tables

P = "smsp__average_warps_issue_stalled_"
S = "_per_issue_active.ratio"
RAW = (
    f'"ID","Kernel Name","gpu__time_duration.sum","{P}long_scoreboard{S}","{P}wait{S}"\n'
    '"","","us","inst","inst"\n'
    '"0","mmh1_q4_k_1","42.0","2.49","1.47"\n'
    '"1","mmh_q4_k_2f","55.5","2.01","2.50"\n'
)
COLUMNS = (
    '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
    '"stall_long_sb","stall_wait","stall_long_sb (Not Issued)"\n'
)
LAUNCH = (
    '"Kernel Name","mmh_q4_k_2f",\n'
    + COLUMNS
    + '"0x10","      PRMT R144, R46, R128, RZ","50","10","48","2","48"\n'
    + '"0x20","@!P0  LDG.E.64.CONSTANT R88, desc[UR8][R136.64]","5","20","0","5","0"\n'
    + '"0x30","      HMMA.16816.F32 R96, R36, R88, R96","30","40","20","10","20"\n'
    + '"0x40","      HMMA.16816.F32 R92, R36, R34, R92","6","40","6","0","6"\n'
)


def test_kernel_stalls_sorts_each_launchs_reasons() -> None:
    rows = kernel_stalls(RAW)
    assert [name for name, _, _ in rows] == ["mmh1_q4_k_1", "mmh_q4_k_2f"]
    assert rows[0][1] == "42.0 us"
    assert rows[0][2] == [("long_scoreboard", 2.49), ("wait", 1.47)]
    assert rows[1][2] == [("wait", 2.5), ("long_scoreboard", 2.01)]
    assert kernel_stalls("no table here\n") == []


def test_sass_tables_split_launches_and_drop_ncus_repeats() -> None:
    other = LAUNCH.replace("mmh_q4_k_2f", "mmh1_q4_k_1")
    tables = sass_tables(LAUNCH + LAUNCH + other)
    assert [k for k, _ in tables] == ["mmh_q4_k_2f", "mmh1_q4_k_1"]
    assert len(tables[0][1]) == 4
    assert tables[0][1][2]["Address"] == "0x30"


def test_opcodes_lose_predicates_and_modifiers() -> None:
    assert opcode("@!P0  LDG.E.64.CONSTANT R88, desc[UR8][R136.64]") == "LDG"
    assert opcode("      HMMA.16816.F32 R96, R36, R88, R96") == "HMMA"
    assert opcode("") == "?"


def test_by_opcode_sums_samples_per_reason_largest_first() -> None:
    ((_, rows),) = sass_tables(LAUNCH)
    ops = by_opcode(rows)
    assert [op for op, _, _ in ops] == ["PRMT", "HMMA", "LDG"]
    assert ops[1] == ("HMMA", 80, Counter({"long_sb": 26, "wait": 10}))
    assert ops[2][2] == Counter({"wait": 5, "long_sb": 0})


def test_main_prints_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "raw.csv").write_text(RAW)
    (tmp_path / "sass.csv").write_text(LAUNCH)
    assert main([str(tmp_path / "raw.csv"), str(tmp_path / "sass.csv")]) == 0
    out = capsys.readouterr().out
    assert "mmh1_q4_k_1  42.0 us  3.96 cycles per issued instruction" in out
    assert "sass mmh_q4_k_2f: 4 instructions, 91 samples" in out
    assert "HMMA" in out and "long_sb 26" not in out  # shares, in percent of all samples

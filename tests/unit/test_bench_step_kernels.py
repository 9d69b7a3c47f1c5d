"""bench/step_kernels.py's report: ncu's raw CSV read in launch order, cut into steps at the
embedding kernel, summed per kernel name."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import step_kernels

NCU_CSV = """==PROF== Connected to process 1 (python3)
{"gpu": "H200"}
"ID","Kernel Name","gpu__time_duration.sum"
"","","nsecond"
"0","mm_warmup(int)","999"
"1","embed_rows","1,500"
"2","rmsnorm(float const*)","2000"
"3","mmh_q4_k_1","10000"
"4","rmsnorm(float const*)","3000"
"5","embed_rows","1000"
"6","mmh_q4_k_1","8000"
profiled step: slots' rows [1], context 512
"""


def test_report_reads_launch_order_and_cuts_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kernels = step_kernels.read_ncu_csv(NCU_CSV.splitlines())
    assert kernels[0] == ("mm_warmup", pytest.approx(0.999))
    assert kernels[1] == ("embed_rows", pytest.approx(1.5))  # thousands separators read
    steps = step_kernels.split_steps(kernels)
    assert [len(s) for s in steps] == [4, 2]  # the launch before the first step is dropped
    first = step_kernels.summarize(steps[0])
    assert first["launches"] == 4
    assert first["sum_us"] == pytest.approx(16.5)
    assert first["kernels"][0] == {
        "kernel": "mmh_q4_k_1",
        "count": 1,
        "total_us": 10.0,
        "mean_us": 10.0,
    }
    norm = next(k for k in first["kernels"] if k["kernel"] == "rmsnorm")
    assert norm["count"] == 2 and norm["mean_us"] == pytest.approx(2.5)
    path = tmp_path / "kernels.csv"
    path.write_text(NCU_CSV)
    assert step_kernels.report(path) == 0
    assert "step 1: 2 launches, kernels alone 0.009 ms" in capsys.readouterr().out


def test_report_refuses_what_is_not_ncu_output() -> None:
    with pytest.raises(ValueError, match="no ncu CSV"):
        step_kernels.read_ncu_csv(["plain text"])
    with pytest.raises(ValueError, match="unknown unit"):
        step_kernels.read_ncu_csv(['"Kernel Name","gpu__time_duration.sum"', '"","furlong"'])


def test_steps_argument() -> None:
    assert step_kernels.parse_steps("1;1,1,1,1") == [[1], [1, 1, 1, 1]]
    with pytest.raises(ValueError):
        step_kernels.parse_steps("0")

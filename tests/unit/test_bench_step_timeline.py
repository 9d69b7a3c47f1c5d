"""bench/step_timeline.py's report: a Chrome trace's kernels in start order, cut into replays at
the embedding kernel, each kernel's added time (its end less the latest end before it) and lead
(its start less the previous kernel's end), summed per kernel name, medians over replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import step_timeline


def _event(name: str, ts: float, dur: float, cat: str = "kernel") -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def _replay(t0: float, norm_dur: float) -> list[dict[str, object]]:
    """embed 0-2; a product starting early (PDL) at 1, ending at 12; a norm 12.5 - 12.5+dur; a
    second product starting at 13 (inside the norm) and ending at 30."""
    return [
        _event("embed_rows", t0, 2.0),
        _event("mmh1_q4_k_1d(int)", t0 + 1.0, 11.0),
        _event("rmsnorm_rows", t0 + 12.5, norm_dur),
        _event("mmh1_q4_k_1d(int)", t0 + 13.0, 17.0),
    ]


TRACE = {
    "traceEvents": [
        _event("cudaGraphLaunch", 0.0, 5.0, cat="cuda_runtime"),  # host side: not a kernel
        _event("warmup", 1.0, 1.0),  # before the first replay: dropped
        *_replay(100.0, 2.0),
        *_replay(200.0, 3.0),
        *_replay(300.0, 4.0),
    ]
}


def test_added_times_sum_to_each_replays_span_and_leads_show_early_starts() -> None:
    kernels = step_timeline.kernels_of_trace(TRACE)
    assert kernels[0] == ("warmup", 1.0, 2.0)
    replays = step_timeline.split_steps(kernels)
    assert [len(r) for r in replays] == [4, 4, 4]
    parts = step_timeline.replay_parts(replays[0])
    assert parts["span"] == pytest.approx(30.0)
    assert sum(k["added"] for k in parts["kernels"]) == pytest.approx(30.0)
    assert [k["added"] for k in parts["kernels"]] == pytest.approx([2.0, 10.0, 2.5, 15.5])
    assert [k["lead"] for k in parts["kernels"]] == pytest.approx([0.0, -1.0, 0.5, -1.5])


def test_summary_takes_medians_over_replays(tmp_path: Path) -> None:
    summary = step_timeline.summarize(step_timeline.split_steps(step_timeline.kernels_of_trace(TRACE)))  # fmt: skip
    assert summary["replays"] == 3 and summary["span_us"] == pytest.approx(30.0)
    first = summary["kernels"][0]
    assert first["kernel"] == "mmh1_q4_k_1d" and first["count"] == 2
    # the second product adds what the norm does not: 15.5, 14.5, 13.5 over the replays
    assert first["added_us"] == pytest.approx(24.5) and first["mean_added_us"] == pytest.approx(12.25)  # fmt: skip
    norm = next(k for k in summary["kernels"] if k["kernel"] == "rmsnorm_rows")
    assert norm["mean_dur_us"] == pytest.approx(3.0)  # the median of 2, 3, 4
    assert norm["added_us"] == pytest.approx(3.5) and norm["mean_lead_us"] == pytest.approx(0.5)
    path = tmp_path / "step_0.json"
    path.write_text(json.dumps(TRACE))
    assert step_timeline.report(path)["span_us"] == pytest.approx(30.0)

"""bench/vs_llamacpp.py's reading of llama-batched-bench: its jsonl results are found also where
another message shares their line, and a sequence count missing from the output is asked for
again once (the tool itself is stood in for: these tests need no llama.cpp build)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from bench import vs_llamacpp


def _row(pl: int) -> str:
    return json.dumps({"pl": pl, "pp": 64, "tg": 8, "speed_pp": 1.0, "speed_tg": 2.0 * pl, "t_tg": 0.5, "speed": 3.0})  # fmt: skip


def test_batched_rows_reads_results_wherever_their_line_starts() -> None:
    text = "\n".join(
        ["main: n_kv_max = 832", _row(1), "llama_perf: done " + _row(2), "{not json", _row(4)]
    )
    assert [r["pl"] for r in vs_llamacpp.batched_rows(text)] == [1, 2, 4]
    assert vs_llamacpp.batched_rows('{"other": 1}\n') == []


def _args() -> argparse.Namespace:
    return argparse.Namespace(rows=[1, 2, 4, 8], context=64, steps=8, cuda=False)


def test_a_missing_sequence_count_is_asked_for_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    outputs = ["\n".join(_row(n) for n in (1, 2, 4)), _row(8)]

    def run_tool(command: list[str], timeout: float) -> str:
        calls.append(command)
        return outputs[len(calls) - 1]

    monkeypatch.setattr(vs_llamacpp, "run_tool", run_tool)
    rows = vs_llamacpp.batched_bench(_args(), Path("bin"), Path("m.gguf"), 60)
    assert [r["pl"] for r in rows] == [1, 2, 4, 8]
    assert calls[0][calls[0].index("-npl") + 1] == "1,2,4,8"
    assert calls[1][calls[1].index("-npl") + 1] == "8"


def test_what_never_comes_is_left_out_and_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[Any] = []

    def run_tool(command: list[str], timeout: float) -> str:
        calls.append(command)
        return _row(1) if len(calls) == 1 else "no results"

    monkeypatch.setattr(vs_llamacpp, "run_tool", run_tool)
    rows = vs_llamacpp.batched_bench(_args(), Path("bin"), Path("m.gguf"), 60)
    assert [r["pl"] for r in rows] == [1] and len(calls) == 2
    assert "[2, 4, 8] sequences: giving up" in capsys.readouterr().err
    monkeypatch.setattr(vs_llamacpp, "run_tool", lambda command, timeout: "")
    with pytest.raises(RuntimeError, match="no jsonl"):
        vs_llamacpp.batched_bench(_args(), Path("bin"), Path("m.gguf"), 60)

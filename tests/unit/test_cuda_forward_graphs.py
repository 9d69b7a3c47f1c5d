"""When engine/cuda/forward.py captures a step layout as a CUDA graph, on the CPU with a stand-in
for CuPy's stream API: a layout's first run is direct only (one-off layouts never pay for a
capture), its second run is direct and captured, and later runs replay the graph."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from engine.cuda import forward
from engine.cuda.forward import Forward, Layout


class FakeStream:
    def __init__(self, log: list[str], non_blocking: bool = False) -> None:
        self.log = log
        self.capturing = False

    def __enter__(self) -> FakeStream:
        self.log.append("enter capture stream")
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def synchronize(self) -> None:
        self.log.append("synchronize")

    def begin_capture(self) -> None:
        self.capturing = True
        self.log.append("begin_capture")

    def end_capture(self) -> Any:
        self.capturing = False
        self.log.append("end_capture")
        log = self.log
        return SimpleNamespace(launch=lambda stream: log.append("graph launch"))


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    out: list[str] = []
    fake = ModuleType("cupy")
    current = FakeStream(out)
    fake.cuda = SimpleNamespace(  # type: ignore[attr-defined]
        get_current_stream=lambda: current,
        Stream=lambda non_blocking=False: FakeStream(out, non_blocking),
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return out


def _forward(log: list[str]) -> Forward:
    fwd = object.__new__(Forward)  # no GPU: only the graph bookkeeping is under test
    fwd._graphs, fwd._runs = {}, {}
    fwd.step_launches = lambda lay: log.append(f"direct T={lay.n_rows}")  # type: ignore[method-assign]
    return fwd


def test_a_layout_is_captured_on_its_second_run_and_replayed_after(log: list[str]) -> None:
    assert forward.CAPTURE_ON_RUN == 2
    fwd, decode = _forward(log), Layout(4, 4, 4, True, True, False)
    fwd.run(decode)
    assert log == ["direct T=4"]  # first run: launched directly, nothing captured
    log.clear()
    fwd.run(decode)
    assert log == ["direct T=4", "synchronize", "enter capture stream", "begin_capture", "direct T=4", "end_capture"]  # fmt: skip
    log.clear()
    fwd.run(decode)
    fwd.run(decode)
    assert log == ["graph launch", "graph launch"]


def test_layouts_are_counted_apart_and_one_off_layouts_never_captured(log: list[str]) -> None:
    fwd = _forward(log)
    chunks = [Layout(t, 1, 1, True, False, True) for t in (33, 17, 5)]
    for lay in chunks:  # a follow-up's new tokens: each layout once
        fwd.run(lay)
    assert "begin_capture" not in log
    assert fwd._graphs == {}
    fwd.run(chunks[0])
    assert log.count("begin_capture") == 1 and list(fwd._graphs) == [chunks[0]]


def test_without_graphs_every_run_is_direct(log: list[str]) -> None:
    fwd, lay = _forward(log), Layout(1, 1, 1, True, True, False)
    for _ in range(3):
        fwd.run(lay, use_graph=False)
    assert log == ["direct T=1"] * 3


def test_queued_runs_once_per_run_and_before_a_capture(log: list[str]) -> None:
    """The caller's hand-out (CudaBackend's `while_running`) runs once every run, right after the
    pass is queued, and on the capturing run before the capture waits for the device."""
    fwd, lay = _forward(log), Layout(4, 4, 4, True, True, False)

    def queued() -> None:
        log.append("queued")

    for _ in range(3):
        fwd.run(lay, queued=queued)
    fwd.run(lay, use_graph=False, queued=queued)
    capture = ["synchronize", "enter capture stream", "begin_capture", "direct T=4", "end_capture"]
    first, second, third = ["direct T=4", "queued"], ["direct T=4", "queued", *capture], ["graph launch", "queued"]  # fmt: skip
    assert log == [*first, *second, *third, *first]

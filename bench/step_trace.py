"""A timeline of the engine's backend calls, for finding where a server's time goes between steps.

`TracingBackend` wraps any backend (engine/backend.py) and writes one JSON line per `step`,
`launch` and `collect` call, and per scheduler flush (the moment a step's tokens go to the event
loop): when it started and ended (seconds, monotonic clock) and which rows the plan held. The
wrapper forwards every other attribute, so the scheduler sees the backend's own capabilities
(`overlaps_host_work`, `launches_ahead`). `bench/parallel.py --trace` writes OpenJet's server's
trace beside its results.

Summarized with `python bench/step_trace.py TRACE.jsonl [--top 12]`: calls per kind, their
durations, and the longest calls and the longest idle gaps between two calls, each with the
plan around it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.backend import Launched, StepPlan, StepResult


def plan_summary(plan: StepPlan) -> list[str]:
    """One "slot:KIND@start+rows" item per slot step ("s" marks a sampled one)."""
    return [
        f"{s.slot}:{s.kind.name[0]}@{s.start_pos}+{s.n_rows}{'s' if s.sample else ''}"
        for s in plan.slots
    ]


class TracingBackend:
    """`inner` with its step, launch and collect calls written to `out`, one JSON line each."""

    def __init__(self, inner: Any, out: IO[str]) -> None:
        self.inner = inner
        self._out = out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def record(self, kind: str, started: float, plan: StepPlan | None = None) -> None:
        """One line: the call's kind, its start and end, and the plan's rows."""
        line: dict[str, Any] = {"kind": kind, "t0": started, "t1": time.monotonic()}
        if plan is not None:
            line["plan"] = plan_summary(plan)
        self._out.write(json.dumps(line) + "\n")
        self._out.flush()  # the server is stopped by a signal: nothing may wait in a buffer

    def flushed(self) -> None:
        """A scheduler flush hook: when a step's tokens were handed to the event loop."""
        self.record("flush", time.monotonic())

    def step(self, plan: StepPlan, while_running: Any = None) -> StepResult:
        started = time.monotonic()
        if while_running is None:
            result: StepResult = self.inner.step(plan)
        else:
            result = self.inner.step(plan, while_running=while_running)
        self.record("step", started, plan)
        return result

    def launch(self, plan: StepPlan, follow: Launched | None = None) -> Launched:
        started = time.monotonic()
        launched: Launched = self.inner.launch(plan, follow)
        self.record("launch+follow" if follow is not None else "launch", started, plan)
        return launched

    def collect(self, launched: Launched) -> StepResult:
        started = time.monotonic()
        result: StepResult = self.inner.collect(launched)
        self.record("collect", started, launched.plan)
        return result


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary(events: list[dict[str, Any]], top: int = 12) -> str:
    """Calls per kind with their median and longest durations; the longest calls; the longest
    gaps between the end of one backend call and the start of the next (host time the device
    may have waited for), each with its neighbours' plans."""
    calls = [e for e in events if e["kind"] != "flush"]
    lines = []
    by_kind: dict[str, list[float]] = defaultdict(list)
    for e in calls:
        by_kind[e["kind"]].append(1e3 * (e["t1"] - e["t0"]))
    for kind, ms in sorted(by_kind.items()):
        lines.append(
            f"{kind}: {len(ms)} calls, median {statistics.median(ms):.3f} ms, "
            f"max {max(ms):.3f} ms, total {sum(ms) / 1e3:.3f} s"
        )
    lines.append(f"longest calls (top {top}):")
    for e in sorted(calls, key=lambda e: e["t0"] - e["t1"])[:top]:
        lines.append(
            f"  {1e3 * (e['t1'] - e['t0']):9.3f} ms  {e['kind']:<13} at {e['t0']:.3f}  "
            f"{' '.join(e.get('plan', []))}"
        )
    gaps = [(b["t0"] - a["t1"], a, b) for a, b in itertools.pairwise(calls)]
    lines.append(f"longest gaps between calls (top {top}):")
    for gap, a, b in sorted(gaps, key=lambda g: -g[0])[:top]:
        lines.append(
            f"  {1e3 * gap:9.3f} ms  after {a['kind']} ({' '.join(a.get('plan', []))}) "
            f"before {b['kind']} ({' '.join(b.get('plan', []))}) at {a['t1']:.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    print(summary(load(args.trace), args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

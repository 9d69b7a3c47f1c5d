"""bench/step_trace.py: the traced backend changes nothing the scheduler sees (same tokens, the
backend's own capabilities), writes one line per backend call and flush, and the summary names
the longest calls and gaps."""

from __future__ import annotations

import io
import json
from pathlib import Path

from bench.step_trace import TracingBackend, summary
from engine.backend import GREEDY
from engine.scheduler import Scheduler, SchedulerConfig
from engine.scheduler_events import GenerationRequest
from tests.unit.test_scheduler import prompt, run


def test_a_traced_backend_gives_the_same_tokens_and_a_timeline(tmp_path: Path) -> None:
    from engine.reference_backend import ReferenceBackend
    from engine.synthetic import write_synthetic

    path = write_synthetic(tmp_path / "tiny.gguf", "tiny", "f32", 3)
    prompts = [prompt(80 + i, 12 + 5 * i) for i in range(2)]
    tokens, lines = [], io.StringIO()
    for traced in (False, True):
        backend = ReferenceBackend.from_gguf(path, n_slots=4, launch_ahead=True)
        tracer = TracingBackend(backend, lines)
        scheduler = Scheduler(tracer if traced else backend, SchedulerConfig(speculation="off"))
        if traced:
            scheduler.add_flush_hook(tracer.flushed)
        sinks = run(scheduler, [GenerationRequest(p, GREEDY, 8) for p in prompts])
        tokens.append([s.tokens for s in sinks])
    assert tokens[0] == tokens[1]
    events = [json.loads(line) for line in lines.getvalue().splitlines()]
    kinds = {e["kind"] for e in events}
    assert {"step", "launch", "launch+follow", "collect", "flush"} <= kinds
    assert all(e["t1"] >= e["t0"] for e in events)
    prefill = next(e for e in events if e["kind"] == "step")
    assert prefill["plan"][0].split(":")[1].startswith("P@0+")  # slot:KIND@start+rows
    text = summary(events, top=3)
    assert "launch+follow:" in text and "longest gaps between calls (top 3):" in text

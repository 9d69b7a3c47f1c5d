"""Where a decode step's time goes outside the GPU: CudaBackend.step's wall time split into its
host phases, against the GPU time of the same step replayed as a graph (bench/decode.py's
time_rows), on the full 27B shape (random weights made on the GPU; no file needed).

The server's per-token time is the backend's step plus the scheduler and the HTTP stream; the
gap between the graph time and `bench/parallel.py`'s rates is what this splits further.
Usage: python bench/step_host.py [--slots 1,4] [--steps 200] [--context 64] [--idle 0,3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import manifest, require_gpu  # noqa: E402
from bench.decode import bench_backend, prefill_prompt, save, time_rows  # noqa: E402


def timed_methods(obj: Any, names: list[str], totals: dict[str, float]) -> Callable[[], None]:
    """Wrap obj's methods so their wall time adds up in totals[name]; returns the undo."""
    saved = {name: getattr(obj, name) for name in names}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[name] += time.perf_counter() - start

        return timed

    for name, fn in saved.items():
        setattr(obj, name, wrap(name, fn))

    def undo() -> None:
        for name, fn in saved.items():
            setattr(obj, name, fn)

    return undo


def decode_steps(
    backend: Any, slots: int, steps: int, context: int = 64, idle: int = 0
) -> dict[str, float]:
    """Milliseconds per step of `steps` greedy decode steps of `slots` slots (one row each)
    after a `context`-token prompt each: the wall time and its host phases. idle: that many
    more slots hold a context as long but do not decode, their first context - 1,024 tokens
    shared with slot 0's pages (as the server's long-context scenario leaves them: a common
    head restored from a checkpoint, a tail of their own)."""
    import cupy as cp

    from engine.backend import GREEDY, RowKind, SlotStep, StepPlan

    last = {}
    head = max(0, context - 1024) if idle else 0
    common = tuple(i * 7 % 1000 for i in range(head))
    shared = 0  # the checkpoint of slot 0 after the common head
    for s in range(slots + idle):
        backend.reset_slot(s)
        prompt = common + tuple((s * 31 + i * 7) % 1000 for i in range(head, context))
        if shared:  # the head from slot 0's checkpoint, then this slot's own tail
            backend.restore_checkpoint(s, shared)
            token, _ = prefill_prompt(backend, s, prompt, head)
        else:
            token, shared = prefill_prompt(backend, s, prompt, 0, head)
        if s < slots:
            last[s] = token
    if shared:
        backend.free_checkpoint(shared)  # the slots that restored it keep its pages

    def step() -> None:
        plan = StepPlan(
            tuple(
                SlotStep(s, RowKind.DECODE, (last[s],), backend.slot_length(s), GREEDY)
                for s in range(slots)
            )
        )
        result = backend.step(plan)
        for s in range(slots):
            last[s] = result.for_slot(s).accepted[-1]

    from engine.cuda.forward import CAPTURE_ON_RUN

    for _ in range(CAPTURE_ON_RUN):  # untimed: a layout's first runs are direct, the last of
        step()  # them captured too (~67 ms at 4 slots)
    totals: dict[str, float] = defaultdict(float)
    undo = [
        timed_methods(backend, ["_upload", "_finish", "_sync_page_table", "_extend"], totals),
        timed_methods(backend.fwd, ["run"], totals),
    ]
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    try:
        for _ in range(steps):
            step()
    finally:
        for u in undo:
            u()
    wall = (time.perf_counter() - start) / steps * 1e3
    out = {"wall_ms": wall} | {f"{k}_ms": v / steps * 1e3 for k, v in totals.items()}
    # graph replay of the same layout from the same context length, GPU time only
    out["graph_ms"] = time_rows(backend, [1] * slots, backend.slot_length(0), 1)
    out["host_ms"] = wall - out["graph_ms"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", default="1,4")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--context", type=int, default=64, help="prompt tokens per slot first")
    parser.add_argument("--idle", default="0", help="idle long slots beside them, e.g. 0,3")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    require_gpu("bench/step_host.py")
    info: dict[str, Any] = {"manifest": manifest()}
    print(json.dumps(info["manifest"]), flush=True)

    backend = bench_backend()
    for slots in (int(s) for s in args.slots.split(",")):
        for idle in (int(n) for n in args.idle.split(",")):
            row = decode_steps(backend, slots, args.steps, args.context, idle)
            name = f"slots_{slots}" + (f"_idle_{idle}" if idle else "")
            info[name] = row
            print(f"{name}:", json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
    return save(info, args.json)


if __name__ == "__main__":
    raise SystemExit(main())

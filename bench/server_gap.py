"""The serving stack's host time per step, without a GPU: OpenJet's real server and scheduler over
a backend whose step only sleeps for a fixed time standing for the GPU's (the tiny synthetic
model's reference backend underneath keeps the pool and slot bookkeeping real).

Streaming clients decode through HTTP; the script prints each agent's time per token by the
server's own clock and, between two consecutive backend steps, the wall time the engine thread
took and how much of it was its own CPU. What exceeds the sleep is the host work that the GPU
waits for: scheduling, handing tokens to the event loop, and any wait for the interpreter lock
while the event loop turns tokens into SSE. The stub declares `overlaps_host_work` and calls
`while_running` before it sleeps, as CudaBackend does once its step is queued on the device.
With --launch-ahead it also has CudaBackend's `launch` / `collect` (engine/backend.py): a
simulated device runs each launched step for the step time from when it is free, and the gap
is then how long that device sat idle between two steps (the scheduler queues the next step
before it reads one back, so its host work no longer shows there).
Usage: python bench/server_gap.py [--agents 1,4] [--tokens 200] [--step-ms 9] [--no-overlap]
[--launch-ahead] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import manifest  # noqa: E402
from bench.decode import save  # noqa: E402
from bench.parallel_scenarios import Engine  # noqa: E402
from engine.backend import Launched, SlotResult, StepPlan, StepResult  # noqa: E402
from engine.reference_backend import ReferenceBackend  # noqa: E402
from engine.scheduler import SchedulerConfig  # noqa: E402
from engine.server import create_app  # noqa: E402
from engine.server_launch import LaunchOptions, served_model, serving_in_thread  # noqa: E402


class SleepingBackend:
    """A reference backend whose step sleeps `step_s` and samples token 5 for every slot."""

    overlaps_host_work = True

    def __init__(self, inner: ReferenceBackend, step_s: float) -> None:
        self.inner, self.step_s = inner, step_s
        self.lengths = [0] * inner.n_slots
        self.gaps: list[float] = []  # wall s between one step's end and the next one's start
        self.cpu: list[float] = []  # the engine thread's CPU s in that gap
        self._ended: tuple[float, float] | None = None
        self._free: float | None = None  # --launch-ahead: when the simulated device is free
        self.launches_ahead = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step(self, plan: StepPlan, while_running: Callable[[], None] | None = None) -> StepResult:
        now, cpu = time.perf_counter(), time.thread_time()
        if self._ended is not None:
            self.gaps.append(now - self._ended[0])
            self.cpu.append(cpu - self._ended[1])
        out = self._book(plan)
        if while_running is not None:
            while_running()
        time.sleep(self.step_s)
        self._ended = (time.perf_counter(), time.thread_time())
        return out

    def _book(self, plan: StepPlan) -> StepResult:
        out = []
        for s in plan.slots:
            self.inner.pool.extend(s.slot, s.end_pos)
            self.lengths[s.slot] = s.end_pos
            out.append(SlotResult(s.slot, [5] if s.sample else [], n_rows=s.n_rows))
        return StepResult(out)

    # --launch-ahead: launch/collect over a simulated device (free again at self._free)
    def launch(self, plan: StepPlan, follow: Launched | None = None) -> Launched:
        now, cpu = time.perf_counter(), time.thread_time()
        start = max(now, self._free or now)
        if self._free is not None and self._ended is not None:
            self.gaps.append(start - self._free)  # the device's idle time before this step
            self.cpu.append(cpu - self._ended[1])
        self._free = start + self.step_s
        return Launched(plan, (self._free, self._book(plan)))

    def collect(self, launched: Launched) -> StepResult:
        end, result = launched.state
        time.sleep(max(0.0, end - time.perf_counter()))
        self._ended = (time.perf_counter(), time.thread_time())
        return result

    def slot_length(self, slot: int) -> int:
        return self.lengths[slot]

    def reset_slot(self, slot: int) -> None:
        self.lengths[slot] = 0
        self.inner.pool.release(slot)

    def take_gaps(self) -> tuple[list[float], list[float]]:
        gaps, cpu = self.gaps, self.cpu
        self.gaps, self.cpu, self._ended, self._free = [], [], None, None
        return gaps, cpu


async def agents(base: str, n: int, tokens: int) -> list[float]:
    """ms per token of each of n concurrent streams, by the server's clock."""
    import httpx

    engine = Engine("openjet", base)
    prompts = [[(i * 7 + j * 13 + 1) % 2000 for j in range(64)] for i in range(n)]
    async with httpx.AsyncClient(timeout=600) as client:
        streams = await asyncio.gather(*[engine.stream(client, p, tokens, 0) for p in prompts])
    rates = [s.server_rate() or s.rate() or 0.0 for s in streams]
    return [1e3 / r if r else float("nan") for r in rates]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="1,4")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--step-ms", type=float, default=9.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--no-overlap", action="store_true", help="tokens handed out before a step, not during"
    )
    parser.add_argument(
        "--launch-ahead", action="store_true", help="launch/collect: queue the next step early"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from engine.synthetic import write_synthetic

    info: dict[str, Any] = {"manifest": manifest(), "step_ms": args.step_ms, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = write_synthetic(Path(tmp) / "tiny.gguf", "tiny", "q8_0", 1)
        inner = ReferenceBackend.from_gguf(path, n_slots=8, kv_tokens=65536)
        backend = SleepingBackend(inner, args.step_ms / 1e3)
        backend.overlaps_host_work = not args.no_overlap
        backend.launches_ahead = args.launch_ahead
        info["overlap"] = backend.overlaps_host_work
        info["launch_ahead"] = args.launch_ahead
        scheduler = SchedulerConfig(speculation="off")  # launches ahead where the backend does
        options = LaunchOptions(path, backend="cpu", scheduler=scheduler)
        app = create_app(served_model(backend, options))
        with serving_in_thread(app) as base:
            for _ in range(args.repeats):
                for n in (int(a) for a in args.agents.split(",")):
                    backend.take_gaps()
                    per_token = asyncio.run(agents(base, n, args.tokens))
                    gaps, cpu = backend.take_gaps()
                    steady = gaps[len(gaps) // 10 :]  # the first steps admit and prefill
                    cpu = cpu[len(cpu) // 10 :]
                    run = {
                        "agents": n,
                        "ms_per_token": per_token,
                        "gap_ms_median": 1e3 * statistics.median(steady),
                        "gap_ms_mean": 1e3 * statistics.mean(steady),
                        "engine_cpu_ms_median": 1e3 * statistics.median(cpu),
                    }
                    info["runs"].append(run)
                    print(
                        f"agents {n}: ms/token {[round(t, 3) for t in per_token]}; gap between "
                        f"steps median {run['gap_ms_median']:.3f} ms, mean "
                        f"{run['gap_ms_mean']:.3f}; engine thread CPU in it "
                        f"{run['engine_cpu_ms_median']:.3f}",
                        flush=True,
                    )
    return save(info, args.json)


if __name__ == "__main__":
    raise SystemExit(main())

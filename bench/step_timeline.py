"""The decode step's kernels on the GPU's own clock, as a CUDA-graph replay runs them, programmatic
dependent launch and all: CUPTI's kernel records, taken through PyTorch's profiler (the device
has torch; Nsight Systems cannot make reports there, .library/device/KINDS.md).
`bench/step_kernels.py` times each kernel alone under Nsight Compute; this shows what each
one adds to the step.

    python3 bench/step_timeline.py --steps "1;2,2,2,2,2,2" --trace-dir OUT   # on the device
    python3 bench/step_timeline.py --report OUT/step_0.json                  # anywhere

The first form builds the random 27B model and CudaBackend as bench/decode.py does (with
`--config FIELD=INT+...`, under that MatmulConfig of the products, as step_kernels.py). It captures
each step of --steps as one CUDA graph, replays it untraced (decode.py's time_replays, so the
trace's span can be checked against it), then replays the same graph REPLAYS times under the
profiler and writes the Chrome trace. The second form, also run at the end of the first, reads a trace.
Each replay is cut at its embedding kernel (step_kernels.split_steps), and for every kernel
it takes:
  - added: its end less the latest end before it, which is what it adds to the step (the added
    times of a replay sum to its span from the first kernel's start);
  - lead: its start less the previous kernel's end (negative: it started early, under
    programmatic dependent launch, and waited inside);
and per kernel name: the count, the added time summed and its mean, and the mean duration,
the median over replays, largest added total first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import add_config_argument  # noqa: E402
from bench.step_kernels import parse_steps, split_steps  # noqa: E402

REPLAYS = 5

Kernel = tuple[str, float, float]  # name, start, end (microseconds on the GPU's clock)


def kernels_of_trace(trace: dict[str, Any]) -> list[Kernel]:
    """The GPU kernels of a Chrome trace (PyTorch profiler's export), in start order."""
    out = []
    for event in trace.get("traceEvents", []):
        if event.get("cat") == "kernel" and event.get("ph") == "X":
            start = float(event["ts"])
            out.append((str(event["name"]).split("(")[0].strip(), start, start + float(event["dur"])))  # fmt: skip
    return sorted(out, key=lambda k: k[1])


def replay_parts(replay: list[Kernel]) -> dict[str, Any]:
    """One replay: its span, and per kernel (in order) its added time, lead and duration."""
    t0, latest, rows = replay[0][1], replay[0][1], []
    previous_end = t0
    for name, start, end in replay:
        rows.append({"kernel": name, "added": max(0.0, end - latest), "lead": start - previous_end, "dur": end - start})  # fmt: skip
        latest, previous_end = max(latest, end), end
    return {"span": latest - t0, "kernels": rows}


def _median(per_replay: list[list[dict[str, Any]]], field: str, mean: bool) -> float:
    """The median over replays of `field` summed over a replay's rows (mean: averaged)."""
    return statistics.median(
        sum(r[field] for r in rows) / (max(1, len(rows)) if mean else 1) for rows in per_replay
    )


def summarize(replays: list[list[Kernel]]) -> dict[str, Any]:
    """Per kernel name, the median over replays of: count, added time summed, mean added, mean
    duration and mean lead; and the replays' median span. Largest added total first."""
    parts = [replay_parts(r) for r in replays]
    names = list(dict.fromkeys(row["kernel"] for p in parts for row in p["kernels"]))
    table = []
    for name in names:
        per_replay = [[row for row in p["kernels"] if row["kernel"] == name] for p in parts]
        table.append({
            "kernel": name, "count": statistics.median(len(rows) for rows in per_replay),
            "added_us": _median(per_replay, "added", False),
            "mean_added_us": _median(per_replay, "added", True),
            "mean_dur_us": _median(per_replay, "dur", True),
            "mean_lead_us": _median(per_replay, "lead", True),
        })  # fmt: skip
    table.sort(key=lambda r: -float(r["added_us"]))
    spans = [p["span"] for p in parts]
    return {"replays": len(parts), "span_us": statistics.median(spans) if spans else 0.0, "kernels": table}  # fmt: skip


def report(path: Path) -> dict[str, Any]:
    summary = summarize(split_steps(kernels_of_trace(json.loads(path.read_text()))))
    print(f"{path.name}: {summary['replays']} replays, span {summary['span_us'] / 1e3:.3f} ms (median)")  # fmt: skip
    print(f"  {'kernel':28s} {'count':>5s} {'added ms':>9s} {'added us':>9s} {'dur us':>8s} {'lead us':>8s}")  # fmt: skip
    for k in summary["kernels"]:
        print(
            f"  {k['kernel']:28s} {k['count']:5.0f} {k['added_us'] / 1e3:9.3f} "
            f"{k['mean_added_us']:9.2f} {k['mean_dur_us']:8.2f} {k['mean_lead_us']:8.2f}"
        )
    return summary


def profile(steps: list[list[int]], context: int, trace_dir: Path, config: str = "default") -> int:
    from bench.common import manifest, require_gpu

    require_gpu("bench/step_timeline.py")
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from bench.decode import bench_backend, capture_graph, step_layout, time_replays
    from bench.product_kernels import matmul_config
    from engine.cuda import build

    build.MATMUL_CONFIG = matmul_config(config)
    print(
        json.dumps({**manifest(), "torch": torch.__version__, "matmul_config": config}), flush=True
    )
    trace_dir.mkdir(parents=True, exist_ok=True)
    backend = bench_backend()
    for i, per_slot in enumerate(steps):
        lay = step_layout(backend, per_slot, context, max(per_slot))

        def launch(lay: Any = lay) -> None:
            backend.fwd.step_launches(lay)

        graph, stream = capture_graph(launch)
        untraced = time_replays(graph, stream) * 1e6  # (its warm-up replays come first)
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(REPLAYS):
                graph.launch(stream)
                stream.synchronize()  # replays apart, so none overlaps the next
        path = trace_dir / f"step_{i}.json"
        prof.export_chrome_trace(str(path))
        print(f"step {i}: slots' rows {per_slot}, context {context}, untraced replay {untraced / 1e3:.3f} ms", flush=True)  # fmt: skip
        report(path)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="1;2,2,2,2,2,2", help="slots' rows per step")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--trace-dir", type=Path, default=Path("step_timeline"))
    add_config_argument(parser)
    parser.add_argument("--report", type=Path, help="a trace to summarize (no GPU needed)")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return 0
    return profile(parse_steps(args.steps), args.context, args.trace_dir, args.config)


if __name__ == "__main__":
    raise SystemExit(main())

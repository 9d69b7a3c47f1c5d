"""Decode-step benchmark on the full Qwen3.8-27B shape in the Q4_K_M mix, random weights made on
the GPU (no file needed).

One run prints a manifest (GPU, clocks, driver, CUDA, commit), measures the card's read bandwidth
(device-to-device copy), then times, as CUDA-graph replays:
  * the weight pass alone (every trunk matrix + LM head, one product each, in layer order),
  * the whole decode step of engine/cuda/backend.py (when --step) at 1, 2, 4, 8, 12, 16, 20 rows,
    drawn greedily, and at 1, 4 and 12 rows with llama-server's default sampling (what an
    agent's requests get),
  * prefill throughput at 512 and 8192 tokens (--step),
and prints achieved GB/s and the ratio to the floor (weight bytes / measured bandwidth).
Usage: python bench/decode.py [--rows 1,2,4,...] [--step] [--json OUT]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import manifest, require_gpu, setting_fields  # noqa: E402
from engine.backend import SamplingParams  # noqa: E402
from engine.cuda import kernels, weights  # noqa: E402
from engine.synthetic_plan import PRESETS, tensor_specs, tensor_type  # noqa: E402


def capture_graph(launch: Callable[[], None]) -> tuple[Any, Any]:
    """A CUDA graph of what `launch` enqueues, and the stream it was captured on (`launch` runs once
    before the capture, so its kernels are compiled and loaded outside it)."""
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        launch()
        stream.synchronize()
        stream.begin_capture()
        launch()
        graph = stream.end_capture()
    return graph, stream


def time_graph(launch: Callable[[], None], reps: int = 20, warmup: int = 3) -> float:
    """Median seconds of one replay of a CUDA graph holding what `launch` enqueues."""
    return time_replays(*capture_graph(launch), reps=reps, warmup=warmup)


def time_replays(graph: Any, stream: Any, reps: int = 20, warmup: int = 3) -> float:
    """Median seconds of one replay of `graph` on `stream`."""
    import cupy as cp

    for _ in range(warmup):
        graph.launch(stream)
    times = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        graph.launch(stream)
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def bench_backend(model: Any = None) -> Any:
    """The benchmarks' CudaBackend: 8 slots, a 131,072-token KV pool, up to 512 rows a step, on
    `model` (default: the random 27B in the Q4_K_M mix)."""
    from engine.cuda.backend import CudaBackend
    from engine.cuda.model import random_model

    return CudaBackend(model if model is not None else random_model("27b"), n_slots=8, kv_tokens=131072, max_rows=512)  # fmt: skip


def copy_bandwidth(nbytes: int = 4 << 30) -> float:
    """Bytes read + written per second by a device-to-device copy (the read-bandwidth ceiling)."""
    import cupy as cp

    src = cp.random.default_rng(0).integers(0, 255, size=nbytes, dtype=cp.uint8)
    dst = cp.empty_like(src)

    def copy() -> None:
        stream = cp.cuda.get_current_stream()
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3, stream.ptr)  # D2D

    seconds = time_graph(copy, reps=10)
    return 2 * nbytes / seconds


def read_bandwidth(nbytes: int = 4 << 30) -> float:
    """Bytes read per second by a sum over a large array (what a weight pass needs)."""
    import cupy as cp

    x = cp.random.default_rng(0).standard_normal(nbytes // 4, dtype=cp.float32)
    # warm-up: CUB's first call, and ~0.1 s of reads so the clocks are up before timing (v26b,
    # measured first thing after the device started, read 4.10 TB/s where other runs read
    # 4.39-4.56)
    for _ in range(100):
        x.sum()
    times = []
    for _ in range(7):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        x.sum()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return nbytes / sorted(times)[3]


def model_matrices(preset: str = "27b", quant: str = "q4_k_m") -> list[weights.GpuWeight]:
    """Every 2-D weight of the trunk and the LM head (no embedding, no MTP) as random blocks."""
    p = PRESETS[preset]
    out = []
    for i, spec in enumerate(tensor_specs(p)):
        if len(spec.shape) != 2 or spec.name == "token_embd.weight" or ".ssm_conv1d." in spec.name:
            continue
        if spec.name.startswith(f"blk.{p.n_layer}."):
            continue  # the MTP block does not run in the trunk step
        rows, cols = spec.shape
        out.append(weights.random_weight(spec.name, tensor_type(spec, p, quant), rows, cols, i))
    return out


def product_inputs(
    mats: list[weights.GpuWeight], n_rows: int
) -> tuple[dict[int, Any], dict[int, Any], Any, Callable[[], None]]:
    """For the probes: random activations for every K of mats at n_rows rows (f32 and packed,
    by K), one output buffer for all the products, and what runs every product once on the
    engine's kernels (the work of one graph)."""
    import cupy as cp

    ks = sorted({m.cols for m in mats})
    x = {k: cp.random.default_rng(k).standard_normal((n_rows, k), dtype=cp.float32) for k in ks}
    xh = {k: kernels.pack_activations(v) for k, v in x.items()}
    y = cp.empty((n_rows, max(m.rows for m in mats)), cp.float32)

    def engine() -> None:
        for m in mats:
            kernels.matmul(m, x[m.cols], y, xh=xh[m.cols])

    return x, xh, y, engine


# products whose inputs the forward pass has only in f32 (no packed copy: see weight_pass)
MIXER_OUT = ("ssm_out.weight", "attn_output.weight")


def weight_pass(mats: list[weights.GpuWeight], n_rows: int) -> tuple[float, int]:
    """Seconds of one graph of every product at n_rows rows, and the weight bytes read. The
    activations come packed too, as the forward pass gives most products (all but the mixer
    outputs: their inputs come from DeltaNet and attention as f32 only)."""
    import cupy as cp

    kmax = max(m.cols for m in mats)
    nmax = max(m.rows for m in mats)
    x = cp.random.default_rng(1).standard_normal((n_rows, kmax), dtype=cp.float32)
    xh = kernels.pack_activations(x)
    y = cp.empty((n_rows, nmax), dtype=cp.float32)

    def launch() -> None:
        for m in mats:
            kernels.matmul(m, x, y, xh=None if m.name.endswith(MIXER_OUT) else xh)

    return time_graph(launch), sum(m.nbytes for m in mats)


def step_layouts(n_rows: int) -> tuple[int, int]:
    """(slots, rows per slot) for a decode step of n_rows rows: <= 8 slots, <= 5 rows each."""
    for per in (1, 2, 3, 4, 5):
        if n_rows % per == 0 and n_rows // per <= 8:
            return n_rows // per, per
    raise ValueError(f"no layout for {n_rows} rows")


def time_rows(backend: Any, per_slot: list[int], context: int, n_sample: int, sampling: SamplingParams | None = None) -> float:  # fmt: skip
    """Graph-replay milliseconds of one step: slot i has per_slot[i] rows at positions context..,
    the last min(n_sample, rows) of them through the LM head and the draw (decode: all of them;
    prefill: the last; or one decoding slot beside a prefill chunk); drawn greedily, or as
    `sampling` says."""
    lay = step_layout(backend, per_slot, context, n_sample, sampling)

    def launch() -> None:
        backend.fwd.step_launches(lay)

    return time_graph(launch) * 1e3


def step_layout(backend: Any, per_slot: list[int], context: int, n_sample: int, sampling: SamplingParams | None = None) -> Any:  # fmt: skip
    """The workspace's rows, segments, samples, sampling parameters (greedy unless `sampling`)
    and page tables set for time_rows's step -> the step's Layout (for
    backend.fwd.step_launches)."""
    import numpy as np

    from engine.cuda.forward import Layout, sampling_rows

    ws, T, slots = backend.ws, sum(per_slot), len(per_slot)
    first = np.concatenate([[0], np.cumsum(per_slot)[:-1]]).astype(np.int32)
    ws.row_tok[:T].set(np.arange(T, dtype=np.int32) * 7)
    ws.row_pos[:T].set(
        np.concatenate([np.arange(context, context + n) for n in per_slot]).astype(np.int32)
    )
    ws.row_slot[:T].set(np.repeat(np.arange(slots), per_slot).astype(np.int32))
    ws.row_first[:T].set(np.repeat(first, per_slot).astype(np.int32))
    seg = np.array([np.arange(slots), first, per_slot, [1] * slots, per_slot])
    full = np.zeros(ws.seg.shape, np.int32)
    full[:, :slots] = seg
    ws.seg.set(full)
    sampled = np.concatenate(
        [np.arange(f + n - min(n_sample, n), f + n) for f, n in zip(first, per_slot, strict=True)]
    )
    ws.sample_idx[: sampled.size].set(sampled.astype(np.int32))
    params = [sampling or SamplingParams(temperature=0.0)] * sampled.size
    fp, ip = sampling_rows(params, list(range(sampled.size)))
    ws.fparams[: sampled.size].set(fp)
    ws.iparams[: sampled.size].set(ip)
    ws.pen_off[: sampled.size + 1].set(np.zeros(sampled.size + 1, np.int32))  # no penalties
    # each slot its own pages (slot i: pages i*P ..), so attention reads as much KV as it would
    need = -(-(context + max(per_slot)) // backend.pool.page_size)
    if need * slots > backend.pool.total_tokens // backend.pool.page_size:
        raise ValueError(f"{slots} slots x {context} tokens do not fit the bench's KV pool")
    table = np.zeros(ws.page_table.shape, np.int32)
    table[:slots, :need] = np.arange(slots * need, dtype=np.int32).reshape(slots, need)
    ws.page_table.set(table)
    backend.forget_page_table()  # the backend's next step must write its own tables again
    last = context + max(per_slot) - 1
    below = backend.fwd.ops.dims.att_core_below
    return Layout.of_rows(T, slots, int(sampled.size), ws.t_save >= T, context, last, below)


def decode_steps(backend: Any, rows: list[int], context: int, sampling: SamplingParams | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Graph-replay time of whole decode steps (trunk + LM head + draws) at `context` tokens,
    drawn greedily or as `sampling` says."""
    out = []
    for n in rows:
        slots, per = step_layouts(n)
        ms = time_rows(backend, [per] * slots, context, per, sampling)
        out.append({"rows": n, "slots": slots, "ms": ms})
    return out


def op_classes(backend: Any) -> dict[str, list[tuple[Any, str]]]:
    """The step's launchers by kind of op (object, attribute), for breakdown and alone."""
    from engine.cuda import kernels

    ops = backend.fwd.ops
    return {
        # with the SwiGLU epilogue, the swiglu of decode passes is inside the gate|up product
        "weight products": [
            (kernels, "matmul"),
            (kernels, "matmul_swiglu"),
            (kernels, "matmul_pair"),
        ],
        "deltanet conv+recurrence": [(ops, "dn_conv"), (ops, "dn_recur")],
        "attention prep+core": [(ops, "attn_prep"), (ops, "attention")],
        "norms+swiglu+embed": [(ops, "rmsnorm"), (ops, "swiglu"), (kernels, "embed")],
        "sampling": [(ops, "sample")],
    }


def _timed_without(timed: Callable[[], float], fns: list[tuple[Any, str]]) -> float:
    """`timed()` with the launchers `fns` replaced by no-ops (put back after)."""
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr in fns]
    for obj, attr, _ in saved:
        setattr(obj, attr, lambda *a, **k: None)
    try:
        return timed()
    finally:
        for obj, attr, fn in saved:
            setattr(obj, attr, fn)


def breakdown(timed: Callable[[], float], backend: Any) -> dict[str, float]:
    """Per-op share of one step (`timed` gives its milliseconds): the step timed with one kind
    of op left out."""
    full = timed()
    result = {"full step": full}
    for name, fns in op_classes(backend).items():
        result[name] = full - _timed_without(timed, fns)
    return result


def _launchers_but(classes: dict[str, list[tuple[Any, str]]], name: str) -> list[tuple[Any, str]]:
    """The launchers of every kind of op in `classes` (op_classes) except `name`."""
    return [fn for other, fns in classes.items() if other != name for fn in fns]


def alone(timed: Callable[[], float], backend: Any) -> dict[str, float]:
    """Each kind of op's kernels timed as the step's graph with every other kind left out: their
    own chain of dependent launches, against what leaving them out of the step saves
    (`breakdown`). Where the two differ, the kind costs the step by how it meets the products
    (their drain and refill around it), not by its own kernels."""
    classes = op_classes(backend)
    return {name: _timed_without(timed, _launchers_but(classes, name)) for name in classes}


def prefill_prompt(backend: Any, slot: int, prompt: tuple[int, ...], start: int = 0, cut: int = 0, chunk: int = 0) -> tuple[int, int]:  # fmt: skip
    """Prefill prompt[start:] into the slot through backend.step in chunks (of max_rows unless
    given), the last one sampled -> (the sampled token, the id of the checkpoint saved at
    length `cut`, 0 for none)."""
    from engine.backend import GREEDY, RowKind, SlotStep, StepPlan

    chunk, saved, token = chunk or backend.max_rows, 0, -1
    for begin in range(start, len(prompt), chunk):
        part = prompt[begin : begin + chunk]
        final = begin + chunk >= len(prompt)
        cuts = (cut,) if begin < cut <= begin + len(part) else ()
        step = SlotStep(slot, RowKind.PREFILL, part, begin, GREEDY, sample=final, checkpoints=cuts)
        result = backend.step(StepPlan((step,))).for_slot(slot)
        saved = next((ident for _, ident in result.checkpoints), saved)
        token = result.accepted[-1] if final else token
    return token, saved


def prefill(backend: Any, n_tokens: int, chunk: int = 512) -> float:
    """Tokens per second of a prompt of n_tokens in chunks through CudaBackend.step, timed on
    the third of three runs (the second captures the chunk layouts' graphs, forward.py
    CAPTURE_ON_RUN; as llama-bench's warm-up run does its own one-time work)."""
    import time

    import cupy as cp

    from engine.cuda.forward import CAPTURE_ON_RUN

    tokens = tuple((i * 7919) % 1000 for i in range(n_tokens))
    seconds = 0.0
    for _run in range(CAPTURE_ON_RUN + 1):
        backend.reset_slot(0)
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        prefill_prompt(backend, 0, tokens, chunk=chunk)
        cp.cuda.Device().synchronize()
        seconds = time.perf_counter() - start
    return n_tokens / seconds


# MatmulConfig fields per variant: the row kernel alone, then the tiled kernel from 33 rows up
# with 64 and 128 weight rows per CTA.
VARIANTS: list[dict[str, Any]] = [
    {"gemm": False},
    {"gemm_min_rows": 33, "gemm_tile": 64},
    {"gemm_min_rows": 33, "gemm_tile": 128},
]

# the formats whose single-row kernels have no two buffers taking turns (quant.cuh kTurns)
NO_TURNS = (weights.Q6_K, weights.Q8_0, weights.F16)

# the same for decode-sized products (`--row-variants`, `--matmul-steps`): CTAs per SM, m-tiles
# per warp, and warps splitting K (nw changes the sum order). The default alone here; each
# session lists what it measures (bench/NOTES.md: deep_narrow, min_blocks1d and deep_all in v16,
# mt 1 at 9-16 rows in v19b)
ROW_VARIANTS: list[dict[str, Any]] = [
    {},
    # the `_2` kernels (two m-tiles per warp) at 9-12 rows too, and the `_2f` ones (one m-tile
    # per warp, 3 CTAs/SM) up to 16 (v20b: mt 1 with 3 CTAs/SM for every 9+-row pass gained at
    # 12 rows and lost at 16 and 20; mt 1 with 4 CTAs/SM and max_nt 1 lost everywhere)
    {"few_rows": 0},
    {"few_rows": 16},
    # the `_2f` kernels at 4 CTAs per SM (v20b lost with it; since the packed rows' quad
    # swizzle, ptxas fits mmh_q4_k_2f in 128 registers without spills, Q6_K spills 20 bytes)
    {"min_blocks_few": 4},
    # the Q4_K/Q5_K row kernels with a ring of raw blocks shifted by register moves (before)
    {"turns": False},
    # the deep (`_1d`) kernels with their ring of raw blocks (before v33)
    {"deep_turns": False},
    # the gate|up product, then the swiglu kernel (before v26); a mixer's two input products
    # of different formats as two launches (before v26)
    {"swiglu_epilogue": False},
    {"pair_products": False},
    # the mixer outputs' products on f32 rows (before v29a)
    {"packed_mixer_out": False},
    # narrow products on the `_1` kernels like the others, not the deep `_1d` ones (v30e: the
    # step 1.7 % slower at one row)
    {"deep_narrow": False},
    # the deep kernels only for the formats without turns (narrow Q4_K and Q5_K on `_1`), and
    # for every single-n-tile product of those (the LM head among them; v30h, with Q6_K only:
    # 7.122 / 7.104 ms at one row, 7.867 / 7.877 at four slots, against 7.139 / 7.914)
    {"deep_types": NO_TURNS},
    {"deep_types": NO_TURNS, "deep_all": True},
    {"deep_all": True},
    # passes of more than 8 rows as row groups of single-n-tile CTAs on the same weight tiles
    # (the second reads the tile from L2), not on the `_2f`/`_2` kernels (v20b and v42c lost
    # with it: 12 rows 10.85 -> 13.38 ms)
    {"max_nt": 1},
    # eight warps splitting K (v54: a wide product's excess over its bytes' floor is the last
    # partial wave's tail, one CTA's chain of nsb / nw super-blocks per warp, ~7 us for gate|up
    # on an H100; eight warps halve that chain, a new sum order for every kernel alike), the
    # per-SM warps kept: 2 CTAs per SM for the one-row kernels; the deep ones at 1 (168
    # registers) or the narrow products on the `_1` kernels; the 9-16-row ones at 1 or 2.
    # Measured (v54c, H100): 13-14 % slower at one row, 17-25 % at twelve
    {"nw": 8, "min_blocks1": 2, "min_blocks1d": 1, "min_blocks": 1, "min_blocks_few": 1},
    {"nw": 8, "min_blocks1": 2, "min_blocks1d": 1, "min_blocks": 1, "min_blocks_few": 2},
    {"nw": 8, "min_blocks1": 2, "deep_narrow": False, "min_blocks": 1, "min_blocks_few": 2},
    # the other way (v55): two warps or one splitting K, twice or four times the CTAs per SM
    # (the same warps per SM and register caps), so each warp's chain over a tile is two or four
    # times as long: its fixed costs (the first loads' latency, the cross-warp sum) are paid
    # half or a quarter as often; a new sum order for every kernel alike. Measured (v55c, H100):
    # 1 / 4 / 12 rows 24 / 20 / 23 % slower with two warps, 75 / 62 / 58 % with one
    {"nw": 2, "min_blocks1": 8, "min_blocks1d": 6, "min_blocks": 4, "min_blocks_few": 6},
    {"nw": 1, "min_blocks1": 16, "min_blocks1d": 12, "min_blocks": 8, "min_blocks_few": 12},
]


def row_variants_of(keys: str) -> list[dict[str, Any]]:
    """The row variants that set only these MatmulConfig fields (comma-separated; the defaults,
    {}, among them): what --keys times."""
    wanted = set(keys.split(","))
    return [v for v in ROW_VARIANTS if set(v) <= wanted]


def _build_variant(fields: dict[str, Any]) -> None:
    from engine.cuda import build

    build.matmul_module(build.MatmulConfig(**fields))


def prebuild_variants(variants: list[dict[str, Any]]) -> None:
    """Compile every variant's product module at once, a process each (NVRTC compiles one on
    one core in about a minute; a sweep would otherwise build them one after another on the
    device's time). The kernel cache then holds them for the sweep."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")  # no CUDA state inherited
    with ProcessPoolExecutor(max(1, len(variants)), mp_context=ctx) as pool:
        list(pool.map(_build_variant, variants))


def model_products(model: Any) -> list[weights.GpuWeight]:
    """The (fused) weights one trunk step reads, in layer order, plus the LM head."""
    mats = []
    for layer in model.layers:
        mats += [p.weight for p in layer.mixer_in] + [layer.mixer_out]
        mats += [p.weight for p in layer.ffn_in] + [layer.ffn_down]
    return [*mats, model.output]


def matmul_variants(
    model: Any, rows: list[int], floor: float, variants: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The weight pass of the backend's fused products under each kernel tiling."""
    from engine.cuda import build

    mats, out = model_products(model), []
    default = build.MATMUL_CONFIG
    try:
        for fields in variants:
            build.MATMUL_CONFIG = build.MatmulConfig(**fields)
            for n in rows:
                seconds, nbytes = weight_pass(mats, n)
                out.append({**fields, "rows": n, "ms": seconds * 1e3, "x_floor": seconds / floor})
                print(
                    f"variant {json.dumps(fields):48s} rows={n:3d}: {seconds * 1e3:8.3f} ms  {nbytes / seconds / 1e9:7.1f} GB/s  {seconds / floor:5.2f}x floor",
                    flush=True,
                )
    finally:
        build.MATMUL_CONFIG = default
    return out


def product_classes(model: Any, rows: list[int]) -> list[dict[str, Any]]:
    """The weight pass split by kind of product (all layers' products of one name, shape and
    format in one graph): which shapes and formats fall short of the bandwidth."""
    import re

    groups: dict[tuple[str, int, int, int], list[weights.GpuWeight]] = {}
    for m in model_products(model):
        key = (re.sub(r"blk\.\d+\.", "", m.name), m.ggml_type, m.rows, m.cols)
        groups.setdefault(key, []).append(m)
    out = []
    for (name, gtype, n, k), mats in groups.items():
        for r in rows:
            seconds, nbytes = weight_pass(mats, r)
            kind = weights.TYPE_NAMES.get(gtype, str(gtype))
            row = dict(name=name, type=kind, count=len(mats), rows=r, N=n, K=k)
            row.update(ms=seconds * 1e3, GBps=nbytes / seconds / 1e9)
            out.append(row)
            print(
                f"product {name:28s} {row['type']:5s} x{len(mats):2d} {n:6d}x{k:5d} rows={r:2d}: {seconds * 1e3:7.3f} ms  {row['GBps']:7.1f} GB/s",
                flush=True,
            )
    return out


@contextmanager
def _under_dims(backend: Any, **fields: int) -> Iterator[None]:
    """The backend's op kernels built with these KernelDims fields changed, the default's put
    back after."""
    from dataclasses import replace

    from engine.cuda.kernels import Ops

    fwd = backend.fwd
    ops0 = fwd.ops
    fwd.use_ops(Ops(replace(ops0.dims, **fields)))
    try:
        yield
    finally:
        fwd.use_ops(ops0)


def context_sweep(backend: Any, variants: list[str]) -> list[dict[str, Any]]:
    """Decode step time against the context length, for attention variants: a split count,
    with "tc" after it for the tensor-core kernel (e.g. "16", "32tc")."""
    out = []
    for variant in variants:
        n, tc = int(variant.removesuffix("tc")), int(variant.endswith("tc"))
        # tc: the tensor cores for every row (att_core_below 0)
        with _under_dims(backend, att_splits=n, att_tc=tc, att_core_below=0):
            for slots, context in ((1, 512), (1, 8192), (1, 23000), (4, 23000), (8, 512)):
                ms = time_rows(backend, [1] * slots, context, 1)
                row = {"att_splits": n, "att_tc": tc, "slots": slots, "context": context, "ms": ms}
                out.append(row)
                print(
                    f"attention {variant:>6s} slots={slots} context={context:6d}: {ms:8.3f} ms  {slots * 1e3 / ms:7.1f} tok/s",
                    flush=True,
                )
    return out


def dims_settings(arg: str) -> list[str]:
    """The settings of --dims (comma-separated), the defaults ("") first unless named: each
    variant is timed beside the defaults in the same run, as --keys does for MatmulConfig."""
    settings = arg.split(",")
    return settings if "" in settings else ["", *settings]


def dims_sweep(backend: Any, settings: list[str]) -> list[dict[str, Any]]:
    """Op-kernel variants (KernelDims fields joined by +, e.g. "att_core_chunk=16+att_splits=32";
    "" for the defaults): whole steps at 1 row, 4 and 8 slots and 6 slots of 2 rows (the
    table's 12 rows) of 512-token contexts, 1 row at 1,500 (attention's CUDA-core kernel at its
    deepest) and 8,192 (the tensor cores), a 512-row prompt chunk; at 1 row and 4 slots the
    attention alone (every other kind of op left out) and attn_prep alone, and at every slot
    count the DeltaNet kernels alone."""
    cases = {
        "1row_512": ([1], 512, 1),
        "4slots_512": ([1] * 4, 512, 1),
        "8slots_512": ([1] * 8, 512, 1),
        "6x2rows_512": ([2] * 6, 512, 2),
        "1row_1500": ([1], 1500, 1),
        "1row_8192": ([1], 8192, 1),
        "chunk512": ([512], 0, 1),
    }
    out = []
    for setting in settings:
        with _under_dims(backend, **setting_fields(setting)):
            row: dict[str, Any] = {"setting": setting or "default"}
            for name, (per_slot, context, n_sample) in cases.items():
                row[name] = time_rows(backend, per_slot, context, n_sample)
            classes = op_classes(backend)  # this setting's Ops
            attention = _launchers_but(classes, "attention prep+core")
            deltanet = _launchers_but(classes, "deltanet conv+recurrence")
            timed = {
                name: functools.partial(time_rows, backend, *cases[name])
                for name in ("1row_512", "4slots_512", "8slots_512", "6x2rows_512")
            }
            for name in ("1row_512", "4slots_512"):
                row[f"attention_alone_{name}"] = _timed_without(timed[name], attention)
                row[f"prep_alone_{name}"] = _timed_without(timed[name], [*attention, (backend.fwd.ops, "attention")])  # fmt: skip
            for name, step in timed.items():
                row[f"deltanet_alone_{name}"] = _timed_without(step, deltanet)
        out.append(row)
        print("dims", json.dumps({k: v if isinstance(v, str) else round(v, 4) for k, v in row.items()}), flush=True)  # fmt: skip
    return out


def sweep_point(backend: Any, label: str, row: dict[str, Any], rows: list[int], decode_only: bool = False) -> dict[str, Any]:  # fmt: skip
    """One variant of a sweep: decode steps at each row count (512-token contexts), a 512-row
    prompt chunk and prefill throughput at 512 and 8192 tokens (not with decode_only), added to
    `row` and printed."""
    for n in rows:
        slots, per = step_layouts(n)
        row[f"decode_{n}_ms"] = time_rows(backend, [per] * slots, 512, per)
    if not decode_only:
        row["chunk512_ms"] = time_rows(backend, [512], 0, 1)
        row["prefill512_tok_s"] = prefill(backend, 512)
        row["prefill8192_tok_s"] = prefill(backend, 8192)
    print(label, json.dumps(row), flush=True)
    return row


def setting_sweep(backend: Any, label: str, settings: list[dict[str, Any]], apply: Callable[[dict[str, Any] | None], None], rows: list[int], decode_only: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """sweep_point under each setting, in one run: apply(setting) before it, apply(None) puts the
    default back at the end; the graphs captured under the previous setting are dropped."""
    fwd, out = backend.fwd, []
    try:
        for setting in settings:
            apply(setting)
            fwd.use_ops(fwd.ops)
            out.append(sweep_point(backend, label, dict(setting), rows, decode_only))
    finally:
        apply(None)
        fwd.use_ops(fwd.ops)
    return out


def deltanet_sweep(
    backend: Any, settings: list[str], rows: list[int] | None = None
) -> list[dict[str, Any]]:
    """Decode steps (rows, as step_layouts lays them out; default 1, 4, 8 slots) and a 512-row
    prompt chunk, and prefill throughput, with
    the DeltaNet recurrence over each number of state columns per CTA (KernelDims.dn_cb) in
    every pass of at least forward.DN_SPLIT_ROWS rows; 0: no pass split. "CB@R": CB columns
    per CTA from passes of R rows (R = 1: decode steps too, with dn_gate_norm after them)."""
    from dataclasses import replace

    from engine.cuda import forward
    from engine.cuda.kernels import Ops

    fwd = backend.fwd
    ops0, rows0 = fwd.ops, forward.DN_SPLIT_ROWS

    def apply(setting: dict[str, Any] | None) -> None:
        if setting is None:
            fwd.use_ops(ops0)
            forward.DN_SPLIT_ROWS = rows0
            return
        cb = setting["dn_cb"]
        fwd.use_ops(Ops(replace(ops0.dims, dn_cb=cb or ops0.dims.dn_cb)))
        forward.DN_SPLIT_ROWS = setting["split_rows"] if cb else 1 << 30

    parsed = [v.partition("@") for v in settings]
    points = [{"dn_cb": int(cb), "split_rows": int(r or rows0)} for cb, _, r in parsed]
    return setting_sweep(backend, "deltanet", points, apply, rows or [1, 4, 8])


def pdl_sweep(backend: Any, rows: list[int]) -> list[dict[str, Any]]:
    """Decode steps at each row count, a 512-row prompt chunk and prefill throughput with plain
    launches and with programmatic dependent launch (engine/cuda/launch.py), in one run."""
    from engine.cuda import launch

    def apply(setting: dict[str, Any] | None) -> None:
        launch.set_pdl(None if setting is None else setting["pdl"])

    return setting_sweep(backend, "pdl", [{"pdl": False}, {"pdl": True}], apply, rows)


def matmul_sweep(backend: Any, rows: list[int], decode_only: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """Decode steps, a 512-row chunk and prefill (not with decode_only) under each
    weight-product tiling of ROW_VARIANTS (build.MatmulConfig), in one run."""
    from engine.cuda import build

    default = build.MATMUL_CONFIG

    def apply(setting: dict[str, Any] | None) -> None:
        build.MATMUL_CONFIG = default if setting is None else build.MatmulConfig(**setting)

    return setting_sweep(backend, "matmul", ROW_VARIANTS, apply, rows, decode_only)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,4,8,12,16,20")
    parser.add_argument("--step", action="store_true", help="time whole backend steps too")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument(
        "--decode-only",
        action="store_true",
        help="with --step: the decode steps alone, then stop; with --matmul-steps: no prefill",
    )
    parser.add_argument("--variants", action="store_true", help="time matmul tilings, then stop")
    parser.add_argument("--products", action="store_true", help="time each kind of product")
    parser.add_argument("--row-variants", action="store_true", help="time decode-size kernels")
    parser.add_argument(
        "--contexts",
        default="",
        help="attention variants to sweep: split counts, tc = tensor cores",
    )
    parser.add_argument(
        "--dims",
        help="op-kernel settings to sweep beside the defaults, comma-separated (KernelDims "
        "fields joined by +)",
    )
    parser.add_argument(
        "--deltanet",
        help="dn_recur_split columns per CTA to sweep (0: off; CB@R: split from R-row passes)",
    )
    parser.add_argument("--pdl", action="store_true", help="plain against overlapped launches")
    parser.add_argument(
        "--matmul-steps", action="store_true", help="whole steps under each row variant"
    )
    parser.add_argument(
        "--keys",
        default="",
        help="only the row variants that set these fields (comma-separated), beside the default",
    )
    parser.add_argument(
        "--prebuild",
        action="store_true",
        help="compile the row variants' product modules in parallel first",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.keys:
        ROW_VARIANTS[:] = row_variants_of(args.keys)
    require_gpu("bench/decode.py")
    if args.prebuild:
        prebuild_variants(ROW_VARIANTS)
    rows = [int(r) for r in args.rows.split(",")]
    info: dict[str, Any] = {"manifest": manifest()}
    from engine.cuda import launch

    info["manifest"]["programmatic_dependent_launch"] = launch.pdl_enabled()
    print(json.dumps(info["manifest"]), flush=True)
    copy_bw, read_bw = copy_bandwidth(), read_bandwidth()
    bw = max(copy_bw, read_bw)
    info.update(copy_bandwidth_Bps=copy_bw, read_bandwidth_Bps=read_bw)
    print(
        f"copy (read+write) {copy_bw / 1e12:.3f} TB/s, read-only sum {read_bw / 1e12:.3f} TB/s",
        flush=True,
    )
    if args.step:
        from engine.cuda.model import random_model

        model = random_model("27b")
        total = model.weight_bytes
        floor = total / bw
        print(
            f"copy bandwidth {bw / 1e12:.3f} TB/s; weights {total / 1e9:.2f} GB; floor {floor * 1e3:.3f} ms",
            flush=True,
        )
        if args.row_variants:  # a sweep alone, then stop
            info["row_variants"] = matmul_variants(model, [1, 4, 8, 12, 16], floor, ROW_VARIANTS)
            return save(info, args.json)
        if args.variants:
            info["variants"] = matmul_variants(model, [33, 64, 128, 256, 512], floor, VARIANTS)
            return save(info, args.json)
        backend = bench_backend(model)
        if args.products:
            info["products"] = product_classes(model, [1, 4, 12])
        if args.deltanet:  # the sweep alone, then stop
            rows_given = args.rows != parser.get_default("rows")
            info["deltanet"] = deltanet_sweep(
                backend, args.deltanet.split(","), rows if rows_given else None
            )
            return save(info, args.json)
        if args.matmul_steps:  # the comparison alone, then stop
            info["matmul_steps"] = matmul_sweep(backend, rows, args.decode_only)
            return save(info, args.json)
        if args.pdl:  # the comparison alone, then stop
            info["pdl"] = pdl_sweep(backend, rows)
            return save(info, args.json)
        if args.dims is not None:  # the sweep alone, then stop
            info["dims"] = dims_sweep(backend, dims_settings(args.dims))
            return save(info, args.json)
        if args.contexts:  # the sweep alone, then stop
            info["contexts"] = context_sweep(backend, args.contexts.split(","))
            return save(info, args.json)
        table = decode_steps(backend, rows, args.context)
        for r in table:
            r["tok_per_s_per_row"] = 1e3 / r["ms"]
            r["GBps"] = total / (r["ms"] / 1e3) / 1e9
            r["x_floor"] = r["ms"] / 1e3 / floor
            print(
                f"decode step rows={r['rows']:3d} ({r['slots']} slots): {r['ms']:8.3f} ms  {r['GBps']:7.1f} GB/s  {r['x_floor']:5.2f}x floor  {1e3 / r['ms'] * r['rows']:8.1f} tok/s",
                flush=True,
            )
        info.update(floor_s=floor, weight_bytes=total, decode=table)
        # the same steps drawn as an agent's requests are (they name no sampling fields, so the
        # server's defaults apply: llama-server's temperature 0.8, top_k 40, top_p 0.95, min_p
        # 0.05); the benchmarks' other figures draw greedily
        sampled: list[int] = [n for n in (1, 4, 12) if n in rows]
        info["decode_sampled"] = decode_steps(backend, sampled, args.context, SamplingParams())
        for r in info["decode_sampled"]:
            greedy = next(g["ms"] for g in table if g["rows"] == r["rows"])
            print(
                f"decode step rows={r['rows']:3d} ({r['slots']} slots), llama-server's default sampling: {r['ms']:8.3f} ms (greedy {greedy:.3f})",
                flush=True,
            )
        # four agents, each its next token and 0-4 drafts: the product's own case (up to four
        # agents, 2-4 drafts each); the table above spreads its rows over the most slots
        info["decode_four_agents"] = [
            {"rows": 4 * per, "slots": 4, "ms": time_rows(backend, [per] * 4, args.context, per)}
            for per in range(1, 6)
        ]
        one_row = next((g["ms"] for g in table if g["rows"] == 1), None)
        for r in info["decode_four_agents"]:
            versus = f"  {r['ms'] / one_row:5.2f}x one row" if one_row else ""
            print(f"decode step rows={r['rows']:3d} (4 agents x {r['rows'] // 4} rows): {r['ms']:8.3f} ms{versus}", flush=True)  # fmt: skip
        if args.decode_only:
            return save(info, args.json)
        for key, timed in (
            ("breakdown_1row_ms", lambda: time_rows(backend, [1], args.context, 1)),
            # four agents without drafts: the server's main case (issue 5)
            ("breakdown_4slots_ms", lambda: time_rows(backend, [1] * 4, args.context, 1)),
            ("breakdown_12rows_ms", lambda: time_rows(backend, [2] * 6, args.context, 2)),
            ("breakdown_prefill512_ms", lambda: time_rows(backend, [512], 0, 1)),
        ):
            info[key] = breakdown(timed, backend)
            print(key, json.dumps({k: round(v, 3) for k, v in info[key].items()}), flush=True)
            key = key.replace("breakdown", "alone")
            info[key] = alone(timed, backend)
            print(key, json.dumps({k: round(v, 3) for k, v in info[key].items()}), flush=True)
        # one slot decoding beside another's prefill chunk of c rows: the scheduler's chunk
        # size while others decode trades their tok/s against the prompt's progress
        info["beside_prefill_ms"] = {
            c: time_rows(backend, [1, c] if c else [1], args.context, 1)
            for c in (0, 15, 16, 31, 32, 64, 128, 256)
        }
        print(
            "decode row beside a prefill chunk of c rows, ms:",
            info["beside_prefill_ms"],
            flush=True,
        )
        # the same deeper into a long prompt (both slots at that context): a prompt row's cost
        # grows with its position, which SchedulerConfig.prefill_position_scale models
        info["beside_prefill_16_by_context_ms"] = {
            ctx: {
                "alone": time_rows(backend, [1], ctx, 1),
                "beside_16": time_rows(backend, [1, 16], ctx, 1),
            }
            for ctx in (512, 8192, 16384)
        }
        print(
            "decode row alone / beside 16 prompt rows, by context, ms:",
            info["beside_prefill_16_by_context_ms"],
            flush=True,
        )
        info["prefill_tok_per_s"] = {n: prefill(backend, n) for n in (512, 8192)}
        print("prefill tok/s:", info["prefill_tok_per_s"], flush=True)
    else:
        mats = model_matrices()
        total = sum(m.nbytes for m in mats)
        floor = total / bw
        info.update(weight_bytes=total, floor_s=floor)
        print(
            f"copy bandwidth {bw / 1e12:.3f} TB/s; weights {total / 1e9:.2f} GB; floor {floor * 1e3:.3f} ms",
            flush=True,
        )
        rows_table = []
        for n in rows:
            seconds, nbytes = weight_pass(mats, n)
            rows_table.append(
                {
                    "rows": n,
                    "ms": seconds * 1e3,
                    "GBps": nbytes / seconds / 1e9,
                    "x_floor": seconds / floor,
                }
            )
            print(
                f"weight pass rows={n:3d}: {seconds * 1e3:8.3f} ms  {nbytes / seconds / 1e9:8.1f} GB/s  {seconds / floor:5.2f}x floor",
                flush=True,
            )
        info["weight_pass"] = rows_table
    return save(info, args.json)


def save(info: dict[str, Any], path: Path | None) -> int:
    """The run's results as JSON at path (if given); the exit status."""
    if path:
        path.write_text(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

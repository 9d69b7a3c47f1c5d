"""The on-device sampler alone (engine/cuda/sample.cu), timed on the 27B's vocabulary: greedy,
llama-server's defaults (what an agent's request gets when it names no sampling fields), Qwen's
recommended settings, and top_p alone, at 1, 4 and 12 rows.

  python3 bench/sample_rows.py [--rows 1,4,12] [--json F]

Logits: N(0, 3) per token (a flat row: the most candidates near the top a real model would
rarely give; top_p 0.9 alone then keeps ~11K tokens, so it takes the full search), and for
`top_p_alone_peaked` N(0, 9) (a few tokens hold most of the mass, as a language model's do: the
fast path). Each figure is the mean of 50 launches between CUDA events, after a warm-up;
bench/decode.py's steps draw greedily, so this is the part of a sampled step they leave out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import manifest, require_gpu  # noqa: E402
from engine.backend import SamplingParams  # noqa: E402

VOCAB = 248320
TOP_P_ALONE = SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0)
SETTINGS = {  # name: (parameters, the logits' standard deviation)
    "greedy": (SamplingParams(temperature=0.0), 3.0),
    "llama_server_defaults": (SamplingParams(), 3.0),  # 0.8, top_k 40, top_p 0.95, min_p 0.05
    "qwen_recommended": (SamplingParams(temperature=0.6, top_k=20, top_p=0.95, min_p=0.0), 3.0),
    "top_p_alone": (TOP_P_ALONE, 3.0),
    "top_p_alone_peaked": (TOP_P_ALONE, 9.0),
}


def time_sampler(rows: int, params: SamplingParams, sigma: float, reps: int = 50) -> float:
    """Microseconds per launch of ops.sample over `rows` rows of VOCAB logits N(0, sigma)."""
    import cupy as cp
    import numpy as np

    from engine.cuda.build import KernelDims
    from engine.cuda.forward import penalty_lists, sampling_rows
    from engine.cuda.kernels import Ops

    ops = Ops(KernelDims())
    rng = cp.random.default_rng(rows)
    logits = rng.standard_normal((rows, VOCAB), dtype=cp.float32) * sigma
    fp, ip = sampling_rows([params] * rows, list(range(rows)))
    off, tok, cnt = (cp.asarray(a) for a in penalty_lists([[]] * rows, [0] * rows))
    fp_d, ip_d = cp.asarray(fp), cp.asarray(ip)
    out = cp.empty(rows, dtype=cp.int32)

    def launch() -> None:
        ops.sample(logits, fp_d, ip_d, off, tok, cnt, out)

    for _ in range(3):
        launch()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        launch()
    end.record()
    end.synchronize()
    assert bool(np.all(cp.asnumpy(out) >= 0)), "the sampler chose no token"
    return float(cp.cuda.get_elapsed_time(start, end)) * 1e3 / reps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4,12")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    require_gpu("bench/sample_rows.py")
    info: dict[str, Any] = {"manifest": manifest(), "vocab": VOCAB, "us": {}}
    print(json.dumps(info["manifest"]), flush=True)
    for rows in (int(r) for r in args.rows.split(",")):
        for name, (params, sigma) in SETTINGS.items():
            us = time_sampler(rows, params, sigma)
            info["us"][f"{name}_{rows}"] = round(us, 2)
            print(f"sample rows={rows:3d} {name:22s} {us:9.2f} us", flush=True)
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

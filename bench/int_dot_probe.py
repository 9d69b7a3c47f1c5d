"""A probe, not an engine path: Q4_K (and, at one row, Q6_K) products on integer dot products
(bench/int_dot_probe.cu: dp4a or int8 mma on the codes and two int8 planes of the activations)
against matmul.cu's f16 tensor-core row kernels, on the same weights: every Q4_K matrix of the
27B Q4_K_M trunk (the Q6_K ones and the LM head for Q6_K).

Prints (1) the probe's error against float64 numpy on small matrices (and the engine's, for
scale), (2) per row count the time of one graph of all Q4_K products, each way, then the Q6_K
products at one row, with the achieved TB/s against the read bandwidth measured in the same run.

    python bench/int_dot_probe.py [--rows 1,2,4,8] [--kinds seg,mma_r] [--giant-gb G] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import manifest, require_gpu  # noqa: E402
from bench.decode import model_matrices, product_inputs, read_bandwidth, time_graph  # noqa: E402
from engine import quants  # noqa: E402
from engine.cuda import build, kernels, launch, weights  # noqa: E402

PROBE = Path(__file__).with_name("int_dot_probe.cu")
NW = 4
SEG_ROWS = (1, 2, 4)  # the dp4a kernels' row counts (q4k_seg_<R>)
MMA_ROWS = 8  # q4k_mma8 and q4k_mma8_r take 1 to 8 rows
# seg: dp4a; mma: int8 tensor cores; mma_r: the same on repacked code bytes (activation scales
# per 32 elements in all three). Measured and dropped (in commit 58f0a16): one activation scale
# per 256 with the sub-block scales on int32 sums (v24e: slower), the mma free of `volatile`
# (v24g: the same code).
# seg_canon: dp4a at one row in mma_r's order of f32 operations (the same bits: checked)
KINDS = ("seg", "seg_canon", "mma", "mma_r")


def probe_module() -> Any:
    import cupy as cp

    text = build.inline_includes(PROBE.read_text())
    return cp.RawModule(code=text, options=("-std=c++17", f"-DPROBE_NW={NW}"))


def repack_codes(w: weights.GpuWeight) -> weights.GpuWeight:
    """Q4_K w with each unit's code bytes in q4k_mma8_r's order: new byte 32t + 8j + r holds
    old byte 32j + 8t + r (lane t's words of chunk j), the 16-byte header unchanged."""
    import cupy as cp

    n = np.arange(128)
    old = 32 * ((n % 32) // 8) + 8 * (n // 32) + n % 8
    order = cp.asarray(np.concatenate([np.arange(16), 16 + old]))
    units = w.planes[0].reshape(-1, 144)[:, order]
    return replace(w, planes=(cp.ascontiguousarray(units).reshape(-1),))


def plane_buffers(rows: int, k: int) -> tuple[Any, Any, Any, Any]:
    """quant_x2's outputs for up to rows x k activations: the planes xq, the per-block (slo, xsum)
    xs, the same with rows side by side xst (the mma kernels' layout), the per-16 sums xs16."""
    import cupy as cp

    return (
        cp.zeros(rows * k * 2 // 4, cp.uint32),
        cp.zeros((rows * k // 32, 2), cp.float32),
        cp.zeros((k // 32 * 8, 2), cp.float32),
        cp.zeros(rows * k // 16, cp.int32),
    )


def quantize_into(quant: Any, x: Any, planes: tuple[Any, Any, Any, Any]) -> None:
    """x (f32 [R][K]) as int8 planes into plane_buffers' arrays, through kernel quant_x2."""
    R, K = x.shape
    quant((((R * K // 32) + 7) // 8,), (256,), (x, np.int32(K), np.int32(R), *planes))


class Probe:
    """The probe's kernels (the activation quantizer, dp4a, int8 mma) with their scratch
    planes for up to max_rows x max_k."""

    def __init__(self, max_rows: int, max_k: int) -> None:
        mod = probe_module()
        self.quant = launch.kernel(mod, "quant_x2")
        self.dots = {r: launch.kernel(mod, f"q4k_seg_{r}") for r in SEG_ROWS}
        self.mma = launch.kernel(mod, "q4k_mma8")
        self.mma_r = launch.kernel(mod, "q4k_mma8_r")
        self.seg_canon = launch.kernel(mod, "q4k_seg_canon")
        self.q6 = launch.kernel(mod, "q6k_seg")
        self._repacked: dict[str, weights.GpuWeight] = {}
        self.xq, self.xs, self.xst, self.xs16 = plane_buffers(max_rows, max_k)

    def repacked(self, w: weights.GpuWeight) -> weights.GpuWeight:
        """repack_codes(w), made once per weight."""
        if w.name not in self._repacked:
            self._repacked[w.name] = repack_codes(w)
        return self._repacked[w.name]

    def quantize(self, x: Any) -> None:
        quantize_into(self.quant, x, (self.xq, self.xs, self.xst, self.xs16))

    def product(self, w: weights.GpuWeight, R: int, y: Any, kind: str = "seg") -> None:
        tiles = -(-w.rows // 16)
        if w.ggml_type == weights.Q6_K:  # one row, q6k_seg whatever the kind
            dims = (np.int32(w.rows), np.int32(w.cols))
            self.q6((tiles,), (32 * NW,), (*w.planes, *dims, self.xq, self.xs, self.xs16, y))
            return
        shape = (w.planes[0], np.int32(w.rows), np.int32(w.cols), self.xq)
        ldy = np.int32(y.shape[1])
        if kind == "mma":
            self.mma((tiles,), (32 * NW,), (*shape, self.xst, y, ldy, np.int32(R)))
        elif kind == "mma_r":
            packed = self.repacked(w).planes[0]
            self.mma_r((tiles,), (32 * NW,), (packed, *shape[1:], self.xst, y, ldy, np.int32(R)))
        elif kind == "seg_canon":
            self.seg_canon((tiles,), (32 * NW,), (*shape, self.xs, y, ldy))
        else:
            self.dots[R]((tiles,), (32 * NW,), (*shape, self.xs, y, ldy))


def check(probe: Probe) -> dict[str, float]:
    """Relative errors against float64 on a 72 x 768 Q4_K matrix at 1, 2, 4 and 8 rows, and on a
    Q6_K one at 1 row; the largest difference between seg_canon and mma_r (0 expected)."""
    import cupy as cp

    rng = np.random.default_rng(7)
    raw = weights.random_block_bytes(weights.Q4_K, 72, 768, 11, xp=np)
    dense = quants.dequantize(raw, weights.Q4_K, (72, 768)).astype(np.float64)
    w = weights.upload("probe", raw, weights.Q4_K, 72, 768)
    out = {}
    for R in (1, 2, 4, 8):
        x = rng.standard_normal((R, 768)).astype(np.float32)
        ref = x.astype(np.float64) @ dense.T
        got: dict[str, Any] = {}
        for kind in KINDS:
            if (kind == "seg" and R not in SEG_ROWS) or (kind == "seg_canon" and R != 1):
                continue
            probe.quantize(cp.asarray(x))
            got[kind] = cp.full((R, 72), np.nan, cp.float32)
            probe.product(w, R, got[kind], kind)
        got["engine"] = cp.full((R, 72), np.nan, cp.float32)
        kernels.matmul(w, cp.asarray(x), got["engine"])
        cp.cuda.Device().synchronize()
        for name, y in got.items():
            got_h = cp.asnumpy(y)
            assert np.isfinite(got_h).all(), f"{name}: unwritten outputs"
            out[f"{name}_rel_err_{R}"] = float(np.linalg.norm(got_h - ref) / np.linalg.norm(ref))
        if R == 1:  # Q6_K on dp4a (q6k_seg), one row
            raw6 = weights.random_block_bytes(weights.Q6_K, 72, 768, 12, xp=np)
            dense6 = quants.dequantize(raw6, weights.Q6_K, (72, 768)).astype(np.float64)
            w6 = weights.upload("probe6", raw6, weights.Q6_K, 72, 768)
            ref6 = x.astype(np.float64) @ dense6.T
            got6 = {"q6_seg": cp.full((1, 72), np.nan, cp.float32)}
            probe.product(w6, 1, got6["q6_seg"])
            got6["q6_engine"] = cp.full((1, 72), np.nan, cp.float32)
            kernels.matmul(w6, cp.asarray(x), got6["q6_engine"])
            for name, y in got6.items():
                got_h = cp.asnumpy(y)
                assert np.isfinite(got_h).all(), f"{name}: unwritten outputs"
                out[f"{name}_rel_err_1"] = float(
                    np.linalg.norm(got_h - ref6) / np.linalg.norm(ref6)
                )
        if "seg_canon" in got:  # the invariance question: the same bits as the mma kernel?
            diff = cp.abs(got["seg_canon"] - got["mma_r"]).max()
            out["seg_canon_vs_mma_r_max_abs_diff"] = float(diff)
    return out


def timed(launch: Callable[[], None], nbytes: int, bw: float) -> dict[str, float]:
    """One graph of `launch`'s work reading nbytes of weights: ms, TB/s and the ratio to the
    time the read bandwidth bw (bytes/s) allows."""
    t = time_graph(launch)
    return {"ms": t * 1e3, "tb_s": nbytes / t / 1e12, "x_floor": t / (nbytes / bw)}


def time_rows(probe: Probe, mats: list[weights.GpuWeight], R: int, nbytes: int, bw: float, kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:  # fmt: skip
    """One graph of every product at R rows: the engine's kernels; each probe kernel with the
    activations quantized before each product (an upper bound: fused products share theirs)
    and its dot products alone."""
    x, _xh, y, engine = product_inputs(mats, R)

    def probed(quantize: bool, kind: str) -> Callable[[], None]:
        def launch() -> None:
            for m in mats:
                if quantize:
                    probe.quantize(x[m.cols])
                probe.product(m, R, y, kind)

        return launch

    variants: list[tuple[str, Callable[[], None]]] = [("engine", engine)]
    for kind in kinds:
        if (
            (kind == "seg" and R in SEG_ROWS)
            or (kind == "seg_canon" and R == 1)
            or (kind not in ("seg", "seg_canon") and R <= MMA_ROWS)
        ):
            variants += [(kind, probed(True, kind)), (f"{kind}_dots_only", probed(False, kind))]
    row: dict[str, Any] = {"rows": R}
    for name, fn in variants:
        row.update({f"{name}_{key}": v for key, v in timed(fn, nbytes, bw).items()})
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,2,4,8")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"of {KINDS}")
    parser.add_argument(
        "--giant-gb",
        type=float,
        default=0.0,
        help="instead of the model's matrices, ONE Q4_K matrix of about this many GB (K 5,120): "
        "each kernel's steady streaming rate, without launch boundaries",
    )
    args = parser.parse_args()
    kinds = tuple(args.kinds.split(","))
    require_gpu("bench/int_dot_probe.py")

    info: dict[str, Any] = {"manifest": manifest()}
    if args.giant_gb > 0:
        n = int(args.giant_gb * 1e9 / weights.tensor_bytes(weights.Q4_K, 1, 5120)) // 16 * 16
        mats = [weights.random_weight("giant", weights.Q4_K, n, 5120, 1)]
    else:
        mats = [m for m in model_matrices() if m.ggml_type == weights.Q4_K]
    kmax = max(m.cols for m in mats)
    rows = [int(r) for r in args.rows.split(",")]
    probe = Probe(max(MMA_ROWS, *rows), kmax)
    info["check"] = check(probe)
    print("check", json.dumps(info["check"]), flush=True)
    bw = read_bandwidth()
    nbytes = sum(m.nbytes for m in mats)
    info.update(read_tb_s=bw / 1e12, q4k_bytes=nbytes, q4k_matrices=len(mats))
    print(
        f"read {bw / 1e12:.3f} TB/s; {len(mats)} Q4_K matrices, {nbytes / 1e9:.2f} GB; floor {nbytes / bw * 1e3:.3f} ms"
    )
    results = []
    for R in rows:
        row = time_rows(probe, mats, R, nbytes, bw, kinds)
        results.append(row)
        print("rows", json.dumps(row), flush=True)
    info["results"] = results
    if args.giant_gb <= 0 and "seg" in kinds and 1 in rows:
        # Q6_K at one row: the trunk's Q6_K matrices and the LM head, engine against q6k_seg
        six = [m for m in model_matrices() if m.ggml_type == weights.Q6_K]
        probe6 = Probe(1, max(m.cols for m in six))
        b6 = sum(m.nbytes for m in six)
        row6 = time_rows(probe6, six, 1, b6, bw, ("seg",))
        info["q6k"] = {"bytes": b6, "matrices": len(six), **row6}
        print(f"Q6_K: {len(six)} matrices, {b6 / 1e9:.2f} GB:", json.dumps(row6), flush=True)
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

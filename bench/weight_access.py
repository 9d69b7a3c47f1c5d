"""How fast the GPU delivers weight bytes in the access pattern of the row product kernels, with
no arithmetic: is a product's speed limited by its memory pattern or by its loop?

Each kernel XOR-folds every 16-byte word it loads (so nothing is optimised away) over the same
4 GiB buffer:
  contiguous   grid-stride 16-byte loads (the bandwidth ceiling)
  rows         `wmat_rows`' pattern for Q4_K at one row: a CTA of 4 warps owns 16 weight rows,
               warp w reads super-blocks w, w+4, ... of them (144-byte blocks, row-major GGUF
               layout), three 16-byte loads per lane per super-block, the next one in flight
  tiles        the same loads from a tile-major layout (a tile's 16 rows of one super-block in
               2,304 contiguous bytes)
for several K (super-blocks per row) and CTAs per SM.
Usage: python bench/weight_access.py [--json OUT]
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

SOURCE = r"""
typedef unsigned int u32;
typedef unsigned char u8;
__device__ __forceinline__ void fold(uint4& a, const uint4& v) { a.x ^= v.x; a.y ^= v.y; a.z ^= v.z; a.w ^= v.w; }

extern "C" __global__ void contiguous(const uint4* __restrict__ p, long long n, u32* out) {
    uint4 a = make_uint4(0, 0, 0, 0);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        fold(a, p[i]);
    if ((a.x ^ a.y ^ a.z ^ a.w) == 0x12345678u) out[0] = 1;
}

// layout 0: row-major blocks [rows][nsb][144]; 1: tile-major [rows/16][nsb][16][144]
template <int LAYOUT>
__device__ void rows_pattern(const u8* __restrict__ w, int rows, int nsb, u32* out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x;
    auto addr = [&](int h, int sb) -> const u8* {
        const int r = 8 * h + gid;
        if (LAYOUT == 0) return w + ((size_t)(16 * tile + r) * nsb + sb) * 144;
        return w + (((size_t)tile * nsb + sb) * 16 + r) * 144;
    };
    uint4 a = make_uint4(0, 0, 0, 0), cur[2][3], nxt[2][3];
    int sb = warp;
    auto load = [&](uint4 (&f)[2][3], int s) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u8* b = addr(h, s);
            f[h][0] = *(const uint4*)b;
            f[h][1] = *(const uint4*)(b + 16 + 16 * t);
            f[h][2] = *(const uint4*)(b + 80 + 16 * t);
        }
    };
    if (sb < nsb) load(cur, sb);
    for (; sb < nsb; sb += 4) {
        if (sb + 4 < nsb) load(nxt, sb + 4);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int i = 0; i < 3; ++i) fold(a, cur[h][i]);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int i = 0; i < 3; ++i) cur[h][i] = nxt[h][i];
    }
    if ((a.x ^ a.y ^ a.z ^ a.w) == 0x12345678u) out[0] = 1;
}
extern "C" __global__ void __launch_bounds__(128) rows_rowmajor(const u8* w, int rows, int nsb, u32* out) { rows_pattern<0>(w, rows, nsb, out); }
extern "C" __global__ void __launch_bounds__(128) rows_tilemajor(const u8* w, int rows, int nsb, u32* out) { rows_pattern<1>(w, rows, nsb, out); }
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    require_gpu("bench/weight_access.py")
    import cupy as cp

    info: dict[str, Any] = {"manifest": manifest(), "results": []}
    print(json.dumps(info["manifest"]), flush=True)
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    nbytes = 4 << 30
    buf = cp.random.default_rng(0).integers(0, 255, size=nbytes, dtype=cp.uint8)
    out = cp.zeros(1, cp.uint32)

    def timed(
        fn: Any, grid: int, block: int, argv: tuple[Any, ...], moved: int, smem: int = 0
    ) -> float:
        if smem:
            fn.max_dynamic_shared_size_bytes = smem
        for _ in range(2):
            fn((grid,), (block,), argv, shared_mem=smem)
        times = []
        for _ in range(7):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn((grid,), (block,), argv, shared_mem=smem)
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return moved / sorted(times)[3] / 1e9

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for blocks_per_sm in (4, 8, 16):
        gbps = timed(
            mod.get_function("contiguous"),
            sms * blocks_per_sm,
            256,
            (buf, cp.int64(nbytes // 16), out),
            nbytes,
        )
        info["results"].append({"kernel": "contiguous", "ctas_per_sm": blocks_per_sm, "GBps": gbps})
        print(f"contiguous  {blocks_per_sm:2d} CTAs/SM x 256 threads: {gbps:7.1f} GB/s", flush=True)
    for k in (5120, 6144, 17408):
        nsb = k // 256
        rows = nbytes // (nsb * 144) // 16 * 16
        moved = rows * nsb * 144
        for name in ("rows_rowmajor", "rows_tilemajor"):
            # 3 CTAs per SM as the real kernel (dynamic shared memory caps the occupancy), and
            # as many as the registers allow
            for per_sm, smem in ((3, 70 * 1024), (0, 0)):
                gbps = timed(
                    mod.get_function(name),
                    rows // 16,
                    128,
                    (buf, cp.int32(rows), cp.int32(nsb), out),
                    moved,
                    smem,
                )
                info["results"].append(
                    {"kernel": name, "K": k, "ctas_per_sm": per_sm, "GBps": gbps}
                )
                print(
                    f"{name:15s} K={k:5d} CTAs/SM {per_sm or 'max'}: {gbps:7.1f} GB/s", flush=True
                )
    if args.json:
        args.json.write_text(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does a load that hits L1 wait for an earlier load of the same warp that goes to DRAM?

The twelve-row product kernels stall most at their mma instructions, waiting on the activation
(B) loads (bench/NOTES.md v42a), although ~56-69 % of those hit L1 and a higher hit rate does
not make them faster (v42b). If L1TEX returns a warp's loads in order, a B load issued after the
next super-block's weight loads waits for DRAM whatever its hit. This times, with clock64 in one
warp per CTA, the cycles per link of a chain of L1-hit loads (each address from the value
before), with per link:

  alone        the hit load only
  after_miss   a load that misses to DRAM (a fresh line), then the hit load
  before_miss  the hit load, then the DRAM load (the next link's hit load still follows
               this link's DRAM load: in a chain, the same as after_miss)
  after_l2     a load that misses L1 and hits L2, then the hit load
  after_cp_async  a cp.async of a fresh DRAM line into shared memory, then the hit load

Each mode runs its own branch of the loop, so the chain's own cost differs a little between
modes (on the H100, 171 cycles alone against 115 behind a cp.async): read the hundreds of
cycles that a DRAM load in front adds, not a few tens.

The loads are inline PTX, issued in the order written (tests/unit/test_bench_inorder_probe.py
reads the SASS). The far loads are ld.volatile (kept though unused); the hit loads ld.global.nc.

    python bench/inorder_probe.py      # on the device (CuPy)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SOURCE = r"""
// A chain of L1-hit loads (each address from the value before: hot[i] = next index, all in L1
// after the warm-up), CHAIN links long, timed by clock64 around the chain; with the mode, one
// more load per link, its address also from the link's value (so it is issued in the link's
// turn; its value is never used and the load is volatile, so it stays): 0 none, 1 to a fresh
// DRAM line issued before the link's next hit load, 2 the same issued after it, 3 to an L2 line,
// 4 a fresh DRAM line copied to shared memory by cp.async (sm_80+) before the hit load.
#define CHAIN 64
extern "C" __global__ void inorder_probe(const int* hot, const int* far, int far_stride,
                                         const int* l2, int mode, long long* cycles, int* sink) {
    __shared__ __align__(16) int stage[128];
    const int lane = threadIdx.x;
    int s = 0;
    for (int i = lane; i < 1024; i += 32) s += __ldg(hot + i);  // hot (4 KB) into this SM's L1
    const int* miss = mode == 3 ? l2 + blockIdx.x * 32 * CHAIN + lane
                                : far + (size_t)blockIdx.x * far_stride + lane;
    int b = hot[lane] & 0;  // 0 at run time; the compiler cannot know
    int v = 0;  // the last far value, used after the timing only
    __syncwarp();
    const long long t0 = clock64();
#pragma unroll 1
    for (int i = 0; i < CHAIN; ++i) {
        const int* next = hot + b + lane;
        const int* m = miss + (size_t)i * (mode == 3 ? 32 : 1024) + (b >> 20);  // b >> 20 == 0
        const int* m4 = far + (size_t)blockIdx.x * far_stride + (size_t)i * 1024 + lane * 4 + (b >> 20);
        if (mode == 4) {  // the far line copied into shared memory by cp.async instead
            const unsigned dst = (unsigned)__cvta_generic_to_shared(stage + lane * 4);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(m4));
            asm volatile("cp.async.commit_group;");
            asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(b) : "l"(next));
            v = 0;
        } else if (mode == 1 || mode == 3) {
            asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(m));
            asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(b) : "l"(next));
        } else if (mode == 2) {
            asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(b) : "l"(next));
            asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(m));
        } else {
            asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(b) : "l"(next));
        }
        b -= lane;  // hot[j] = (j + 32) % 1024: the next link's base (a multiple of 32) + the lane
    }
    const long long t1 = clock64();
    asm volatile("cp.async.wait_all;" ::: "memory");
    s += stage[lane] + v;
    if (lane == 0) cycles[blockIdx.x] = (t1 - t0) / CHAIN;
    sink[blockIdx.x * 32 + lane] = s + b;
}
"""

MODES = ["alone", "after_miss", "before_miss", "after_l2", "after_cp_async"]


def main() -> int:
    from bench.common import require_gpu

    require_gpu("bench/inorder_probe.py")
    import cupy as cp
    import numpy as np

    kernel = cp.RawKernel(SOURCE, "inorder_probe")
    ctas, trials, stride = 132, 8, 1 << 17  # 512 KB between CTAs' far lines (64 links each)
    j = np.arange(1024)
    hot = cp.asarray(((j + 32) % 1024).astype(np.int32))  # the next link's base + this lane
    sink = cp.zeros(ctas * 32, dtype=cp.int32)
    cycles = cp.zeros(ctas, dtype=cp.int64)
    far = cp.zeros(len(MODES) * trials * ctas * stride, dtype=cp.int32)  # 2.8 GB, once
    flush = cp.ones(96 << 20, dtype=cp.int32)  # 384 MB read before each trial: L2 emptied
    l2 = cp.zeros(ctas * 32 * 64, dtype=cp.int32)
    for mode, name in enumerate(MODES):
        samples = []
        for trial in range(trials):
            region = far[(mode * trials + trial) * ctas * stride :]  # never read before
            int(flush.sum())
            int(l2.sum())  # these lines now in L2 (read by another kernel: not in this L1)
            cp.cuda.Device().synchronize()
            kernel(
                (ctas,), (32,), (hot, region, np.int32(stride), l2, np.int32(mode), cycles, sink)
            )
            cp.cuda.Device().synchronize()
            samples.append(cp.asnumpy(cycles))
        c = np.concatenate(samples[1:])
        print(
            f"inorder {name:12s} cycles per link of an L1-hit chain: median {np.median(c):7.0f}"
            f"  p10 {np.percentile(c, 10):7.0f}  p90 {np.percentile(c, 90):7.0f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

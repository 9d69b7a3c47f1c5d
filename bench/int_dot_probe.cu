// A probe (bench/int_dot_probe.py), not an engine kernel: Q4_K weight x rows products on integer
// dot products (dp4a) with the activations carried as TWO int8 planes per 32-element block,
// x ~= s_lo * (254 h + l) with s_lo = max|x| / (127 * 254): about 16 bits per activation
// (numpy emulation: top-1 99.83 % q4_k_m / 99.85 % mixed over 4,800 positions, KL 1.3e-5,
// where one int8 plane, llama.cpp's q8_1, gives 94.6 / 95.5 %). The codes q (0..15) and the
// planes multiply exactly in int32; the 6-bit scale and min and d apply to each 32-element
// sum in f32. Question asked: how close to the read bandwidth does this run at 1-4 rows,
// against the f16 tensor-core row kernels of matmul.cu on the same weights?
#include "quant.cuh"

#ifndef PROBE_NW
#define PROBE_NW 4  // warps per CTA, splitting K as matmul.cu does
#endif

OJ_DEV int dp4a(u32 a, u32 b, int c) {
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// Activations of R rows, f32 [R][K] -> the probe's planes:
//   xq: uint4 [R][K/256][4 pairs][8 words]: for sub-block pair j (sub-blocks 2j, 2j+1) and word
//       i, {h of 2j, l of 2j, h of 2j+1, l of 2j+1} at elements 4i..4i+3 (one byte each);
//       matches a Q4_K qs word i of chunk j (low nibbles = sub-block 2j, high = 2j+1)
//   xs: float2 [R][K/32]: (s_lo, sum of the block's rounded activations)
// One warp per 32-element block.
extern "C" __global__ void quant_x2(const float* __restrict__ X, int K, int R, u32* __restrict__ xq,
                                    float2* __restrict__ xs) {
    const int lane = threadIdx.x & 31;
    const int blk = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int nblk = K / 32;
    if (blk >= nblk * R) {
        oj_grid_dep_early();
        return;
    }
    oj_grid_dep_early();  // X is the kernel before's output; xq may still be read by it
    const int r = blk / nblk, b = blk % nblk;
    const float x = X[(size_t)r * K + 32 * b + lane];
    float mx = fabsf(x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float s = mx / 127.0f, slo = s / 254.0f;
    int h = 0, l = 0;
    if (mx > 0.0f) {
        h = max(-127, min(127, __float2int_rn(x / s)));
        l = max(-127, min(127, __float2int_rn((x - s * (float)h) / slo)));
    }
    int tot = 254 * h + l;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tot += __shfl_xor_sync(0xffffffffu, tot, o);
    if (lane == 0) xs[(size_t)r * nblk + b] = make_float2(slo, slo * (float)tot);
    // byte placement: super-block sb = b / 8, sub-block sbb = b % 8 = 2j + p
    const int sb = b >> 3, sbb = b & 7, j = sbb >> 1, p = sbb & 1, word = lane >> 2, byte = lane & 3;
    u8* base = (u8*)(xq + ((((size_t)r * (K / 256) + sb) * 4 + j) * 8 + word) * 4);
    base[(2 * p + 0) * 4 + byte] = (u8)(i8)h;
    base[(2 * p + 1) * 4 + byte] = (u8)(i8)l;
}

// y[r][n] = sum_k W[n][k] x'[r][k] for NR rows. A CTA owns one 16-row tile; its PROBE_NW warps
// split the super-blocks round-robin; lane = 2 * (row in tile) + half: half h takes sub-block
// pairs 2h and 2h+1 (64 bytes of codes), so a warp reads one super-block's 16 units (2,304
// contiguous bytes) whole.
template <int NR>
OJ_DEV void q4k_dp4a(const u8* __restrict__ W, int rows, int cols, const uint4* __restrict__ xq,
                     const float2* __restrict__ xs, float* __restrict__ Y, int ldy) {
    __shared__ float red[PROBE_NW][NR][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = lane >> 1, h = lane & 1;
    const int tile = blockIdx.x, nsb = cols >> 8;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[r] = 0.0f;
    const u8* unit0 = W + ((size_t)tile * nsb * 16 + rr) * 144;
    uint4 hdr = make_uint4(0, 0, 0, 0), q[4];
    if (warp < nsb) {
        const u8* u = unit0 + (size_t)warp * 16 * 144;
        hdr = *(const uint4*)u;
#pragma unroll
        for (int i = 0; i < 4; ++i) q[i] = *(const uint4*)(u + 16 + 64 * h + 16 * i);
    }
    for (int sb = warp; sb < nsb; sb += PROBE_NW) {
        const uint4 chdr = hdr;
        uint4 cq[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) cq[i] = q[i];
        if (sb + PROBE_NW < nsb) {  // the next super-block's blocks in flight during this one
            const u8* u = unit0 + (size_t)(sb + PROBE_NW) * 16 * 144;
            hdr = *(const uint4*)u;
#pragma unroll
            for (int i = 0; i < 4; ++i) q[i] = *(const uint4*)(u + 16 + 64 * h + 16 * i);
        }
        const float d = h2f((u16)(chdr.x & 0xFFFFu)), dmin = h2f((u16)(chdr.x >> 16));
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) {
            const int j = 2 * h + pp;
            float sc0, m0, sc1, m1;
            kquant_scale_min(chdr, 2 * j, sc0, m0);
            kquant_scale_min(chdr, 2 * j + 1, sc1, m1);
            const float ds0 = d * sc0, ds1 = d * sc1, dm0 = -dmin * m0, dm1 = -dmin * m1;
#pragma unroll
            for (int r = 0; r < NR; ++r) {
                const uint4* xr = xq + (((size_t)r * nsb + sb) * 4 + j) * 8;
                int ih0 = 0, il0 = 0, ih1 = 0, il1 = 0;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const u32 w = word_of(cq[2 * pp + (i >> 2)], i & 3);
                    const u32 lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
                    const uint4 a = __ldg(xr + i);
                    ih0 = dp4a(lo, a.x, ih0);
                    il0 = dp4a(lo, a.y, il0);
                    ih1 = dp4a(hi, a.z, ih1);
                    il1 = dp4a(hi, a.w, il1);
                }
                const float2 s0 = __ldg(xs + (size_t)r * nsb * 8 + sb * 8 + 2 * j);
                const float2 s1 = __ldg(xs + (size_t)r * nsb * 8 + sb * 8 + 2 * j + 1);
                acc[r] = fmaf(ds0 * s0.x, (float)(254 * ih0 + il0), acc[r]);
                acc[r] = fmaf(dm0, s0.y, acc[r]);
                acc[r] = fmaf(ds1 * s1.x, (float)(254 * ih1 + il1), acc[r]);
                acc[r] = fmaf(dm1, s1.y, acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; ++r) {
        const float other = __shfl_xor_sync(0xffffffffu, acc[r], 1);
        const float both = h ? other + acc[r] : acc[r] + other;  // the same order in both lanes
        if (h == 0) red[warp][r][rr] = both;
    }
    __syncthreads();
    if (threadIdx.x < NR * 16) {
        const int r = threadIdx.x >> 4, n = tile * 16 + (threadIdx.x & 15);
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < PROBE_NW; ++w) s += red[w][r][threadIdx.x & 15];
        if (n < rows) Y[(size_t)r * ldy + n] = s;
    }
}

#define PROBE_KERNEL(NR)                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * PROBE_NW)                                   \
        q4k_dp4a_##NR(const u8* W, int rows, int cols, const uint4* xq, const float2* xs,         \
                      float* Y, int ldy) {                                                        \
        q4k_dp4a<NR>(W, rows, cols, xq, xs, Y, ldy);                                              \
    }
PROBE_KERNEL(1)
PROBE_KERNEL(2)
PROBE_KERNEL(4)

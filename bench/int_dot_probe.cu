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

OJ_DEV int dp4a_us(u32 a, u32 b, int c) {  // a: unsigned bytes, b: signed bytes
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// Activations of R rows, f32 [R][K] -> the probe's planes:
//   xq: uint4 [R][K/256][4 pairs][8 words]: for sub-block pair j (sub-blocks 2j, 2j+1) and word
//       i, {h of 2j, l of 2j, h of 2j+1, l of 2j+1} at elements 4i..4i+3 (one byte each);
//       matches a Q4_K qs word i of chunk j (low nibbles = sub-block 2j, high = 2j+1)
//   xs: float2 [R][K/32]: (s_lo, sum of the block's rounded activations)
// One warp per 32-element block.
//   xst: float2 [K/32][8]: the same pairs, rows side by side (rows < 8; the mma probe's layout)
//   xs16: i32 [R][K/16]: sum of 254 h + l over each 16 elements (the Q6_K probe's code offset)
extern "C" __global__ void quant_x2(const float* __restrict__ X, int K, int R, u32* __restrict__ xq,
                                    float2* __restrict__ xs, float2* __restrict__ xst,
                                    int* __restrict__ xs16) {
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
    for (int o = 1; o < 16; o <<= 1) tot += __shfl_xor_sync(0xffffffffu, tot, o);
    if ((lane & 15) == 0) xs16[((size_t)r * nblk + b) * 2 + (lane >> 4)] = tot;  // each half
    tot += __shfl_xor_sync(0xffffffffu, tot, 16);
    if (lane == 0) {
        xs[(size_t)r * nblk + b] = make_float2(slo, slo * (float)tot);
        if (r < 8) xst[(size_t)b * 8 + r] = make_float2(slo, slo * (float)tot);
    }
    // byte placement: super-block sb = b / 8, sub-block sbb = b % 8 = 2j + p
    const int sb = b >> 3, sbb = b & 7, j = sbb >> 1, p = sbb & 1, word = lane >> 2, byte = lane & 3;
    u8* base = (u8*)(xq + ((((size_t)r * (K / 256) + sb) * 4 + j) * 8 + word) * 4);
    base[(2 * p + 0) * 4 + byte] = (u8)(i8)h;
    base[(2 * p + 1) * 4 + byte] = (u8)(i8)l;
}


// The 16 units of one super-block of a tile as lane 8 g + s of a warp reads them: units g + 4k
// (k = 0..3), each unit's header and its 16-byte code segment s (chunk j = s / 2: 16 weights of
// sub-block 2j in the low nibbles, 16 of 2j + 1 in the high ones).
struct SegBlocks {
    uint4 hdr[4], q[4];
};

OJ_DEV void seg_load(const u8* __restrict__ tile_sb, int lane, SegBlocks& B) {
    const int s = lane & 7, g = lane >> 3;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const u8* u = tile_sb + (size_t)(g + 4 * k) * 144;
        B.hdr[k] = *(const uint4*)u;
        B.q[k] = *(const uint4*)(u + 16 + 16 * s);
    }
}

// One code segment against one row's activation words a[4] (quant_x2's {h, l, h, l} of words
// 4 half .. 4 half + 3): the exact int32 sums 254 h.q + l.q of its half of sub-block 2j (x) and
// of 2j + 1 (y, times 16: the high nibbles stay in place).
OJ_DEV int2 seg_sums(const uint4& q, const uint4 (&a)[4]) {
    int ih0 = 0, il0 = 0, ih1 = 0, il1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 v = word_of(q, i);
        const u32 lo = v & 0x0F0F0F0Fu, hi = v & 0xF0F0F0F0u;
        ih0 = dp4a(lo, a[i].x, ih0);
        il0 = dp4a(lo, a[i].y, il0);
        ih1 = dp4a_us(hi, a[i].z, ih1);
        il1 = dp4a_us(hi, a[i].w, il1);
    }
    return make_int2(254 * ih0 + il0, 254 * ih1 + il1);
}

// The scales of a unit's sub-blocks 2j and 2j + 1 from its header (j: the lane's chunk, not a
// compile-time constant): ds = d * sc (times 1/16 for 2j + 1, whose sums come as 16 q, so
// exactly) and dm = -dmin * m.
OJ_DEV void seg_scales(const uint4& hdr, int j, float& ds0, float& ds1, float& dm0, float& dm1) {
    const u32 sel = 0x4140u + 0x0202u * (u32)(j & 1);  // bytes 2(j&1), +1 -> the halves' low bytes
    const u32 y = __byte_perm(hdr.y, 0u, sel), z = __byte_perm(hdr.z, 0u, sel);
    const u32 w = __byte_perm(hdr.w, 0u, sel);
    const u32 sc = j < 2 ? (y & 0x003F003Fu) : ((w & 0x000F000Fu) | ((y >> 2) & 0x00300030u));
    const u32 mn = j < 2 ? (z & 0x003F003Fu) : (((w >> 4) & 0x000F000Fu) | ((z >> 2) & 0x00300030u));
    const float d = h2f((u16)(hdr.x & 0xFFFFu)), dmin = h2f((u16)(hdr.x >> 16));
    ds0 = d * (float)(sc & 0xFFFFu);
    ds1 = d * 0.0625f * (float)(sc >> 16);
    dm0 = -dmin * (float)(mn & 0xFFFFu);
    dm1 = -dmin * (float)(mn >> 16);
}

// y[r][n] = sum_k W[n][k] x'[r][k] for NR rows. A CTA owns one 16-row tile; its PROBE_NW warps
// split the super-blocks round-robin. Within a warp, lane = 8 * g + s: s is a fixed 16-byte
// segment of a unit's 128 code bytes (chunk j = s / 2: sub-blocks 2j and 2j+1, 16 weights of
// each), g picks units g, g+4, g+8, g+12. A lane's activation words are then the same for its
// four units (loaded once per super-block and row), and the warp's loads of a super-block
// cover its 16 units' 2,304 contiguous bytes. (v24b's first probe gave each lane half a unit
// and loaded every activation word once per unit: 1.6x slower than the f16 row kernel.)
template <int NR>
OJ_DEV void q4k_seg(const u8* __restrict__ W, int rows, int cols, const uint4* __restrict__ xq,
                    const float2* __restrict__ xs, float* __restrict__ Y, int ldy) {
    __shared__ float red[PROBE_NW][NR][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, s = lane & 7, g = lane >> 3;
    const int j = s >> 1, half = s & 1;
    const int tile = blockIdx.x, nsb = cols >> 8;
    float acc[4][NR];
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int r = 0; r < NR; ++r) acc[k][r] = 0.0f;
    const u8* base = W + (size_t)tile * nsb * 16 * 144;
    SegBlocks next;
    if (warp < nsb) seg_load(base + (size_t)warp * 16 * 144, lane, next);
    oj_grid_dep();  // after the first weight loads, as matmul.cu's kernels do
    for (int sb = warp; sb < nsb; sb += PROBE_NW) {
        const SegBlocks cur = next;
        if (sb + PROBE_NW < nsb) seg_load(base + (size_t)(sb + PROBE_NW) * 16 * 144, lane, next);
        uint4 a[NR][4];
        float2 s0[NR], s1[NR];
#pragma unroll
        for (int r = 0; r < NR; ++r) {
            const uint4* xr = xq + (((size_t)r * nsb + sb) * 4 + j) * 8 + 4 * half;
#pragma unroll
            for (int i = 0; i < 4; ++i) a[r][i] = __ldg(xr + i);
            s0[r] = __ldg(xs + ((size_t)r * nsb + sb) * 8 + 2 * j);
            s1[r] = __ldg(xs + ((size_t)r * nsb + sb) * 8 + 2 * j + 1);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float ds0, ds1, dm0, dm1;
            seg_scales(cur.hdr[k], j, ds0, ds1, dm0, dm1);
#pragma unroll
            for (int r = 0; r < NR; ++r) {
                const int2 T = seg_sums(cur.q[k], a[r]);
                acc[k][r] = fmaf(ds0, s0[r].x * (float)T.x, acc[k][r]);
                acc[k][r] = fmaf(ds1, s1[r].x * (float)T.y, acc[k][r]);
                // the min terms: each of the two lanes of chunk j (halves) adds half of them
                acc[k][r] = fmaf(dm0, 0.5f * s0[r].y, acc[k][r]);
                acc[k][r] = fmaf(dm1, 0.5f * s1[r].y, acc[k][r]);
            }
        }
    }
    // unit g + 4k of this tile: sum the 8 segments (a fixed xor tree), then the warps in order
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int r = 0; r < NR; ++r) {
            float v = acc[k][r];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            if (s == 0) red[warp][r][g + 4 * k] = v;
        }
    __syncthreads();
    if (threadIdx.x < NR * 16) {
        const int r = threadIdx.x >> 4, n = tile * 16 + (threadIdx.x & 15);
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < PROBE_NW; ++w) t += red[w][r][threadIdx.x & 15];
        if (n < rows) Y[(size_t)r * ldy + n] = t;
    }
}

#define PROBE_KERNEL(NR)                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * PROBE_NW)                                   \
        q4k_seg_##NR(const u8* W, int rows, int cols, const uint4* xq, const float2* xs,          \
                     float* Y, int ldy) {                                                         \
        q4k_seg<NR>(W, rows, cols, xq, xs, Y, ldy);                                               \
    }
PROBE_KERNEL(1)
PROBE_KERNEL(2)
PROBE_KERNEL(4)

// One activation row's outputs of a 16-row tile: the warps' sums (red[warp][unit]) added in warp
// order by the first 16 threads, after the CTA's barrier.
OJ_DEV void store_tile_row(const float (&red)[PROBE_NW][16], int tile, int rows, float* __restrict__ Y) {
    if (threadIdx.x < 16) {
        const int row = tile * 16 + threadIdx.x;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < PROBE_NW; ++w) v += red[w][threadIdx.x];
        if (row < rows) Y[row] = v;
    }
}

// q4k_seg<1> in the CANONICAL order of the int8 mma kernels (q4k_mma8_t): per output and K
// class (the warp's super-blocks), per super-block the 8 sub-blocks in order into one f32
// accumulator, fmaf(d sc, slo T, acc) then fmaf(-dmin m, xsum, acc), T the sub-block's exact
// int32 sum; then the classes added in warp order. Both kernels then give the same bits (the
// probe checks it), which is what batch invariance asks of a 1-row kernel beside a multi-row
// one. The lanes' half sub-block sums go through shared memory to one owner lane per unit
// (lane s = 2k of group g owns unit g + 4k), which applies the scales.
extern "C" __global__ void __launch_bounds__(32 * PROBE_NW)
    q4k_seg_canon(const u8* __restrict__ W, int rows, int cols, const uint4* __restrict__ xq,
                  const float2* __restrict__ xs, float* __restrict__ Y, int ldy) {
    __shared__ float red[PROBE_NW][16];
    // [warp][group g][unit k][lane s]: the lane's half sums of sub-blocks 2j and 2j + 1
    __shared__ __align__(16) int2 halves[PROBE_NW][4][4][8];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, s = lane & 7, g = lane >> 3;
    const int j = s >> 1, half = s & 1, own = s >> 1;  // own: the unit k this lane owns (s even)
    const int tile = blockIdx.x, nsb = cols >> 8;
    float acc = 0.0f;
    const u8* base = W + (size_t)tile * nsb * 16 * 144;
    SegBlocks next;
    if (warp < nsb) seg_load(base + (size_t)warp * 16 * 144, lane, next);
    oj_grid_dep();
    for (int sb = warp; sb < nsb; sb += PROBE_NW) {
        const SegBlocks cur = next;
        if (sb + PROBE_NW < nsb) seg_load(base + (size_t)(sb + PROBE_NW) * 16 * 144, lane, next);
        const uint4* xr = xq + ((size_t)sb * 4 + j) * 8 + 4 * half;
        uint4 a[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = __ldg(xr + i);
#pragma unroll
        for (int k = 0; k < 4; ++k) halves[warp][g][k][s] = seg_sums(cur.q[k], a);
        __syncwarp();
        if (half == 0) {  // the owner of unit g + 4 own
            const int4* mine = (const int4*)&halves[warp][g][own][0];  // lanes 0..7: 4 x int4
            int T[8];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int4 v = mine[jj];  // lanes 2jj (x, y) and 2jj + 1 (z, w)
                T[2 * jj] = v.x + v.z;
                T[2 * jj + 1] = v.y + v.w;
            }
            const uint4 h = own == 0 ? cur.hdr[0] : own == 1 ? cur.hdr[1] : own == 2 ? cur.hdr[2] : cur.hdr[3];
            const float d = h2f((u16)(h.x & 0xFFFFu)), dmin = h2f((u16)(h.x >> 16));
            const float4* sx = (const float4*)(xs + (size_t)sb * 8);
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const float4 s2 = __ldg(sx + jj);  // (slo, xsum) of sub-blocks 2jj, 2jj + 1
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    float sc, mn;
                    kquant_scale_min(h, 2 * jj + p, sc, mn);
                    // as mma8_superblock: the same operations in the same order
                    const float ds = d * sc * (p ? 0.0625f : 1.0f), dm = -dmin * mn;
                    acc = fmaf(ds, (p ? s2.z : s2.x) * (float)T[2 * jj + p], acc);
                    acc = fmaf(dm, p ? s2.w : s2.y, acc);
                }
            }
        }
        __syncwarp();  // the next super-block's sums overwrite `halves`
    }
    if (half == 0) red[warp][g + 4 * own] = acc;
    __syncthreads();
    store_tile_row(red, tile, rows, Y);
}

// Q6_K on dp4a, one row (the engine's planes: ql [U][128], qh [U][64], scales [U][16] i8,
// d [U] f16; U tile-major). Lane 8 g + s takes units g + 4k and the 16-byte ql segment s:
// half n = s / 4, offset o = 16 (s % 4). Its low nibbles are elements 128n + o + 0..15 (group A,
// one 16-element sub-block, the code's high bits at 0-1 or 2-3 of qh[32n + o % 32 ..]), its
// high nibbles 128n + 64 + o + 0..15 (group B, bits 4-5 or 6-7). The 6-bit codes c (0..63)
// times the planes sum exactly; the offset 32 comes off as 32 x (the group's 254 h + l sum,
// quant_x2's xs16): a group is d sc slo (T - 32 S). T - 32 S can pass 2^24, so its conversion
// to f32 may round (relative 2^-24): exact enough for a probe of speed.
extern "C" __global__ void __launch_bounds__(32 * PROBE_NW, 4)  // 4 CTAs per SM, as q4k_seg<1>
    q6k_seg(const u8* __restrict__ ql, const u8* __restrict__ qh, const u8* __restrict__ scales,
            const u8* __restrict__ dplane, int rows, int cols, const uint4* __restrict__ xq,
            const float2* __restrict__ xs, const int* __restrict__ xs16, float* __restrict__ Y) {
    __shared__ float red[PROBE_NW][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, s = lane & 7, g = lane >> 3;
    const int n = s >> 2, m = s & 3, o = 16 * m;
    const int sh = m < 2 ? 0 : 2;         // group A's qh bits; B's are 4 higher
    const int bA = 4 * n + (m >> 1);      // A's 32-element activation block (B's: bA + 2)
    const int w0 = 4 * (m & 1);           // A's and B's first word in their blocks
    const int tile = blockIdx.x, nsb = cols >> 8;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    struct Q6Blocks {
        uint4 ql[4], qh[4];
        uint2 sc[4];  // scale bytes 8n .. 8n + 7: A's at byte m, B's at byte 4 + m
        u16 d[4];
    } next;
    auto load = [&](int sb, Q6Blocks& B) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const size_t u = ((size_t)tile * nsb + sb) * 16 + g + 4 * k;
            B.ql[k] = *(const uint4*)(ql + u * 128 + 16 * s);
            B.qh[k] = *(const uint4*)(qh + u * 64 + 32 * n + 16 * (m & 1));
            B.sc[k] = *(const uint2*)(scales + u * 16 + 8 * n);
            B.d[k] = *(const u16*)(dplane + u * 2);
        }
    };
    if (warp < nsb) load(warp, next);
    oj_grid_dep();
    for (int sb = warp; sb < nsb; sb += PROBE_NW) {
        const Q6Blocks cur = next;
        if (sb + PROBE_NW < nsb) load(sb + PROBE_NW, next);
        // the planes of A's and B's 16 elements: words w0.. of blocks bA and bA + 2
        const int pA = bA & 1;
        const uint4* xa = xq + ((size_t)sb * 4 + (bA >> 1)) * 8 + w0;
        const uint4* xb = xq + ((size_t)sb * 4 + (bA >> 1) + 1) * 8 + w0;
        u32 ha[4], la[4], hb[4], lb[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 va = __ldg(xa + i), vb = __ldg(xb + i);
            ha[i] = pA ? va.z : va.x;
            la[i] = pA ? va.w : va.y;
            hb[i] = pA ? vb.z : vb.x;
            lb[i] = pA ? vb.w : vb.y;
        }
        const float sloA = __ldg(xs + (size_t)sb * 8 + bA).x, sloB = __ldg(xs + (size_t)sb * 8 + bA + 2).x;
        const int SA = __ldg(xs16 + (size_t)sb * 16 + 8 * n + m), SB = __ldg(xs16 + (size_t)sb * 16 + 8 * n + 4 + m);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            int iha = 0, ila = 0, ihb = 0, ilb = 0;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const u32 lw = word_of(cur.ql[k], i), hw = word_of(cur.qh[k], i);
                const u32 ca = (lw & 0x0F0F0F0Fu) | (((hw >> sh) & 0x03030303u) << 4);
                const u32 cb = ((lw >> 4) & 0x0F0F0F0Fu) | (((hw >> (sh + 4)) & 0x03030303u) << 4);
                iha = dp4a_us(ca, ha[i], iha);
                ila = dp4a_us(ca, la[i], ila);
                ihb = dp4a_us(cb, hb[i], ihb);
                ilb = dp4a_us(cb, lb[i], ilb);
            }
            const float d = h2f(cur.d[k]);
            const float scA = (float)(i8)(cur.sc[k].x >> (8 * m)), scB = (float)(i8)(cur.sc[k].y >> (8 * m));
            acc[k] = fmaf(d * scA, sloA * (float)(254 * iha + ila - 32 * SA), acc[k]);
            acc[k] = fmaf(d * scB, sloB * (float)(254 * ihb + ilb - 32 * SB), acc[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float v = acc[k];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        if (s == 0) red[warp][g + 4 * k] = v;
    }
    __syncthreads();
    store_tile_row(red, tile, rows, Y);
}

// Up to 8 rows on the integer tensor cores. Lane (gid, t): weight rows gid and gid + 8 of a
// 16-row tile, code words 2t and 2t + 1 of each 32-byte chunk (k slots 4t.. and 16 + 4t..;
// the activation words match), output columns (activation rows) 2t, 2t + 1.
// REPACKED: each unit's 128 code bytes reordered at upload (repack_codes in the .py) so that
// lane t's words (2t, 2t + 1 of chunks 0..3) are 32 contiguous bytes: two 16-byte loads per
// weight row instead of four 8-byte loads that straddle sectors (v24f: 10 % faster).
struct Mma8Blocks {
    uint4 hdr[2];   // the two rows' 16-byte headers (d, dmin, scales)
    uint2 q[2][4];  // [row gid / gid + 8][chunk j]: code words 2t, 2t + 1
};

template <bool REPACKED>
OJ_DEV void mma8_load(const u8* __restrict__ tile_sb, int gid, int t, Mma8Blocks& B) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const u8* u = tile_sb + (size_t)(gid + 8 * h) * 144;  // tile_sb: the super-block's 16 units
        B.hdr[h] = *(const uint4*)u;
        if (REPACKED) {
            const uint4 v0 = *(const uint4*)(u + 16 + 32 * t), v1 = *(const uint4*)(u + 32 + 32 * t);
            B.q[h][0] = make_uint2(v0.x, v0.y);
            B.q[h][1] = make_uint2(v0.z, v0.w);
            B.q[h][2] = make_uint2(v1.x, v1.y);
            B.q[h][3] = make_uint2(v1.z, v1.w);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) B.q[h][j] = *(const uint2*)(u + 16 + 32 * j + 8 * t);
        }
    }
}

// One super-block of one tile into acc (the 16 x 8 outputs' f32 accumulators, the C layout):
// per sub-block two m16n8k32 from zero (the h and l planes), then for each output, in
// sub-block order, fmaf(d sc, slo T, acc) and fmaf(-dmin m, xsum, acc) with T the exact int32
// sum: an order of f32 operations that a 1-row dp4a kernel can keep too (bench/NOTES.md v24),
// so that both give the same bits.
//   xq: the R rows' planes (quant_x2); xst: (slo, xsum) per block, rows side by side.
OJ_DEV void mma8_superblock(const Mma8Blocks& B, const uint4* __restrict__ xq,
                            const float2* __restrict__ xst, int sb, int nsb, int gid, int t, int R,
                            float (&acc)[4]) {
    const bool live = gid < R;  // activation row gid exists (B column gid)
    float d[2], dmin[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        d[h] = h2f((u16)(B.hdr[h].x & 0xFFFFu));
        dmin[h] = h2f((u16)(B.hdr[h].x >> 16));
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint4 b0 = make_uint4(0, 0, 0, 0), b1 = b0;
        if (live) {
            const uint4* xr = xq + (((size_t)gid * nsb + sb) * 4 + j) * 8;
            b0 = __ldg(xr + 2 * t);
            b1 = __ldg(xr + 2 * t + 1);
        }
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const u32 mask = p ? 0xF0F0F0F0u : 0x0F0F0F0Fu;  // high nibbles stay in place: 16 q
            const u32 a0 = B.q[0][j].x & mask, a2 = B.q[0][j].y & mask;
            const u32 a1 = B.q[1][j].x & mask, a3 = B.q[1][j].y & mask;
            int ch[4], cl[4];
            mma_16832_u8s8(ch, a0, a1, a2, a3, p ? b0.z : b0.x, p ? b1.z : b1.x);
            mma_16832_u8s8(cl, a0, a1, a2, a3, p ? b0.w : b0.y, p ? b1.w : b1.y);
            const int b = 2 * j + p;
            // (slo, xsum) of columns 2t and 2t + 1
            const float4 sx = __ldg((const float4*)(xst + ((size_t)sb * 8 + b) * 8 + 2 * t));
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float sc, mn;
                kquant_scale_min(B.hdr[h], b, sc, mn);
                const float ds = d[h] * sc * (p ? 0.0625f : 1.0f), dm = -dmin[h] * mn;
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int e = 2 * h + c;
                    acc[e] = fmaf(ds, (c ? sx.z : sx.x) * (float)(254 * ch[e] + cl[e]), acc[e]);
                    acc[e] = fmaf(dm, c ? sx.w : sx.y, acc[e]);
                }
            }
        }
    }
}

// A CTA owns one 16-row tile, its PROBE_NW warps split the super-blocks round-robin; the
// warps' sums are added in warp order.
template <bool REPACKED>
OJ_DEV void q4k_mma8_t(const u8* __restrict__ W, int rows, int cols, const uint4* __restrict__ xq,
                       const float2* __restrict__ xst, float* __restrict__ Y, int ldy, int R) {
    __shared__ float red[PROBE_NW][4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, nsb = cols >> 8;
    const u8* base = W + (size_t)tile * nsb * 16 * 144;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    Mma8Blocks next;
    if (warp < nsb) mma8_load<REPACKED>(base + (size_t)warp * 16 * 144, gid, t, next);
    oj_grid_dep();
    for (int sb = warp; sb < nsb; sb += PROBE_NW) {
        const Mma8Blocks cur = next;
        if (sb + PROBE_NW < nsb) mma8_load<REPACKED>(base + (size_t)(sb + PROBE_NW) * 16 * 144, gid, t, next);
        mma8_superblock(cur, xq, xst, sb, nsb, gid, t, R, acc);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) red[warp][e][lane] = acc[e];
    __syncthreads();
    if (threadIdx.x < 128) {
        const int e = threadIdx.x >> 5, ln = threadIdx.x & 31;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < PROBE_NW; ++w) v += red[w][e][ln];
        const int n = tile * 16 + (ln >> 2) + 8 * (e >> 1), r = 2 * (ln & 3) + (e & 1);
        if (n < rows && r < R) Y[(size_t)r * ldy + n] = v;
    }
}

extern "C" __global__ void __launch_bounds__(32 * PROBE_NW)
    q4k_mma8(const u8* W, int rows, int cols, const uint4* xq, const float2* xst, float* Y, int ldy, int R) {
    q4k_mma8_t<false>(W, rows, cols, xq, xst, Y, ldy, R);
}
extern "C" __global__ void __launch_bounds__(32 * PROBE_NW)
    q4k_mma8_r(const u8* W, int rows, int cols, const uint4* xq, const float2* xst, float* Y, int ldy, int R) {
    q4k_mma8_t<true>(W, rows, cols, xq, xst, Y, ldy, R);
}

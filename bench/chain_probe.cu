// A probe (bench/chain_probe.py), not an engine kernel; compiled after engine/cuda/matmul.cu
// (its f16 fragments and mma_superblock) and bench/int_dot_probe.cu (its dp4a helpers and
// activation planes). Question asked: how much of the ~4-5 us that every
// product launch loses against its kernel's own streaming rate (bench/NOTES.md v24) does ONE
// persistent kernel win back, running a step's products one after another with a grid barrier
// between them (each product needs the one before it, as in the forward pass), and loading
// the next product's first weights before it waits at the barrier?
//
// Work: an item is one super-block of one 16-row tile (2,304 contiguous bytes of Q4_K units),
// so a 5,120 x 5,120 product has 6,400 items and every warp of the grid gets a near-equal
// share (whole tiles per CTA left a tail in v8b). Item results go to part[sb][n] (a consumer
// would sum a row's partials in sb order: a fixed order). One activation row.
struct ChainProduct {
    const u8* W;        // tile-major Q4_K units (chain_q4k_mma: code bytes repacked as q4k_mma8_r's)
    const uint4* xq;    // activation planes (quant_x2) of the rows
    const float2* xs;   // (slo, xsum) per 32-element block, one row
    const float2* xst;  // the same, rows side by side (quant_x2's xst: the mma kernels' layout)
    const void* xh;     // the rows as the engine's packed f16 activations (chain_q4k_f16)
    int rows, cols;     // N, K
    int tiles, items;   // ceil(N / 16), tiles * K / 256
    int ldx, pad;       // xh: halves per row
};

// One item: the dp4a products of q4k_seg<1> (int_dot_probe.cu) over one super-block, each
// unit's 8 segment sums added by a fixed xor tree, written to part[sb][n].
OJ_DEV void chain_item(const ChainProduct& P, int item, int lane, const SegBlocks& L,
                       float* __restrict__ part) {
    const int nsb = P.cols >> 8, tile = item / nsb, sb = item % nsb, s = lane & 7, g = lane >> 3;
    const int j = s >> 1, half = s & 1;
    const uint4* xr = P.xq + ((size_t)sb * 4 + j) * 8 + 4 * half;
    uint4 a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = __ldg(xr + i);
    const float2 s0 = __ldg(P.xs + (size_t)sb * 8 + 2 * j), s1 = __ldg(P.xs + (size_t)sb * 8 + 2 * j + 1);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float ds0, ds1, dm0, dm1;
        seg_scales(L.hdr[k], j, ds0, ds1, dm0, dm1);
        const int2 T = seg_sums(L.q[k], a);
        float v = ds0 * (s0.x * (float)T.x);
        v = fmaf(ds1, s1.x * (float)T.y, v);
        v = fmaf(dm0, 0.5f * s0.y, v);
        v = fmaf(dm1, 0.5f * s1.y, v);
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        const int n = tile * 16 + g + 4 * k;
        if (s == 0 && n < P.rows) part[(size_t)sb * P.rows + n] = v;
    }
}

// Every CTA arrives once per barrier; thread 0 spins until all have. A spin that runs out
// (CTAs not all resident: the grid was sized wrong) sets *failed, after which no barrier
// waits, so the probe reports it instead of hanging.
OJ_DEV void chain_barrier(unsigned* bar, unsigned target, int* failed) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(bar, 1u);
        unsigned seen;
        int spins = 0;
        do {
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(bar) : "memory");
        } while (seen < target && ++spins < (1 << 20) && !*(volatile int*)failed);
        if (seen < target) atomicExch(failed, 1);  // later barriers then wait no more
    }
    __syncthreads();
}

// An item's bytes (tile-major: item = tile * nsb + sb is its unit group's index) asked into L2
// by the first lanes, one 128-byte line each.
constexpr int CHAIN_ITEM_BYTES = 16 * 144;  // 16 Q4_K units
OJ_DEV void chain_prefetch_l2(const ChainProduct& P, int item, int lane) {
    if (lane < CHAIN_ITEM_BYTES / 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(P.W + (size_t)item * CHAIN_ITEM_BYTES + lane * 128));
}

// The persistent walk, for a policy Op (Op::Load, Op::load, Op::item). grid: every CTA
// resident at once (chain_probe.py sizes it from the occupancy); 4 warps. flags bit 0: a
// barrier after every product but the last; flags >> 1: how many of the warp's further items of
// the next product it asks into L2 before it waits at a barrier (0: none). The warp's next item
// (in this product or a later one) is loaded before the current one is computed, so the first
// loads of product p + 1 are in flight while the CTA waits at barrier p.
template <class Op>
OJ_DEV void chain_walk(const ChainProduct* __restrict__ prods, int n_prods, float* __restrict__ part,
                       unsigned* bar, int flags, int* failed, int R) {
    const int barriers = flags & 1, ahead_l2 = flags >> 1;
    const int lane = threadIdx.x & 31;
    const int wg = blockIdx.x * 4 + (threadIdx.x >> 5), nw = gridDim.x * 4;
    // the warp's item sequence: products in order, items wg, wg + nw, ... of each
    int p = 0, item = wg;
    while (p < n_prods && item >= prods[p].items) {
        ++p;
        item = wg;
    }
    typename Op::Load cur, next;
    if (p < n_prods) Op::load(prods[p], item, lane, cur);
    oj_grid_dep();  // launched one per product (the `launches` variant): as matmul.cu's kernels
    for (int q = 0; q < n_prods; ++q) {
        while (p == q) {
            int np = p, ni = item + nw;
            while (np < n_prods && ni >= prods[np].items) {
                ++np;
                ni = wg;
            }
            if (np < n_prods) Op::load(prods[np], ni, lane, next);
            Op::item(prods[p], item, lane, cur, part, R);
            p = np;
            item = ni;
            cur = next;
        }
        if (barriers && q + 1 < n_prods) {
            // keep the memory busy through the barrier: the warp's items after `item` (its
            // first of product p, already in `cur`) into L2
            for (int a = 1; a <= ahead_l2 && p < n_prods && item + a * nw < prods[p].items; ++a)
                chain_prefetch_l2(prods[p], item + a * nw, lane);
            chain_barrier(bar, (unsigned)(q + 1) * gridDim.x, failed);
        }
    }
}

struct ChainDp4a {  // one row: int_dot_probe.cu's q4k_seg<1> loop
    using Load = SegBlocks;
    static OJ_DEV void load(const ChainProduct& P, int item, int lane, Load& L) {
        const int nsb = P.cols >> 8, tile = item / nsb, sb = item % nsb;
        seg_load(P.W + ((size_t)tile * nsb + sb) * 16 * 144, lane, L);
    }
    static OJ_DEV void item(const ChainProduct& P, int item, int lane, const Load& L, float* part, int) {
        chain_item(P, item, lane, L, part);
    }
};

// 1-8 rows: int_dot_probe.cu's q4k_mma8_r work on one super-block of one tile (repacked code
// bytes), the 16 x 8 results to part[sb][r][n].
struct ChainMma {
    using Load = Mma8Blocks;
    static OJ_DEV void load(const ChainProduct& P, int item, int lane, Load& L) {
        const int nsb = P.cols >> 8, tile = item / nsb, sb = item % nsb;
        mma8_load<true>(P.W + ((size_t)tile * nsb + sb) * 16 * 144, lane >> 2, lane & 3, L);
    }
    static OJ_DEV void item(const ChainProduct& P, int item, int lane, const Load& L, float* part, int R) {
        const int nsb = P.cols >> 8, tile = item / nsb, sb = item % nsb, gid = lane >> 2, t = lane & 3;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma8_superblock(L, P.xq, P.xst, sb, nsb, gid, t, R, acc);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int n = tile * 16 + gid + 8 * (e >> 1), r = 2 * t + (e & 1);
            if (n < P.rows && r < R) part[((size_t)sb * 8 + r) * P.rows + n] = acc[e];
        }
    }
};

// 1-8 rows on the ENGINE's f16 fragments (matmul.cu mma_superblock, FragQ4K, packed f16
// activations in groups of 2^XL rows): the same persistent walk with today's numerics, to tell
// what persistence alone is worth.
template <int XL>
struct ChainF16 {
    struct Load {
        FragQ4K f[1][2];
    };
    static OJ_DEV WDesc desc(const ChainProduct& P) { return {P.W, P.W, P.W, P.W, P.rows, P.cols}; }
    static OJ_DEV void load(const ChainProduct& P, int item, int lane, Load& L) {
        const int nsb = P.cols >> 8, tile = item / nsb, sb = item % nsb, gid = lane >> 2, t = lane & 3;
        const WDesc W = desc(P);
#pragma unroll
        for (int h = 0; h < 2; ++h) L.f[0][h].load(W, min(tile * 16 + 8 * h + gid, P.rows - 1), sb, t);
    }
    static OJ_DEV void item(const ChainProduct& P, int item, int lane, const Load& L, float* part, int R) {
        const int nsb = P.cols >> 8, tile = item / nsb, sb = item % nsb, gid = lane >> 2, t = lane & 3;
        Load cur = L;
#pragma unroll
        for (int h = 0; h < 2; ++h) cur.f[0][h].prep(t);
        float acc[1][1][4] = {{{0.0f, 0.0f, 0.0f, 0.0f}}};
        mma_superblock<FragQ4K, 1, 1, XL>(cur.f, acc, P.xh, P.ldx, sb, R, gid, t);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int n = tile * 16 + gid + 8 * (i >> 1), r = 2 * t + (i & 1);
            if (n < P.rows && r < R) part[((size_t)sb * 8 + r) * P.rows + n] = acc[0][0][i];
        }
    }
};

extern "C" __global__ void __launch_bounds__(128, 4)
    chain_q4k(const ChainProduct* __restrict__ prods, int n_prods, float* __restrict__ part,
              unsigned* bar, int flags, int* failed) {
    chain_walk<ChainDp4a>(prods, n_prods, part, bar, flags, failed, 1);
}
extern "C" __global__ void __launch_bounds__(128, 4)
    chain_q4k_mma(const ChainProduct* __restrict__ prods, int n_prods, float* __restrict__ part,
                  unsigned* bar, int flags, int* failed, int R) {
    chain_walk<ChainMma>(prods, n_prods, part, bar, flags, failed, R);
}
#define CHAIN_F16(XL)                                                                              \
    extern "C" __global__ void __launch_bounds__(128, 4)                                           \
        chain_q4k_f16_##XL(const ChainProduct* __restrict__ prods, int n_prods,                    \
                           float* __restrict__ part, unsigned* bar, int flags, int* failed,        \
                           int R) {                                                                \
        chain_walk<ChainF16<XL>>(prods, n_prods, part, bar, flags, failed, R);                  \
    }
CHAIN_F16(0)
CHAIN_F16(2)
CHAIN_F16(3)

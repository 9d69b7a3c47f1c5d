// A probe, not an engine path (bench/tma_probe.py): the Q4_K row product of matmul.cu
// (`wmat_rows` with FragQ4K, one m-tile and one n-tile per warp: mmh1_/mmh4_q4_k_1) fed by the
// bulk-copy engine (cp.async.bulk, sm_90+) instead of the warps' own global loads.
//
// Why: Nsight Compute has the engine's row products at 55-58 % of DRAM with their warps
// waiting on the weight loads (bench/NOTES.md v15f, v29c). Each warp keeps one super-block
// (2,304 bytes of a 16-row tile) in flight in registers, so a CTA's bytes in flight are bound
// by its registers. Here lane 0 of each warp asks the copy engine for its next TMA_D
// super-blocks into a ring in shared memory (tile-major units make one super-block of a
// 16-row tile one contiguous span), the warp waits on the slot's mbarrier, reads its
// fragments from shared memory and computes exactly what wmat_rows computes: same K split
// (warp w takes super-blocks w, w + 4, ...), same chunk order, same warp-order sum, so the
// same bits (the probe checks them against the engine's kernel).
//
// Launched with one CTA per tile (grid = tiles) or persistent (grid < tiles): a CTA then walks
// tiles blockIdx.x, + gridDim.x, ... and each warp's ring runs on across the tiles, so a tile's
// first super-blocks are in flight while the previous tile is summed.
//
// Measured (bench/NOTES.md v30a-d): the same bits everywhere, and no faster than the engine's
// own loads. On a 2 GB matrix (the steady rate) one CTA per tile with a ring of 2 super-blocks
// per warp read 3.17 and 2.95 TB/s in two calls against wmat_rows's 3.19 and 3.22; rings of 3
// and 4 read less (2.88-3.07, 2.99), a persistent grid 2.55. Over the 27B's Q4_K matrices at
// one row, 5.43 ms (ring of 2) against 5.44 for wmat_rows at 4 CTAs per SM everywhere. The
// warps are not short of bytes in flight.
#define OJ_MM_DEVICE_ONLY
#include "matmul.cu"

#define TMA_UNIT 2304  // one super-block of a 16-row Q4_K tile: 16 x 144 bytes

OJ_DEV u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

OJ_DEV void mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// one arrival that also expects `bytes` of copies to complete before the phase ends
OJ_DEV void mbar_expect(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

OJ_DEV bool mbar_done(u64* bar, u32 parity) {
    u32 ok;
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(ok)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    return ok != 0;
}

OJ_DEV void bulk_to_smem(void* dst, const void* src, u32 bytes, u64* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}

// FragQ4K::load from a super-block of 16 units in shared memory (row: 0..15 in the tile)
OJ_DEV void frag_from_smem(FragQ4K& f, const u8* unit16, int row, int t) {
    const u8* blk = unit16 + row * 144;
    f.hdr = *(const uint4*)blk;
    f.q0 = *(const uint4*)(blk + 16 + 16 * t);
    f.q1 = *(const uint4*)(blk + 80 + 16 * t);
}

template <int XL, int D, bool PERSIST>
OJ_DEV void q4k_tma_rows(const u8* __restrict__ p0, int rows, int cols, const void* __restrict__ X,
                         int ldx, float* __restrict__ Y, int ldy, int R) {
    __shared__ __align__(128) u8 ring[MM_NW][D][TMA_UNIT];
    __shared__ __align__(8) u64 full[MM_NW][D];
    __shared__ float red[MM_NW * 4 * 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int nsb = cols >> 8, tiles = (rows + 15) >> 4;
    const int mine = warp < nsb ? (nsb - warp + MM_NW - 1) / MM_NW : 0;  // super-blocks per tile
    const int my_tiles =
        !PERSIST ? 1 : blockIdx.x < tiles ? (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    const int total = mine * my_tiles;  // this warp's super-blocks over all its tiles
    const int nrows = min(8, R);

    if (lane == 0)
        for (int d = 0; d < D; ++d) mbar_init(&full[warp][d], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncwarp();
    // the i-th super-block of this warp's walk: tile blockIdx.x + (i / mine) * gridDim.x,
    // super-block warp + (i % mine) * MM_NW
    // (one CTA per tile: tile blockIdx.x, super-block warp + i * MM_NW, with no division)
    auto issue = [&](int i) {
        const int tile = PERSIST ? blockIdx.x + (i / mine) * gridDim.x : blockIdx.x;
        const int sb = PERSIST ? warp + (i % mine) * MM_NW : warp + i * MM_NW;
        const u8* src = p0 + ((size_t)tile * nsb + sb) * TMA_UNIT;
        u64* bar = &full[warp][i % D];
        mbar_expect(bar, TMA_UNIT);
        bulk_to_smem(ring[warp][i % D], src, TMA_UNIT, bar);
    };
    if (lane == 0)
        for (int i = 0; i < D && i < total; ++i) issue(i);
    oj_grid_dep();  // the weights depend on no earlier kernel: their copies are already asked

    int i = 0;
    for (int k = 0; k < my_tiles; ++k) {
        const int tile = blockIdx.x + k * gridDim.x;
        float acc[1][1][4] = {{{0.0f, 0.0f, 0.0f, 0.0f}}};
        for (int m = 0; m < mine; ++m, ++i) {
            const int slot = i % D;
            while (!mbar_done(&full[warp][slot], (u32)(i / D) & 1u)) {
            }
            FragQ4K f[1][2];
            frag_from_smem(f[0][0], ring[warp][slot], gid, t);
            frag_from_smem(f[0][1], ring[warp][slot], 8 + gid, t);
            __syncwarp();  // every lane has its fragments: the slot may be refilled
            if (lane == 0 && i + D < total) issue(i + D);
            f[0][0].prep(t);
            f[0][1].prep(t);
            mma_superblock<FragQ4K, 1, 1, XL>(f, acc, X, ldx, warp + m * MM_NW, nrows, gid, t);
        }
        reduce_store<1, 1>(red, acc, rows, Y, ldy, tile * 16, 0, nrows, R, MM_STORE);
        __syncthreads();  // red is rewritten by the next tile
    }
}

// Every probe kernel is one of two shapes: a product (kernels.matmul's arguments, grid per call)
// or a walk over all products (a table of them, counters). BOUNDS: __launch_bounds__'s
// parenthesized arguments; the rest: the body.
#define PRODUCT_PROBE(BOUNDS, NAME, ...)                                                           \
    extern "C" __global__ void __launch_bounds__ BOUNDS                                            \
        NAME(const u8* p0, int rows, int cols, const void* X, int ldx, float* Y, int ldy, int R) { \
        __VA_ARGS__;                                                                               \
    }
// The global timer (ns; --set anatomy's stamps), and the same read only once `dep` is known (an
// input of the asm: the loads it comes from have arrived). A CTA's stamps: entry, its wait
// returned, its first round in, its end, its SM.
#define STAMPS 5
OJ_DEV unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
OJ_DEV unsigned long long global_ns_after(u32 dep) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "r"(dep));
    return t;
}
// A CTA's stamps stored at `at` (its own STAMPS slots), with its SM; t_first 0: no round ran.
OJ_DEV void store_stamps(unsigned long long* at, unsigned long long t_entry, unsigned long long t_wait,
                         unsigned long long t_first, unsigned long long t_end) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    at[0] = t_entry;
    at[1] = t_wait;
    at[2] = t_first ? t_first : t_wait;
    at[3] = t_end;
    at[4] = sm;
}
#define WALK_PROBE(NAME, ...)                                                                      \
    extern "C" __global__ void __launch_bounds__(32 * MM_NW)                                      \
        NAME(const long long* mats, int n_mats, unsigned* done, int* failed, float* Y) {          \
        __VA_ARGS__;                                                                               \
    }

#define TMA_KERNEL(NAME, XL, D, MINB, PERSIST) \
    PRODUCT_PROBE((32 * MM_NW, MINB), NAME, q4k_tma_rows<XL, D, PERSIST>(p0, rows, cols, X, ldx, Y, ldy, R))

// q4k_tma<rows: 1 = one row, 4 = 2-4 rows>_<ring depth>: one CTA per tile; *p: persistent
TMA_KERNEL(q4k_tma1_2, 0, 2, 4, false)
TMA_KERNEL(q4k_tma1_3, 0, 3, 4, false)
TMA_KERNEL(q4k_tma1_4, 0, 4, 4, false)
TMA_KERNEL(q4k_tma1_3m5, 0, 3, 5, false)  // five CTAs per SM (registers capped at 96)
TMA_KERNEL(q4k_tma1_4p, 0, 4, 4, true)
TMA_KERNEL(q4k_tma4_2, 2, 2, 4, false)
TMA_KERNEL(q4k_tma4_3, 2, 3, 4, false)
TMA_KERNEL(q4k_tma4_4p, 2, 4, 4, true)

// The engine's own row kernel (wmat_rows, the Q4_K one-n-tile instantiation as mmh1_/mmh4_q4_k_1)
// at 4 CTAs per SM for every shape, beside the probe's kernels. Grid: (1, tiles).
#define ROWS_KERNEL(NAME, XL)                                                                      \
    extern "C" __global__ void __launch_bounds__(32 * MM_NW, MM_MINB1)                            \
        NAME(const u8* p0, int rows, int cols, const void* X, int ldx, float* Y, int ldy, int R) { \
        __shared__ float red[MM_NW * 4 * 32];                                                     \
        const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};                              \
        wmat_rows<FragQ4K, 1, 1, XL, 1>(red, W, blockIdx.y, X, ldx, Y, ldy, R, MM_STORE);         \
    }
ROWS_KERNEL(rows1, 0)
ROWS_KERNEL(rows4, 2)

// ---- Ablations (--set ablation): wmat_rows's one-row Q4_K kernel (two buffers taking turns,
// one m-tile and one n-tile per warp) with parts of its work taken out, to time what each part
// of a warp's chain costs. Their outputs are not products (no bits to check).
#define ABL_NO_B 1    // activation fragments from registers, not loads
#define ABL_NO_DEQ 2  // weight fragments are the raw code words (no dequantization, no prep)
#define ABL_NO_MMA 4  // an FADD per chunk instead of the mma (a 4-cycle chain, not ~30)
#define ABL_NO_W 8    // no weight loads: fragments made from the super-block index
// the finer questions after v31a (NO_DEQ took the rate of a 2 GB matrix from 3.07 to 4.14
// TB/s, but the split-min engine kernels, whose pair of weights costs a LOP3 and an HMUL2
// instead of four instructions, did not speed the step up, v31c-d): which half of the
// dequantization costs the time, the per-super-block scales (prep) or the per-chunk get
#define ABL_NO_PREP 16   // no prep: the splats are the header's words as they are
#define ABL_CHEAP_GET 32  // get as LOP3 + HMUL2 (split-min's A, without its second chain)
#define ABL_MIN_MMA 64    // with ABL_CHEAP_GET: the min chain's second mma into its own
                          // accumulator and the per-super-block fold (split-min's whole loop)
// Local SASS (nvcc 13, sm_90) of rows_abl_split shows what the second mma costs beyond its own
// issue: its A operand must sit in four consecutive registers, so (m0, m1, m0, m1) is copied
// into a quad before every mma (4 IMAD.MOV per chunk). Two ways around it:
#define ABL_MIN_K8 128   // with ABL_CHEAP_GET: the min chain as two m16n8k8 mma per chunk, whose
                         // A is a pair (m0, m1) made once per super-block, B one k half
#define ABL_SUM_MMA 256  // with ABL_CHEAP_GET: the activations' sub-block sums as an mma whose
                         // A is a constant indicator quad (made once per kernel) and B the
                         // activation pair as loaded: no copies; sums folded once per super-block
#define ABL_S1688 512     // with ABL_CHEAP_GET: the whole row-kernel side of split-min with the
                         // sums S as NOTES' v31 plan has them: S from two m16n8k8 per chunk (A:
                         // a constant indicator pair, rows = sub-blocks; B: one activation k
                         // half), moved to the min mma's B layout by shuffles once per
                         // super-block, split into f16 hi + lo, one m16n8k16 with the mins, the
                         // fold (the gemm would read S that its B-writing warps made the same way)

// m16n8k8 (f16 in, f32 accumulate): A (a0: row gid, a1: row gid + 8; k 2t, 2t+1), B (k 2t,
// 2t+1; column gid)
OJ_DEV void mma_1688(float* d, u32 a0, u32 a1, u32 b0) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

template <int FLAGS>
OJ_DEV void abl_load(FragQ4K& f, const WDesc& W, int row, int sb, int t) {
    if (FLAGS & ABL_NO_W) {  // values that change with sb, so nothing is hoisted out of the loop
        const u32 s = 0x9E3779B9u * (u32)(sb + 1) ^ (u32)(row * 131 + t);
        f.hdr = make_uint4(0x1C001C00u ^ (s & 0x03FF03FFu), s, s >> 3, s >> 5);
        f.q0 = make_uint4(s, s ^ 0x5A5A5A5Au, s + 1u, s * 3u);
        f.q1 = make_uint4(s ^ 0xA5A5A5A5u, s + 7u, s * 5u, ~s);
    } else {
        f.load(W, row, sb, t);
    }
}

template <int FLAGS>
OJ_DEV void abl_superblock(FragQ4K (&f)[2], float (&acc)[4], const void* __restrict__ X, int ldx,
                           int sb, int nrows, int gid, int t, const uint4 (&ind)[4],
                           const uint2 (&ind8)[4]) {
    if (FLAGS & ABL_NO_PREP) {  // splats from the header as loaded: no arithmetic
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint4 v = f[h].hdr;
            f[h].dd = v.x;
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                f[h].scm[s] = word_of(v, s);
                f[h].mhi[s] = word_of(v, (s + 1) & 3);
                f[h].mlo[s] = word_of(v, (s + 2) & 3);
            }
        }
    } else if (!(FLAGS & ABL_NO_DEQ)) {
        f[0].prep(t);
        f[1].prep(t);
    }
    float tm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint2 mp[4];  // ABL_MIN_K8: the min pairs (rows gid, gid + 8) of the thread's 4 sub-blocks
    if (FLAGS & ABL_MIN_K8) {
#pragma unroll
        for (int s = 0; s < 4; ++s) mp[s] = make_uint2(f[0].mhi[s], f[1].mhi[s]);
    }
#pragma unroll
    for (int c = 0; c < 16; ++c) {
        uint2 b;
        if (FLAGS & ABL_NO_B) b = make_uint2(0x3C003C00u ^ (u32)(c * 0x00010001), 0x38003800u + (u32)t);
        else b = b_pair<0, FragQ4K>(X, ldx, gid, sb, t, c, nrows);
        u32 a0, a1, a2, a3;
        if (FLAGS & ABL_NO_DEQ) {
            const int w = c >> 1;
            a0 = word_of(w < 4 ? f[0].q0 : f[0].q1, w & 3);
            a2 = a0 >> (4 * (c & 1));
            a1 = word_of(w < 4 ? f[1].q0 : f[1].q1, w & 3);
            a3 = a1 >> (4 * (c & 1));
        } else if (FLAGS & ABL_CHEAP_GET) {
            const int w = c >> 1, h = c & 1, s = (w < 4 ? 0 : 2) + h;
            const u32 mask = h ? 0x00F000F0u : 0x000F000Fu;
            const u32 w0 = word_of(w < 4 ? f[0].q0 : f[0].q1, w & 3);
            const u32 w1 = word_of(w < 4 ? f[1].q0 : f[1].q1, w & 3);
            a0 = hmul2(w0 & mask, f[0].scm[s]);
            a2 = hmul2((w0 >> 8) & mask, f[0].scm[s]);
            a1 = hmul2(w1 & mask, f[1].scm[s]);
            a3 = hmul2((w1 >> 8) & mask, f[1].scm[s]);
            if (FLAGS & ABL_MIN_MMA) {
                const u32 m0 = f[0].mhi[s], m1 = f[1].mhi[s];
                mma_16816(tm, m0, m1, m0, m1, b.x, b.y);
            }
            if (FLAGS & ABL_MIN_K8) {
                mma_1688(tm, mp[s].x, mp[s].y, b.x);
                mma_1688(tm, mp[s].x, mp[s].y, b.y);
            }
            if (FLAGS & ABL_S1688) {  // S[sub-block gid][activation rows 2t, 2t+1]
                const uint2 q = ind8[(c >= 8 ? 2 : 0) + (c & 1)];
                mma_1688(tm, q.x, q.y, b.x);
                mma_1688(tm, q.x, q.y, b.y);
            }
            if (FLAGS & ABL_SUM_MMA) {
                const uint4 q = ind[(c >= 8 ? 2 : 0) + (c & 1)];
                mma_16816(tm, q.x, q.y, q.z, q.w, b.x, b.y);
            }
        } else {
            f[0].get(c, a0, a2);
            f[1].get(c, a1, a3);
        }
        if (FLAGS & ABL_NO_MMA)
            acc[0] += __uint_as_float(0x3F800000u | ((a0 ^ a1 ^ a2 ^ a3 ^ b.x ^ b.y) & 0x007FFFFFu));
        else
            mma_16816(acc, a0, a1, a2, a3, b.x, b.y);
    }
    if (FLAGS & ABL_S1688) {
        // lane (gid, t) needs S[sub 2t][act gid] and S[sub 2t+1][act gid]: lanes (2t, gid/2)
        // and (2t+1, gid/2) hold them, as element gid & 1
        const int src = 8 * t + (gid >> 1), odd = gid & 1;
        const float a0 = __shfl_sync(0xFFFFFFFFu, tm[0], src), a1 = __shfl_sync(0xFFFFFFFFu, tm[1], src);
        const float c0 = __shfl_sync(0xFFFFFFFFu, tm[0], src + 4), c1 = __shfl_sync(0xFFFFFFFFu, tm[1], src + 4);
        const float s0 = odd ? a1 : a0, s1 = odd ? c1 : c0;
        const u32 hi = pack_h2(s0, s1);
        const u32 lo = pack_h2(s0 - h2f((u16)(hi & 0xFFFFu)), s1 - h2f((u16)(hi >> 16)));
        const u32 m0 = f[0].mhi[0], m1 = f[1].mhi[0];
#pragma unroll
        for (int i = 0; i < 4; ++i) tm[i] = 0.0f;
        mma_16816(tm, m0, m1, m0, m1, hi, lo);
    }
    if (FLAGS & (ABL_MIN_MMA | ABL_MIN_K8 | ABL_SUM_MMA | ABL_S1688)) {  // split-min's fold
        const float d0 = __uint_as_float(f[0].dd), d1 = __uint_as_float(f[1].dd);
        const float n0 = __uint_as_float(f[0].mlo[0]), n1 = __uint_as_float(f[1].mlo[0]);
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = fmaf(tm[i], i < 2 ? n0 : n1, acc[i] * (i < 2 ? d0 : d1));
    }
}

// STAMP (--set anatomy): the CTA stamps the global timer as flat_loads<DEP, true> does, at its
// tile of `stamps` (u64 [tiles][STAMPS]: this launch's); the first round is the warp's first
// super-block multiplied.
template <int FLAGS, bool STAMP = false>
OJ_DEV void abl_rows(const u8* __restrict__ p0, int rows, int cols, const void* __restrict__ X,
                     int ldx, float* __restrict__ Y, int ldy, int R,
                     unsigned long long* stamps = nullptr) {
    __shared__ float red[MM_NW * 4 * 32];
    unsigned long long t_entry = 0, t_wait = 0, t_first = 0;
    if (STAMP) t_entry = global_ns();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.y * 16, nsb = cols >> 8, nrows = min(1, R);
    const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};
    float acc[1][1][4] = {{{0.0f, 0.0f, 0.0f, 0.0f}}};
    auto load_to = [&](FragQ4K (&f)[2], int sb) {
#pragma unroll
        for (int h = 0; h < 2; ++h) abl_load<FLAGS>(f[h], W, min(row0 + 8 * h + gid, rows - 1), sb, t);
    };
    FragQ4K fa[2], fb[2];
    uint4 ind[4];  // ABL_SUM_MMA: rows gid: 1 where the slot's sub-block (base + 2(t>>1)) is gid
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int base = (i >= 2 ? 4 : 0) + (i & 1);
        const u32 one = base + 2 * (t >> 1) == gid ? 0x3C003C00u : 0u;
        ind[i] = make_uint4(one, 0u, one, 0u);
    }
    uint2 ind8[4];  // ABL_S1688: row gid of the m16n8k8 A: 1 where the slot's sub-block is gid
#pragma unroll
    for (int i = 0; i < 4; ++i) ind8[i] = make_uint2(ind[i].x, 0u);
    if (warp < nsb) load_to(fa, warp);
    oj_grid_dep();
    if (STAMP) t_wait = global_ns();
    for (int sb = warp; sb < nsb; sb += 2 * MM_NW) {  // wmat_rows's turns, as in the engine
        const int sb2 = sb + MM_NW;
        if (sb2 < nsb) load_to(fb, sb2);
        abl_superblock<FLAGS>(fa, acc[0][0], X, ldx, sb, nrows, gid, t, ind, ind8);
        if (STAMP && t_first == 0) t_first = global_ns_after(__float_as_uint(acc[0][0][0]));
        if (sb2 >= nsb) break;
        if (sb2 + MM_NW < nsb) load_to(fa, sb2 + MM_NW);
        abl_superblock<FLAGS>(fb, acc[0][0], X, ldx, sb2, nrows, gid, t, ind, ind8);
    }
    reduce_store<1, 1>(red, acc, rows, Y, ldy, row0, 0, nrows, R, MM_STORE);
    if (STAMP) {
        __syncthreads();  // every warp's share summed and stored
        if (threadIdx.x == 0) store_stamps(stamps + blockIdx.y * STAMPS, t_entry, t_wait, t_first, global_ns());
    }
}

#define ABL_KERNEL(NAME, FLAGS) \
    PRODUCT_PROBE((32 * MM_NW, MM_MINB1), NAME, abl_rows<FLAGS>(p0, rows, cols, X, ldx, Y, ldy, R))
ABL_KERNEL(rows_abl_all, 0)  // nothing taken out: should time as rows1
ABL_KERNEL(rows_abl_nob, ABL_NO_B)
ABL_KERNEL(rows_abl_nodeq, ABL_NO_DEQ)
ABL_KERNEL(rows_abl_nomma, ABL_NO_MMA)
ABL_KERNEL(rows_abl_now, ABL_NO_W)
ABL_KERNEL(rows_abl_now_nob, ABL_NO_W | ABL_NO_B)
ABL_KERNEL(rows_abl_loads, ABL_NO_DEQ | ABL_NO_MMA)  // the loads and a short chain only
ABL_KERNEL(rows_abl_noprep, ABL_NO_PREP)
ABL_KERNEL(rows_abl_cheap, ABL_CHEAP_GET)
ABL_KERNEL(rows_abl_cheap_noprep, ABL_CHEAP_GET | ABL_NO_PREP)
ABL_KERNEL(rows_abl_split, ABL_CHEAP_GET | ABL_MIN_MMA)
ABL_KERNEL(rows_abl_split_noprep, ABL_CHEAP_GET | ABL_MIN_MMA | ABL_NO_PREP)
ABL_KERNEL(rows_abl_split_k8, ABL_CHEAP_GET | ABL_MIN_K8)
ABL_KERNEL(rows_abl_split_sums, ABL_CHEAP_GET | ABL_SUM_MMA)
ABL_KERNEL(rows_abl_split_s1688, ABL_CHEAP_GET | ABL_S1688)
// the same, stamped (--set anatomy): one more argument, this launch's stamps
#define ABL_STAMPED_KERNEL(NAME, FLAGS)                                                            \
    extern "C" __global__ void __launch_bounds__(32 * MM_NW, MM_MINB1)                            \
        NAME(const u8* p0, int rows, int cols, const void* X, int ldx, float* Y, int ldy, int R,  \
             unsigned long long* stamps) {                                                        \
        abl_rows<FLAGS, true>(p0, rows, cols, X, ldx, Y, ldy, R, stamps);                         \
    }
ABL_STAMPED_KERNEL(rows_abl_all_stamped, 0)
ABL_STAMPED_KERNEL(rows_abl_loads_stamped, ABL_NO_DEQ | ABL_NO_MMA)

// ---- Tail split (--set tail): a timing bound for shorter chains in a product's last partial wave.
// v54b's stamps put a wide product's whole excess over its bytes' floor in its tail: the last
// partial wave of CTAs, each a chain of nsb / 4 super-blocks per warp. rows_abl_tail* run a
// product's last tiles (tile0 + grid y / SPLIT) with NWT x SPLIT warps splitting K, a chain
// NWT x SPLIT / 4 times shorter; the tiles before them run rows_abl_all (tma_probe.py). Their
// sums are not the engine's (NWT x SPLIT classes), so they time, they do not compute the
// product; an engine form would need the bulk's warps to keep as many classes (two
// accumulators each at 8) for the same bits.
// Measured (bench/NOTES.md v54d-f, H100): 0.03-0.21 ms off ~6.0 ms over the 432 Q4_K products.
// The dependency: it is scheduled only once every CTA of the bulk launch before it has passed
// its wait (so the product's inputs are complete) and it waits for that launch only at its end,
// so it overlaps the bulk's last wave and the next product still sees the whole product done.
template <int NWT, int SPLIT>
OJ_DEV void tail_rows(const u8* __restrict__ p0, int rows, int cols, const void* __restrict__ X,
                      int ldx, float* __restrict__ Y, int ldy, int R, int tile0) {
    // SPLIT > 1: SPLIT CTAs per tile, CTA part p taking classes p NWT .. p NWT + NWT - 1 of
    // NWT SPLIT, so a CTA as small as the bulk's takes a chain SPLIT times shorter; the parts
    // add into Y (atomically: a timing bound, not a product)
    __shared__ float red[NWT * 4 * 32];
    oj_grid_release();  // the next product may be scheduled; it waits for this launch's end
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int tile = tile0 + (int)blockIdx.y / SPLIT, part = (int)blockIdx.y % SPLIT;
    const int row0 = tile * 16, nsb = cols >> 8, nrows = min(1, R);
    const int first = part * NWT + warp;  // this warp's class
    constexpr int STEP = NWT * SPLIT;     // classes
    const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    auto load_to = [&](FragQ4K (&f)[2], int sb) {
#pragma unroll
        for (int h = 0; h < 2; ++h) abl_load<0>(f[h], W, min(row0 + 8 * h + gid, rows - 1), sb, t);
    };
    uint4 ind[4] = {};
    uint2 ind8[4] = {};
    FragQ4K fa[2], fb[2];
    if (first < nsb) load_to(fa, first);
    for (int sb = first; sb < nsb; sb += 2 * STEP) {  // wmat_rows's turns over the classes
        const int sb2 = sb + STEP;
        if (sb2 < nsb) load_to(fb, sb2);
        abl_superblock<0>(fa, acc, X, ldx, sb, nrows, gid, t, ind, ind8);
        if (sb2 >= nsb) break;
        if (sb2 + STEP < nsb) load_to(fa, sb2 + STEP);
        abl_superblock<0>(fb, acc, X, ldx, sb2, nrows, gid, t, ind, ind8);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) red[(warp * 4 + i) * 32 + lane] = acc[i];
    __syncthreads();
    if (threadIdx.x < 4 * 32) {  // this CTA's classes summed in order, stored as reduce_store does
        const int i = threadIdx.x >> 5, ln = threadIdx.x & 31;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < NWT; ++w) sum += red[(w * 4 + i) * 32 + ln];
        const int out_row = row0 + (ln >> 2) + 8 * (i >> 1), r = 2 * (ln & 3) + (i & 1);
        if (out_row < rows && r < nrows) {
            if (SPLIT > 1) atomicAdd(Y + (size_t)r * ldy + out_row, sum);
            else Y[(size_t)r * ldy + out_row] = sum;
        }
    }
    oj_grid_wait();  // the bulk launch has ended: this launch's end means the product's
}

#define TAIL_KERNEL(NAME, NWT, SPLIT, MINB)                                                        \
    extern "C" __global__ void __launch_bounds__(32 * NWT, MINB)                                  \
        NAME(const u8* p0, int rows, int cols, const void* X, int ldx, float* Y, int ldy, int R,  \
             int tile0) {                                                                         \
        tail_rows<NWT, SPLIT>(p0, rows, cols, X, ldx, Y, ldy, R, tile0);                          \
    }
TAIL_KERNEL(rows_abl_tail8, 8, 1, 1)
TAIL_KERNEL(rows_abl_tail16, 16, 1, 1)
TAIL_KERNEL(rows_abl_tail4s2, 4, 2, MM_MINB1)  // bulk-sized CTAs, two per tile
TAIL_KERNEL(rows_abl_tail4s4, 4, 4, MM_MINB1)  // four per tile

// ---- Equal shares (--set shares): the one-row Q4_K product on a persistent grid whose warps take
// equal runs of the product's (tile, super-block) sequence, so every warp ends within one
// super-block of the others (v54b: the engine's grid of one CTA per tile loses its tail, the
// spread of its CTAs' ends, ~one CTA's time). Each super-block's sum starts from zero and is kept
// in `part` (16 floats: its tile's rows, one activation row); a warp ending its run inside a
// tile adds its count of super-blocks to the tile's counter, and the warp that completes the
// tile adds the tile's super-blocks in order. A new sum order (per super-block, then in K
// order): its bits are not the engine's, and the gemm would have to share it.
//   part: f32 [tiles * nsb][16]; count: u32 [tiles], zero (each completing warp zeroes its own)
// Measured (bench/NOTES.md v54g-h, H100): its first two forms (one loop over the whole run, the
// count inside it; with and without a division per super-block) were 22 % and 14 % slower than
// rows_abl_all over the 432 Q4_K products, and 30-40 % slower on one 1 GB matrix, where no tail
// is left to win. This third form (the engine's loop inside each tile; v55a, H200): 17 % slower
// over the 432 products, 28 % on a 1 GB matrix.
extern "C" __global__ void __launch_bounds__(32 * MM_NW, MM_MINB1)
    rows_shares(const u8* p0, int rows, int cols, const void* X, int ldx, float* Y, int ldy, int R,
                float* part, unsigned* count) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int nsb = cols >> 8, nrows = min(1, R);
    const long tiles = (rows + 15) / 16, F = tiles * nsb, warps = (long)gridDim.x * MM_NW;
    const long gw = (long)blockIdx.x * MM_NW + warp, f0 = gw * F / warps, f1 = (gw + 1) * F / warps;
    const int n = (int)(f1 - f0);  // this warp's run
    const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};
    // (tile, super-block) positions advance one at a time: no division per super-block (v30b: a
    // division and a remainder on the path to each load's address cost 17 %)
    int lt = (int)(f0 / nsb), ls = (int)(f0 % nsb);  // the next load's
    int rt = lt, rs = ls;                              // the next sum's
    auto load_next = [&](FragQ4K (&f)[2]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) abl_load<0>(f[h], W, min(lt * 16 + 8 * h + gid, rows - 1), ls, t);
        if (++ls == nsb) ls = 0, ++lt;
    };
    uint4 ind[4] = {};
    uint2 ind8[4] = {};
    // the run tile by tile: inside a tile the engine's loop (two buffers taking turns, each
    // super-block's sum stored), and between tiles the count; the next tile's first super-block
    // is asked for before the count, so the loads do not stop there
    auto sum_store = [&](FragQ4K (&f)[2], int sb, int tile) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        abl_superblock<0>(f, acc, X, ldx, sb, nrows, gid, t, ind, ind8);
        if (t == 0) {  // activation row 0: rows gid and gid + 8 of the tile
            float* mine = part + ((long)tile * nsb + sb) * 16;
            mine[gid] = acc[0];
            mine[8 + gid] = acc[2];
        }
    };
    FragQ4K fa[2], fb[2];
    if (n > 0) load_next(fa);
    oj_grid_dep();
    int left = n;
    while (left > 0) {
        const int tile = rt, s0 = rs, m = min(left, nsb - rs);  // this tile's part of the run
        for (int i = 0; i < m; i += 2) {
            if (i + 1 < m) load_next(fb);
            else if (left > m) load_next(fb);  // the next tile's first, ahead of the count
            sum_store(fa, s0 + i, tile);
            if (i + 1 >= m) break;
            if (i + 2 < m || left > m) load_next(fa);
            sum_store(fb, s0 + i + 1, tile);
        }
        __syncwarp();
        __threadfence();  // the sums before the count
        unsigned done = 0;
        if (lane == 0) done = atomicAdd(count + tile, (unsigned)m) + (unsigned)m;
        done = __shfl_sync(0xFFFFFFFFu, done, 0);
        if (done == (unsigned)nsb) {  // every super-block of the tile is in: add them in order
            __threadfence();
            if (lane < 16 && tile * 16 + lane < rows) {
                float sum = 0.0f;
                for (int k = 0; k < nsb; ++k) sum += __ldcg(part + ((long)tile * nsb + k) * 16 + lane);
                Y[tile * 16 + lane] = sum;
            }
            if (lane == 0) count[tile] = 0;  // for the next launch
        }
        // the next tile's first super-block is in fb if m was odd, else in fa
        if (m & 1) {
#pragma unroll
            for (int h = 0; h < 2; ++h) fa[h] = fb[h];
        }
        left -= m;
        rt = tile + 1;
        rs = 0;
    }
}

// ---- Launch boundaries (--set launch): the weight loads alone, without the engine's tiles. Each
// CTA streams an equal contiguous share of the matrix's bytes (gridDim.x CTAs, whatever the
// matrix's rows), LU 16-byte loads per thread in flight, their XOR kept alive by a store that
// never happens. DEP: 0 releases the next kernel at once and never waits (no dependency between
// consecutive products: the streaming bound of one launch per product); 1 loads its first round,
// then waits and releases (oj_grid_dep, as the engine's products); 2 releases, loads its first
// round and waits (oj_grid_dep_early, as the small kernels between products).
// The loads-alone kernels' shared parts: the matrix's 16-byte words, a CTA's equal share of
// them, and one round of LU loads per thread (i0, i0 + step, ...; zeros past `end`) and its XOR.
OJ_DEV long q4k_words(int rows, int cols) { return (long)rows * (cols >> 8) * (144 / 16); }

OJ_DEV void equal_share(long n, long& begin, long& end) {
    const long share = (n + gridDim.x - 1) / gridDim.x;
    begin = (long)blockIdx.x * share;
    end = min(n, begin + share);
}

template <int LU>
OJ_DEV void load_round(const uint4* __restrict__ p, long i0, long step, long end, uint4 (&v)[LU]) {
#pragma unroll
    for (int u = 0; u < LU; ++u) {
        const long i = i0 + (long)u * step;
        v[u] = i < end ? p[i] : make_uint4(0u, 0u, 0u, 0u);
    }
}

template <int LU>
OJ_DEV u32 xor_round(const uint4 (&v)[LU]) {
    u32 x = 0;
#pragma unroll
    for (int u = 0; u < LU; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    return x;
}

// STAMP (--set anatomy): the CTA stamps the global timer as the anatomy's kernels do (below),
// held in registers and stored at the end, so the loads stay ahead of the wait (a store of a
// stamp after the wait let ptxas put the wait before the first round's loads)
template <int DEP, bool STAMP = false>
OJ_DEV void flat_loads(const u8* __restrict__ p0, int rows, int cols, float* __restrict__ Y, int R,
                       unsigned long long* stamps = nullptr) {
    constexpr int LU = 8;
    unsigned long long t_entry = 0, t_wait = 0, t_first = 0;
    if constexpr (STAMP) t_entry = t_wait = global_ns();
    const long n = q4k_words(rows, cols);
    long begin, end;
    equal_share(n, begin, end);
    const uint4* __restrict__ p = (const uint4*)p0;
    if (DEP != 1) oj_grid_release();
    u32 x = 0;
    bool waited = DEP == 0;
    for (long i0 = begin + threadIdx.x; i0 < end; i0 += LU * (long)blockDim.x) {
        uint4 v[LU];
        load_round<LU>(p, i0, blockDim.x, end, v);
        if (!waited) {
            if (DEP == 1) oj_grid_dep();
            else oj_grid_wait();
            waited = true;
            if constexpr (STAMP) t_wait = global_ns();
        }
        x ^= xor_round<LU>(v);
        if constexpr (STAMP) {
            if (t_first == 0) t_first = global_ns_after(x);
        }
    }
    if (!waited) {  // a CTA with no share still keeps the kernel's order
        if (DEP == 1) oj_grid_dep();
        else oj_grid_wait();
        if constexpr (STAMP) t_wait = global_ns();
    }
    if constexpr (STAMP) {
        __syncthreads();  // every thread's rounds consumed
        if (threadIdx.x == 0) store_stamps(stamps + blockIdx.x * STAMPS, t_entry, t_wait, t_first, global_ns_after(x));
    }
    if (x == 0x9E3779B9u && R < 0) Y[0] = (float)x;  // never (R > 0): keeps the loads
}

#define FLAT_KERNEL(NAME, DEP) PRODUCT_PROBE((32 * MM_NW), NAME, flat_loads<DEP>(p0, rows, cols, Y, R))
FLAT_KERNEL(flat_nodep, 0)
FLAT_KERNEL(flat, 1)
FLAT_KERNEL(flat_early, 2)

// ---- Staged (--set stage): `flat`'s order (DEP 1: the wait, then the release), but before its
// wait each CTA asks the first STAGE_KB KiB of its share into shared memory (cp.async, sm_80+)
// instead of one register round (16 KiB per CTA). Why: v34a had the loads alone at 1.26x the floor
// with that order and 1.02x without it. If the loss is the predecessor's tail, when the waiting
// CTAs have nothing more in flight, then more bytes asked before the wait should take it back,
// as long as two launches' CTAs still fit an SM together (4 CTAs per SM: 24 KiB each fits, 32
// does not; 3 per SM: 32; 2 per SM: 48). A fused kernel could hold a later product's weights the
// same way while it waits.
// Measured (bench/NOTES.md v34g-h): slower than `flat`, at every size and grid: over the 27B's
// Q4_K matrices 1.38-1.50x the floor against `flat`'s 1.25-1.26x, and 1.39-1.48x with 16 KiB
// staged, the bytes `flat` holds in registers. More bytes before the wait do not take the loss back.
template <int STAGE_KB>
OJ_DEV void flat_staged(const u8* __restrict__ p0, int rows, int cols, float* __restrict__ Y, int R) {
    constexpr int LU = 8, WORDS = STAGE_KB * 64;  // 16-byte words in the stage
    __shared__ __align__(16) uint4 stage[WORDS];
    const long n = q4k_words(rows, cols);
    long begin, end;
    equal_share(n, begin, end);
    const long staged = min(end, begin + (long)WORDS);
    const uint4* __restrict__ p = (const uint4*)p0;
    // each thread reads back only the words it asked for, so no block barrier is needed
    for (long i = begin + threadIdx.x; i < staged; i += blockDim.x)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(stage + (i - begin))),
                     "l"(p + i)
                     : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
    oj_grid_dep();
    u32 x = 0;
    bool read = false;  // the stage is read after the first round past it is asked for (v34g
                        // read it first, which held back the loads after the wait)
    for (long i0 = staged + threadIdx.x; i0 < end || !read; i0 += LU * (long)blockDim.x) {
        uint4 v[LU];
        load_round<LU>(p, i0, blockDim.x, end, v);
        if (!read) {
            asm volatile("cp.async.wait_all;" ::: "memory");
            for (long i = begin + threadIdx.x; i < staged; i += blockDim.x) {
                const uint4 w = stage[i - begin];
                x ^= w.x ^ w.y ^ w.z ^ w.w;
            }
            read = true;
        }
        x ^= xor_round<LU>(v);
    }
    if (x == 0x9E3779B9u && R < 0) Y[0] = (float)x;  // never (R > 0): keeps the loads
}

#define STAGED_KERNEL(KB) PRODUCT_PROBE((32 * MM_NW), flat_stage##KB, flat_staged<KB>(p0, rows, cols, Y, R))
STAGED_KERNEL(16)
STAGED_KERNEL(24)
STAGED_KERNEL(32)
STAGED_KERNEL(48)

// ---- Work taken, not dealt (--set steal): the same loads, but each CTA takes chunks of 16 KiB
// (LU rounds of its 128 threads) from a counter per product until none is left, so every CTA of
// a launch ends within one chunk of the others. Why: v34g-h asked more bytes before the wait and
// lost; what is left of the boundary's cost (1.26x against 1.02x unordered) may be the spread of
// the CTAs' ends, during which the successor waits. DEP as `flat_loads`: 0 no order, 1 the
// engine products' (wait, then release). `counter`: two ints per product (next chunk, CTAs
// done); the last CTA to end zeroes both, so a graph replays with no reset node.
// Measured (bench/NOTES.md v34i): slower than `flat`'s equal shares, ordered (1.40x the floor
// against 1.26x) or not (1.17x against 1.02x): each take costs a counter round trip and two
// block barriers, and at ~50 KiB per CTA per product a CTA takes only about three chunks.
template <int DEP>
OJ_DEV void steal_loads(const u8* __restrict__ p0, int rows, int cols, int* __restrict__ counter,
                        float* __restrict__ Y, int R) {
    constexpr int LU = 8;
    __shared__ long taken;
    const long n = q4k_words(rows, cols);
    const long chunk = LU * (long)blockDim.x, chunks = (n + chunk - 1) / chunk;
    const uint4* __restrict__ p = (const uint4*)p0;
    if (DEP == 0) oj_grid_release();
    u32 x = 0;
    bool waited = DEP == 0;
    for (;;) {
        if (threadIdx.x == 0) taken = atomicAdd(counter, 1);
        __syncthreads();
        const long c = taken;
        __syncthreads();  // `taken` is rewritten only after every thread has read it
        if (c >= chunks) break;
        uint4 v[LU];
        load_round<LU>(p, c * chunk + threadIdx.x, blockDim.x, n, v);
        if (!waited) {
            oj_grid_dep();
            waited = true;
        }
        x ^= xor_round<LU>(v);
    }
    if (!waited) oj_grid_dep();  // a CTA that took nothing still keeps the kernel's order
    if (threadIdx.x == 0 && atomicAdd(counter + 1, 1) == (int)gridDim.x - 1) {
        counter[0] = 0;  // every CTA has ended its takes: none reads the counter again
        counter[1] = 0;
    }
    if (x == 0x9E3779B9u && R < 0) Y[0] = (float)x;  // never (R > 0): keeps the loads
}

// X carries the counters and ldx the product's pair among them
#define STEAL_KERNEL(NAME, DEP) \
    PRODUCT_PROBE((32 * MM_NW), NAME, steal_loads<DEP>(p0, rows, cols, (int*)X + 2 * ldx, Y, R))
STEAL_KERNEL(steal_nodep, 0)
STEAL_KERNEL(steal, 1)

// ---- Anatomy (--set anatomy): `flat`'s loads and order, each CTA stamping the global timer
// (ns) at four points, so the launch boundary's cost can be split into its parts: the spread of
// the CTAs' ends (the tail), the time from the last end to the successor's waits returning
// (the dependency itself), and the successor's first round. Why: the loads alone lose a quarter
// of the floor to the boundaries (v34a: flat p4 1.26x ordered, 1.02x unordered), every way of
// keeping the dependency measured since costs as much (v34g-v35e), and no probe has yet said
// which part of the boundary the time goes to. stamps: u64 [CTA][STAMPS] of this launch = entry,
// the wait returned, the first round's data consumed by thread 0, every thread's loads consumed
// (after a block barrier), the SM. DEP as `flat_loads`, which takes the stamps itself.
// Measured (bench/NOTES.md v54a-b, H100): the dependency is ~0.42 us a boundary; the spread of
// the CTAs' ends is the cost (1.6 ms of the engine's one-row kernel over the 432 Q4_K products,
// 0.36 ms of `flat`'s). On the H200 (v55b) the same kernel's body (first wait -> median end)
// takes 1.69x the floor against the H100's 1.23x: there the loop, not the boundary, loses most.

// X carries this launch's stamps
#define STAMPED_KERNEL(NAME, DEP) \
    PRODUCT_PROBE((32 * MM_NW), NAME, flat_loads<DEP, true>(p0, rows, cols, Y, R, (unsigned long long*)X))
STAMPED_KERNEL(flat_stamped, 1)
STAMPED_KERNEL(flat_stamped_nodep, 0)

// The global timer's step: one thread reads it `n` times; out = [smallest nonzero step, number
// of changes, first reading, last reading] (its resolution decides what the stamps can tell).
extern "C" __global__ void timer_step(unsigned long long* out, int n) {
    unsigned long long prev = global_ns(), first = prev, step = ~0ull, changes = 0;
    for (int i = 0; i < n; ++i) {
        const unsigned long long t = global_ns();
        if (t != prev) {
            step = t - prev < step ? t - prev : step;
            ++changes;
            prev = t;
        }
    }
    out[0] = step;
    out[1] = changes;
    out[2] = first;
    out[3] = prev;
}

// ---- One persistent walk (--set walk): every Q4_K product's loads in ONE launch, each CTA
// streaming an equal share of each matrix in turn, a product's dependency on the one before it
// kept by a counter per product instead of a launch boundary or a grid barrier. Why: v34a-j
// put the boundary's loss at ~1.5 us (1.26x the floor ordered, 1.02x unordered) and the chain
// probe's grid barrier at 2.1 us (v25b). Here a CTA counts itself done with a product as soon
// as its share is (`walk_arrive`), and waits for all CTAs to be done with the previous product
// only after it has asked for its first round of this one (MODE 1), so the wait overlaps its
// own loads and no CTA waits for a launch, a grid's completion or a memory flush. MODE 0: no
// dependency at all (the walk's own streaming rate); 2: the wait before any load of the
// product (a plain barrier split in two); 3: as 1, but the CTAs arrive in groups of
// WALK_GROUP (a counter per group, the group's last CTA counting the group on the product's
// counter), so the counter that every CTA waits on takes 1/WALK_GROUP of the atomics (v25b: a
// barrier cost 2.1 us at 528 CTAs, 1.36 at 132). The grid must be resident all at once (tma_probe.py
// sizes it per SM); a wait that runs out sets *failed and no wait spins after it.
// Measured (bench/NOTES.md v35a): walk_free 1.04x the floor at 8 CTAs per SM, walk_split 1.34x
// (1.24x at 4 per SM, where the walk alone streams at 1.23x), walk_tree 1.32x: the dependency
// costs as much in one launch as across launches (flat p4 1.28x).
// PAUSE: 100 ns between polls (the ring's MODE 2)
template <bool PAUSE = false>
OJ_DEV void walk_wait(const unsigned* done, unsigned target, int* failed) {
    if (threadIdx.x == 0) {
        unsigned seen;
        int spins = 0;
        for (;;) {
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(done) : "memory");
            if (seen >= target || ++spins >= (PAUSE ? 1 << 20 : 1 << 22) || *(volatile int*)failed) break;
            if (PAUSE) __nanosleep(100);
        }
        if (seen < target) atomicExch(failed, 1);
    }
    __syncthreads();
}

// every thread of the CTA is done with the product (a real one would have written its
// outputs): one release-ordered count on `done`, or with `group` (MODE 3) on the CTA's group
// counter, the group's last CTA then counting the group on `done`
constexpr int WALK_GROUP = 8;
OJ_DEV void walk_arrive(unsigned* done, unsigned* group) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (!group) {
            atomicAdd(done, 1u);
            return;
        }
        const int g = blockIdx.x / WALK_GROUP;
        const unsigned size = (unsigned)min(WALK_GROUP, (int)gridDim.x - g * WALK_GROUP);
        if (atomicAdd(group + g, 1u) == size - 1) {
            __threadfence();  // the group's other arrivals before the group's count
            atomicAdd(done, 1u);
        }
    }
}

// mats: n_mats triples (weight pointer, rows, cols); done: n_mats counters, then (MODE 3)
// n_mats rows of ceil(gridDim.x / WALK_GROUP) group counters, all zero at launch
template <int MODE>
OJ_DEV void walk_loads(const long long* __restrict__ mats, int n_mats, unsigned* done, int* failed,
                       float* __restrict__ Y) {
    constexpr int LU = 8;
    oj_grid_wait();  // the counters' memset before it is done (whatever edge the graph gives it)
    const unsigned groups = (gridDim.x + WALK_GROUP - 1) / WALK_GROUP;
    const unsigned target = MODE == 3 ? groups : gridDim.x;  // arrivals that end a product
    u32 x = 0;
    for (int m = 0; m < n_mats; ++m) {
        const uint4* __restrict__ p = (const uint4*)mats[3 * m];
        const long n = q4k_words((int)mats[3 * m + 1], (int)mats[3 * m + 2]);
        long begin, end;
        equal_share(n, begin, end);
        bool waited = MODE == 0 || m == 0;
        if (!waited && MODE == 2) {
            walk_wait(done + m - 1, target, failed);
            waited = true;
        }
        // the same trip count in every thread of the CTA: the wait inside is a block barrier
        for (long base = begin; base < end; base += LU * (long)blockDim.x) {
            uint4 v[LU];
            load_round<LU>(p, base + threadIdx.x, blockDim.x, end, v);
            if (!waited) {
                walk_wait(done + m - 1, target, failed);
                waited = true;
            }
            x ^= xor_round<LU>(v);
        }
        if (!waited) walk_wait(done + m - 1, target, failed);
        if (MODE != 0) walk_arrive(done + m, MODE == 3 ? done + n_mats + (size_t)m * groups : nullptr);
    }
    if (x == 0x9E3779B9u && n_mats < 0) Y[0] = (float)x;  // never: keeps the loads
}

#define WALK_KERNEL(NAME, MODE) WALK_PROBE(NAME, walk_loads<MODE>(mats, n_mats, done, failed, Y))
WALK_KERNEL(walk_free, 0)
WALK_KERNEL(walk_split, 1)
WALK_KERNEL(walk_barrier, 2)
WALK_KERNEL(walk_tree, 3)

// ---- A ring that runs ahead (--set ring): `walk`'s persistent launch and counters, but each CTA
// streams its shares of all the products, one after another, through a ring of NS rounds in
// shared memory (cp.async, sm_80+; a round: LU 16-byte words per thread, 8 KiB per CTA). The
// loads run NS - 1 rounds ahead of the reads whatever product they belong to; only the reads
// wait, for every CTA to be done with the previous product, before a product's first round
// (MODE 1; MODE 0: no dependency, the ring's own streaming rate). Why: v35a had the walk at
// 1.04x the floor without dependencies and 1.24-1.34x with them, when a CTA holds only one round
// (16 KiB) of the next product while it waits; here up to NS - 1 rounds (16-184 KiB) stay in
// flight during the wait, so the question is whether the dependency still costs once the bytes
// in flight need not stop at it. A fused step would hold a later product's weights the same way.
// Each thread reads back only the words it asked for, so no block barrier guards the ring.
// MODE 2: as 1, with each product's counter on its own 128-byte line (the CTAs ahead count on the
// next product's while the others poll this one's) and a pause between polls (fewer loads on the
// line the arrivals' atomics need).
// Measured (bench/NOTES.md v35c-e): the dependency costs as much with the ring (1.39-1.43x the
// floor with 24-96 KiB per CTA ahead) as without it (walk_split 1.34x at 8 CTAs per SM); without
// the dependency the ring streams at 1.06x. Neither the counters' own lines with paused polls
// (MODE 2: 1.39x) nor arrivals without a full fence (MODE 3: 1.33-1.36x) change that.
// MODE 3: as 1, but the arrival is one release-ordered add with no __threadfence() before it (a
// full fence may wait for the thread's own loads still in flight: the ring's rounds ahead)
OJ_DEV void walk_arrive_release(unsigned* done) {
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(done) : "memory");
}

template <int NS, int MODE>
OJ_DEV void ring_loads(const long long* __restrict__ mats, int n_mats, unsigned* done, int* failed,
                       float* __restrict__ Y) {
    constexpr int LU = 4;
    extern __shared__ __align__(16) uint4 ring[];  // [NS][LU][blockDim.x]
    oj_grid_wait();  // the counters' memset, as walk_loads
    const long rw = LU * (long)blockDim.x;  // words per round
    struct Cursor {
        int m;
        long k, rounds, begin, end;
        const uint4* p;
    };
    // round k of product m: words begin + k*rw .. of the CTA's share; every product has at least
    // one round per CTA (an empty one where the share is), so every CTA waits and arrives
    auto start = [&](Cursor& c, int m) {
        c.m = m;
        c.k = 0;
        if (m >= n_mats) return;
        c.p = (const uint4*)mats[3 * m];
        equal_share(q4k_words((int)mats[3 * m + 1], (int)mats[3 * m + 2]), c.begin, c.end);
        c.rounds = max(1L, (c.end - c.begin + rw - 1) / rw);
    };
    auto next = [&](Cursor& c) {
        if (++c.k == c.rounds) start(c, c.m + 1);
    };
    auto issue = [&](const Cursor& c, int slot) {
        if (c.m < n_mats) {
            const long b = c.begin + c.k * rw + threadIdx.x;
#pragma unroll
            for (int u = 0; u < LU; ++u) {
                const long i = b + (long)u * blockDim.x;
                if (i < c.end)
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                                     smem_addr(ring + ((size_t)slot * LU + u) * blockDim.x + threadIdx.x)),
                                 "l"(c.p + i)
                                 : "memory");
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");  // empty past the last: counts stay even
    };
    Cursor in, out;
    start(in, 0);
    start(out, 0);
    int in_slot = 0, out_slot = 0;
    for (int s = 0; s < NS - 1; ++s) {
        issue(in, in_slot);
        next(in);
        in_slot = in_slot + 1 == NS ? 0 : in_slot + 1;
    }
    u32 x = 0;
    while (out.m < n_mats) {
        issue(in, in_slot);  // into the slot read last round (by this thread only)
        next(in);
        in_slot = in_slot + 1 == NS ? 0 : in_slot + 1;
        asm volatile("cp.async.wait_group %0;" ::"n"(NS - 1) : "memory");  // `out`'s round is in
        if ((MODE == 1 || MODE == 3) && out.k == 0 && out.m > 0) walk_wait(done + out.m - 1, gridDim.x, failed);
        if (MODE == 2 && out.k == 0 && out.m > 0) walk_wait<true>(done + 32 * (out.m - 1), gridDim.x, failed);
        const long b = out.begin + out.k * rw + threadIdx.x;
#pragma unroll
        for (int u = 0; u < LU; ++u) {
            if (b + (long)u * blockDim.x < out.end) {
                const uint4 w = ring[((size_t)out_slot * LU + u) * blockDim.x + threadIdx.x];
                x ^= w.x ^ w.y ^ w.z ^ w.w;
            }
        }
        if ((MODE == 1 || MODE == 2) && out.k == out.rounds - 1)
            walk_arrive(done + (MODE == 2 ? 32 : 1) * out.m, nullptr);
        if (MODE == 3 && out.k == out.rounds - 1) walk_arrive_release(done + out.m);
        next(out);
        out_slot = out_slot + 1 == NS ? 0 : out_slot + 1;
    }
    if (x == 0x9E3779B9u && n_mats < 0) Y[0] = (float)x;  // never: keeps the loads
}

#define RING_KERNEL(NS, MODE, NAME) WALK_PROBE(NAME, ring_loads<NS, MODE>(mats, n_mats, done, failed, Y))
RING_KERNEL(3, 0, walk_ring3_free)
RING_KERNEL(3, 1, walk_ring3)
RING_KERNEL(6, 0, walk_ring6_free)
RING_KERNEL(6, 1, walk_ring6)
RING_KERNEL(12, 0, walk_ring12_free)
RING_KERNEL(12, 1, walk_ring12)
RING_KERNEL(12, 2, walk_ring12_paused)
RING_KERNEL(3, 2, walk_ring3_paused)
RING_KERNEL(12, 3, walk_ring12_release)
RING_KERNEL(3, 3, walk_ring3_release)
RING_KERNEL(1, 3, walk_ring1_release)  // no ring ahead: each round read as soon as it is asked
RING_KERNEL(24, 0, walk_ring24_free)
RING_KERNEL(24, 1, walk_ring24)

// ---- Integer products (--set int8): the one-row Q4_K product with the weights' codes as u8 and
// the activation row as two int8 parts, x ~= s * (hi + lo / 254) with s per super-block (the
// row's largest |x| in it / 127), on mma.m16n8k32 (u8 x s8 -> s32, sm_80+): a code word masked
// once gives four A bytes (high nibbles as 16q), a sub-block (32 k) is one mma whose B columns 0
// and 1 are hi and lo, its exact sums scaled by the sub-block's 6-bit scale in integer
// arithmetic, one float fold per super-block, the mins' term from the activations' sub-block
// sums (each lane two sub-blocks, summed over the lanes at the end). Why: v31a and v35b put the
// engine's one-row rate on its arithmetic (arithmetic alone 1.66x the floor, the loads alone
// 1.49x, both 2.1x); this is a loop of about half its instructions (sass_counts: 188-232 per
// super-block against 401), the question whether an integer design would take the arithmetic
// off the one-row step. Not the engine's bits (a different rounding: weights exact, activations
// to ~2^-15 of their super-block's largest).
// Measured (bench/NOTES.md v35f-g, the 27B's Q4_K matrices at one row): rows_i8 1.94x the floor
// (its mins' float term costs 0.66 ms), rows_i8m (the mins as an mma) 1.68x, as fast as no
// dequantization at all (1.73x), against the engine's 2.03x: -17 %.
// X: int8 hi [K], int8 lo [K], f32 s / 16 [K / 256] (from byte 2K), f32 sub-block sums of x
// [K / 32] (from byte 2K + 16 * ceil(K / 1024)), then the mins' B fragments (MIN 2) [K / 256][8][4]
// x 8 bytes. MIN: 1 the mins' term in float (each lane two sub-blocks), 2 as an integer mma, 0
// left out.
struct I8Blk {
    uint4 hdr;
    uint2 q[4];  // bytes 32j + 8t .. + 7 of the codes: elements 8t .. 8t + 7 of sub-blocks 2j, 2j + 1
};

OJ_DEV void i8_load(I8Blk& b, const WDesc& W, int row, int sb, int t) {
    const u8* blk = W.p0 + unit_index(W, row, sb) * 144;
    b.hdr = *(const uint4*)blk;
#pragma unroll
    for (int j = 0; j < 4; ++j) b.q[j] = *(const uint2*)(blk + 16 + 32 * j + 8 * t);
}

// the 6-bit scales (sc) and mins (mn) of a Q4_K header as bytes: [0] sub-blocks 0-3, [1] 4-7
OJ_DEV void i8_scales(const uint4& h, u32 (&sc)[2], u32 (&mn)[2]) {
    sc[0] = h.y & 0x3F3F3F3Fu;
    mn[0] = h.z & 0x3F3F3F3Fu;
    sc[1] = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
    mn[1] = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
}

// Sub-block s's A fragments with its scales on the A side (gemm_i8s, rows_i8m*s): scale = 8 sh + sl
// (sl, sh < 8), l = q sl and h = q sh for the true codes q < 16 (a packed word times a scalar: no
// byte carries), so sum(scale q x) = C_l + 8 C_h, summed over the super-block by the mma itself.
// sc0 / sc1: the scale words of the rows gid / gid + 8 (i8_scales).
OJ_DEV void i8_split_a(const I8Blk& b0, const I8Blk& b1, const u32 (&sc0)[2], const u32 (&sc1)[2], int s,
                       u32 (&l)[4], u32 (&h)[4]) {
    const int j = s >> 1, down = (s & 1) ? 4 : 0;  // odd sub-blocks: the high nibbles
    const u32 q[4] = {(b0.q[j].x >> down) & 0x0F0F0F0Fu, (b1.q[j].x >> down) & 0x0F0F0F0Fu,
                      (b0.q[j].y >> down) & 0x0F0F0F0Fu, (b1.q[j].y >> down) & 0x0F0F0F0Fu};
    const u32 s0 = __byte_perm(sc0[s >> 2], 0u, 0x4440u + (s & 3)), s1 = __byte_perm(sc1[s >> 2], 0u, 0x4440u + (s & 3));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 sv = (i & 1) ? s1 : s0;  // fragments 0, 2: row gid; 1, 3: row gid + 8
        l[i] = q[i] * (sv & 7u);
        h[i] = q[i] * (sv >> 3);
    }
}

template <int MIN>
OJ_DEV void i8_superblock(const I8Blk (&b)[2], const signed char* __restrict__ xi, const float* __restrict__ sx,
                          const float* __restrict__ xs, const uint2* __restrict__ xm, int K, int sb, int gid,
                          int t, float (&acc)[2], float (&mn)[2]) {
    u32 sc[2][2], mm[2][2];
    i8_scales(b[0].hdr, sc[0], mm[0]);
    i8_scales(b[1].hdr, sc[1], mm[1]);
    int e[2][2] = {{0, 0}, {0, 0}}, o[2][2] = {{0, 0}, {0, 0}};  // [row][hi, lo]: even / odd sub-blocks
    const signed char* xrow = xi + (gid == 1 ? K : 0) + sb * 256 + 8 * t;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        const int j = s >> 1;
        const u32 mask = (s & 1) ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
        const uint2 bv = gid < 2 ? *(const uint2*)(xrow + 32 * s) : make_uint2(0u, 0u);
        int c[4];
        mma_16832_u8s8(c, b[0].q[j].x & mask, b[1].q[j].x & mask, b[0].q[j].y & mask, b[1].q[j].y & mask,
                 bv.x, bv.y);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int scale = (int)__byte_perm(sc[r][s >> 2], 0u, 0x4440u + (s & 3));
            int(&dst)[2] = (s & 1) ? o[r] : e[r];
            dst[0] += scale * c[2 * r];
            dst[1] += scale * c[2 * r + 1];
        }
    }
    const float sxv = sx[sb];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u32 d2 = b[r].hdr.x;
        const float d = h2f((u16)(d2 & 0xFFFFu));
        // high nibbles came as 16q: the even sub-blocks' sums times 16, and s / 16 in sx
        const float f = (float)(16 * e[r][0] + o[r][0]) + (float)(16 * e[r][1] + o[r][1]) * (1.0f / 254.0f);
        acc[r] = fmaf(d * sxv, f, acc[r]);
        if (MIN == 1) {
            const float dmin = h2f((u16)(d2 >> 16));
            const u32 w = mm[r][t >> 1] >> (16 * (t & 1));  // this lane's sub-blocks 2t, 2t + 1
            const float2 xv = *(const float2*)(xs + sb * 8 + 2 * t);
            mn[r] = fmaf(dmin, fmaf((float)(w & 0xFFu), xv.x, (float)((w >> 8) & 0xFFu) * xv.y), mn[r]);
        }
    }
    if (MIN == 2) {
        // the mins' term as one more mma: A = the mins, m_s in k slot 4s (the other slots' bytes
        // meet zeros), B = the activations' integer sub-block sums XH = sum hi, XL = sum lo as
        // 64a + b (columns 0, 1: XH's b, a; 2, 3: XL's), so lane t = 0 gets XH's term, t = 1
        // XL's (divided by 254 below), the others zeros; summed over the lanes at the end
        const int sh = 8 * t;
        const uint2 bv = xm[sb * 32 + gid * 4 + t];
        int c[4];
        mma_16832_u8s8(c, mm[0][0] >> sh, mm[1][0] >> sh, mm[0][1] >> sh, mm[1][1] >> sh, bv.x, bv.y);
        const float part = t == 1 ? sxv * (16.0f / 254.0f) : sxv * 16.0f;  // sx holds s / 16
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float dmin = h2f((u16)(b[r].hdr.x >> 16));
            mn[r] = fmaf(dmin * part, (float)(c[2 * r] + 64 * c[2 * r + 1]), mn[r]);
        }
    }
}

// wmat_rows's two buffers taking turns over a warp's super-blocks first, first + MM_NW, ...: the
// next super-block's blocks load (load_to(buffer, sb)) while this one's are used (use(buffer,
// sb)); the first load is asked before the kernel's dependency wait, as the engine's.
template <class Buf, class Load, class Use>
OJ_DEV void i8_turns(int first, int nsb, Load load_to, Use use) {
    Buf fa, fb;
    if (first < nsb) load_to(fa, first);
    oj_grid_dep();
    for (int sb = first; sb < nsb; sb += 2 * MM_NW) {
        const int sb2 = sb + MM_NW;
        if (sb2 < nsb) load_to(fb, sb2);
        use(fa, sb);
        if (sb2 >= nsb) break;
        if (sb2 + MM_NW < nsb) load_to(fa, sb2 + MM_NW);
        use(fb, sb2);
    }
}

// The engine's deep turns (wmat_rows DEPTH 2): three buffers, two super-blocks in flight while the
// third is used; the same super-blocks in the same order.
template <class Buf, class Load, class Use>
OJ_DEV void i8_turns3(int first, int nsb, Load load_to, Use use) {
    Buf fa, fb, fc;
    if (first < nsb) load_to(fa, first);
    if (first + MM_NW < nsb) load_to(fb, first + MM_NW);
    oj_grid_dep();
    for (int sb = first; sb < nsb; sb += 3 * MM_NW) {
        const int sb1 = sb + MM_NW, sb2 = sb + 2 * MM_NW;
        if (sb2 < nsb) load_to(fc, sb2);
        use(fa, sb);
        if (sb1 >= nsb) break;
        if (sb2 + MM_NW < nsb) load_to(fa, sb2 + MM_NW);
        use(fb, sb1);
        if (sb2 >= nsb) break;
        if (sb2 + 2 * MM_NW < nsb) load_to(fb, sb2 + 2 * MM_NW);
        use(fc, sb2);
    }
}

// DEPTH 1: two buffers taking turns (rows_i8*); 2: three (rows_i8m_d, 3 CTAs per SM as the
// engine's deep kernels). Measured (v36a): rows_i8m 4.26 ms, rows_i8m_d 4.22, rows_i8m_auto (the
// deep kernel where its grid fits one wave) 4.18 = 1.64x the floor, against the engine's 5.14
template <int MIN, int DEPTH = 1>
OJ_DEV void i8_rows(const u8* __restrict__ p0, int rows, int cols, const void* __restrict__ X,
                    float* __restrict__ Y) {
    __shared__ float red[MM_NW][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};
    const int row0 = blockIdx.y * 16, nsb = cols >> 8;
    const signed char* xi = (const signed char*)X;
    const float* sx = (const float*)((const u8*)X + 2 * (size_t)cols);
    const float* xs = sx + 4 * ((nsb + 3) / 4);
    const uint2* xm = (const uint2*)(xs + (cols >> 5));  // [sb][column][t]: the mins' B fragments
    float acc[2] = {0.0f, 0.0f}, mn[2] = {0.0f, 0.0f};
    auto load_to = [&](I8Blk (&b)[2], int sb) {
#pragma unroll
        for (int h = 0; h < 2; ++h) i8_load(b[h], W, min(row0 + 8 * h + gid, rows - 1), sb, t);
    };
    auto use = [&](I8Blk (&b)[2], int sb) { i8_superblock<MIN>(b, xi, sx, xs, xm, cols, sb, gid, t, acc, mn); };
    if constexpr (DEPTH == 2)
        i8_turns3<I8Blk[2]>(warp, nsb, load_to, use);
    else
        i8_turns<I8Blk[2]>(warp, nsb, load_to, use);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mn[r] += __shfl_xor_sync(0xFFFFFFFFu, mn[r], 1);
        mn[r] += __shfl_xor_sync(0xFFFFFFFFu, mn[r], 2);
        if (t == 0) red[warp][gid + 8 * r] = acc[r] - mn[r];  // B column 0: the row's sums
    }
    __syncthreads();
    if (threadIdx.x < 16 && row0 + (int)threadIdx.x < rows) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < MM_NW; ++w) v += red[w][threadIdx.x];
        Y[row0 + threadIdx.x] = v;
    }
}

#define I8_KERNEL(NAME, MIN) PRODUCT_PROBE((32 * MM_NW, MM_MINB1), NAME, i8_rows<MIN>(p0, rows, cols, X, Y))
I8_KERNEL(rows_i8, 1)
I8_KERNEL(rows_i8_nomin, 0)
I8_KERNEL(rows_i8m, 2)
PRODUCT_PROBE((32 * MM_NW, MM_MINB1D), rows_i8m_d, i8_rows<2, 2>(p0, rows, cols, X, Y))

// rows_i8m4: rows_i8m's product for R <= 4 activation rows in one launch: B columns 2r and 2r + 1
// are row r's hi and lo, so lane t holds row t's sums (every column useful), and the mins' term
// takes two mma per super-block (XH's columns, then XL's: row r's b and a in columns 2r, 2r + 1).
// X: R row buffers of int8_activations, `ldx` bytes apart. Each row's result is rows_i8m's for
// that row alone, bit for bit (the same integers, the same float folds in the same order: its XH
// and XL terms summed in their own accumulators, as rows_i8m's lanes 0 and 1): the batch
// invariance the engine's tests demand, checked by tma_probe.py.
// Measured (bench/NOTES.md v35h-i): the bits hold; but 4 rows take 5.40-5.47 ms against the
// engine's 5.29-5.31 (its activation fragments now load on every lane), and two m-tiles per warp
// (rows_i8m4x2: 168 registers, 3 CTAs per SM) 6.35 ms.
// MT m-tiles per warp share each B fragment (rows_i8m4x2: 2, half the activation bytes per weight
// byte; rows_i8m4: 1). b[m][h]: m-tile m's rows gid, gid + 8.
// s / 16 of super-block sb of activation row `row` of an int8 row buffer (int8_activations)
OJ_DEV float i8_row_scale(const u8* __restrict__ X, long ldx, int row, int K, int sb) {
    return ((const float*)(X + row * ldx + 2 * (size_t)K))[sb];
}
template <int MT, int NT, bool SPLIT>
OJ_DEV void i8_superblock4(const I8Blk (&b)[MT][2], const u8* __restrict__ X, long ldx, int R, int K,
                           int sb, int gid, int t, float (&acc)[MT][NT][2], float (&mh)[MT][NT][2],
                           float (&ml)[MT][NT][2]) {
    const int nsb = K >> 8;
    u32 sc[MT][2][2], mm[MT][2][2];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) i8_scales(b[m][h].hdr, sc[m][h], mm[m][h]);
    int e[MT][NT][2][2] = {}, o[MT][NT][2][2] = {};
    int cl[SPLIT ? MT : 1][SPLIT ? NT : 1][4] = {}, ch[SPLIT ? MT : 1][SPLIT ? NT : 1][4] = {};  // SPLIT: C_l, C_h
    // this lane's B column in n-tile n: row 4n + gid / 2, part gid & 1
    bool bval[NT];
    const signed char* xrow[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        const int brow = 4 * n + (gid >> 1);
        bval[n] = brow < R;
        xrow[n] = (const signed char*)(X + brow * ldx) + (gid & 1) * K + sb * 256 + 8 * t;  // read if bval
    }
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        if constexpr (SPLIT) {
            u32 l[MT][4], h[MT][4];
#pragma unroll
            for (int m = 0; m < MT; ++m) i8_split_a(b[m][0], b[m][1], sc[m][0], sc[m][1], s, l[m], h[m]);
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                const uint2 bv = bval[n] ? *(const uint2*)(xrow[n] + 32 * s) : make_uint2(0u, 0u);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    mma_16832_u8s8_acc(cl[m][n], l[m][0], l[m][1], l[m][2], l[m][3], bv.x, bv.y);
                    mma_16832_u8s8_acc(ch[m][n], h[m][0], h[m][1], h[m][2], h[m][3], bv.x, bv.y);
                }
            }
            continue;
        }
        const int j = s >> 1;
        const u32 mask = (s & 1) ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const uint2 bv = bval[n] ? *(const uint2*)(xrow[n] + 32 * s) : make_uint2(0u, 0u);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                int c[4];
                mma_16832_u8s8(c, b[m][0].q[j].x & mask, b[m][1].q[j].x & mask, b[m][0].q[j].y & mask,
                               b[m][1].q[j].y & mask, bv.x, bv.y);
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int scale = (int)__byte_perm(sc[m][r][s >> 2], 0u, 0x4440u + (s & 3));
                    int(&dst)[2] = (s & 1) ? o[m][n][r] : e[m][n][r];
                    dst[0] += scale * c[2 * r];
                    dst[1] += scale * c[2 * r + 1];
                }
            }
        }
    }
    const long xm_off = 2 * (long)K + 16 * ((nsb + 3) / 4) + 4 * (K >> 5);
    const int sh = 8 * t;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        // this lane's activation row 4n + t: its scale, and its rows_i8m fold
        const float sxv = i8_row_scale(X, ldx, min(4 * n + t, R - 1), K, sb);
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float d = h2f((u16)(b[m][r].hdr.x & 0xFFFFu));
                // 16 x the exact sums either way (high nibbles as 16q; SPLIT: 16 (C_l + 8 C_h))
                const int th = SPLIT ? 16 * (cl[m][n][2 * r] + 8 * ch[m][n][2 * r]) : 16 * e[m][n][r][0] + o[m][n][r][0];
                const int tl = SPLIT ? 16 * (cl[m][n][2 * r + 1] + 8 * ch[m][n][2 * r + 1])
                                     : 16 * e[m][n][r][1] + o[m][n][r][1];
                const float f = (float)th + (float)tl * (1.0f / 254.0f);
                acc[m][n][r] = fmaf(d * sxv, f, acc[m][n][r]);
            }
        // the mins: B column gid is row 4n + gid / 2's XH (then XL) as b (gid even) or a
        const int brow = 4 * n + (gid >> 1);
        const uint2* xm = (const uint2*)(X + brow * ldx + xm_off) + sb * 32 + t;  // read if bval[n]
#pragma unroll
        for (int part = 0; part < 2; ++part) {
            const uint2 bv = bval[n] ? xm[(2 * part + (gid & 1)) * 4] : make_uint2(0u, 0u);
            const float scale = part ? sxv * (16.0f / 254.0f) : sxv * 16.0f;
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                int c[4];
                mma_16832_u8s8(c, mm[m][0][0] >> sh, mm[m][1][0] >> sh, mm[m][0][1] >> sh, mm[m][1][1] >> sh,
                               bv.x, bv.y);
                float(&dst)[2] = part ? ml[m][n] : mh[m][n];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float dmin = h2f((u16)(b[m][r].hdr.x >> 16));
                    dst[r] = fmaf(dmin * scale, (float)(c[2 * r] + 64 * c[2 * r + 1]), dst[r]);
                }
            }
        }
    }
}

// The warps' partial sums (red[warp][activation row][weight row of the CTA]) added in warp order
// into Y's first R rows, after the block's barrier
template <int AROWS, int WROWS>
OJ_DEV void i8_warps_store(const float (&red)[MM_NW][AROWS][WROWS], int row0, int rows, int R, float* __restrict__ Y,
                           int ldy) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < AROWS * WROWS; idx += blockDim.x) {
        const int i = idx % WROWS, rr = idx / WROWS;
        if (rr < R && row0 + i < rows) {
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < MM_NW; ++w) v += red[w][rr][i];
            Y[(size_t)rr * ldy + row0 + i] = v;
        }
    }
}

// R <= 4 NT activation rows: NT n-tiles of 4 rows each (rows_i8m8: 2, rows_i8m12: 3)
template <int MT, int NT = 1, bool SPLIT = false>
OJ_DEV void i8_rows4(const u8* __restrict__ p0, int rows, int cols, const u8* __restrict__ X, long ldx,
                     float* __restrict__ Y, int ldy, int R) {
    __shared__ float red[MM_NW][4 * NT][16 * MT];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};
    const int row0 = blockIdx.y * 16 * MT, nsb = cols >> 8;
    float acc[MT][NT][2] = {}, mh[MT][NT][2] = {}, ml[MT][NT][2] = {};
    auto load_to = [&](I8Blk (&b)[MT][2], int sb) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) i8_load(b[m][h], W, min(row0 + 16 * m + 8 * h + gid, rows - 1), sb, t);
    };
    i8_turns<I8Blk[MT][2]>(warp, nsb, load_to, [&](I8Blk (&b)[MT][2], int sb) {
        i8_superblock4<MT, NT, SPLIT>(b, X, ldx, R, cols, sb, gid, t, acc, mh, ml);
    });
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                red[warp][4 * n + t][16 * m + gid + 8 * r] = acc[m][n][r] - (mh[m][n][r] + ml[m][n][r]);
    i8_warps_store(red, row0, rows, R, Y, ldy);
}

PRODUCT_PROBE((32 * MM_NW, MM_MINB1), rows_i8m4, i8_rows4<1>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
// two m-tiles per warp (32 weight rows per CTA): each B fragment serves both
PRODUCT_PROBE((32 * MM_NW, 3), rows_i8m4x2, i8_rows4<2>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
// 8 and 12 rows: two and three n-tiles per warp, each B fragment loaded once per sub-block.
// Measured (v36d-e, the 27B's Q4_K matrices): 8 rows 6.62-6.64 ms against the engine's
// 5.48-5.53, 12 rows 10.78-10.85 against 6.53-6.54 (rows_i8m12: 168 registers, 16 bytes spilled)
PRODUCT_PROBE((32 * MM_NW, 3), rows_i8m8, i8_rows4<1, 2>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
PRODUCT_PROBE((32 * MM_NW, 3), rows_i8m12, i8_rows4<1, 3>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
// the same with the scales on the A side (i8_split_a): twice the mma, no per-element scaling.
// Measured (v36e): slower at every count: 4 / 8 / 12 rows 6.13 / 7.67 / 11.17 ms
PRODUCT_PROBE((32 * MM_NW, MM_MINB1), rows_i8m4s, i8_rows4<1, 1, true>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
PRODUCT_PROBE((32 * MM_NW, 3), rows_i8m8s, i8_rows4<1, 2, true>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
PRODUCT_PROBE((32 * MM_NW, 3), rows_i8m12s, i8_rows4<1, 3, true>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))

// rows_i8f4 / 8 / 12: rows_i8m4 / 8 / 12's products and bits (the same integers, the same float
// folds in the same order) with the activations' B fragments stored in the order the lanes read
// them. rows_i8m* gather each B load from 8 pieces of 8 bytes (4 rows x 2 planes, 32 bytes a
// quad of lanes), 8 L1 wavefronts a load: 192 a super-block at 12 rows, more than its ~400
// instructions leave room for (the likely cause of v36d's 65 %). Here a warp's B load is 512
// contiguous bytes, two sub-blocks at once (4 wavefronts), and missing rows are zeros, so no
// bounds test. The fragment block F follows the R row buffers (X + R ldx): per quad of rows q
// (rows 4q .. 4q + 3) and super-block sb, I8F_QUAD_SB bytes: for each sub-block pair p (0-3),
// 32 lanes x 16 bytes (lane 4 gid + t: row 4q + gid / 2, plane hi or lo by gid & 1, bytes
// 8t .. 8t + 7 of sub-blocks 2p, 2p + 1), then the mins' fragments, 32 lanes x 16 bytes (parts
// 0, 1: rows_i8m4's xm[(2 part + (gid & 1)) * 4]). NT quads are read: R > 4 (NT - 1).
// Measured (bench/NOTES.md v46a-c, an H100, the 27B's Q4_K matrices): the bits hold; 4 / 8 / 12 /
// 16 / 20 rows 5.09 / 5.20 / 6.87 / 9.10 / 10.56 ms against the engine's 6.11 / 6.39 / 7.18 / 9.80
// / 11.08 (rows_i8m4 / 8 / 12: 5.80 / 6.89 / 10.86).
constexpr int I8F_QUAD_SB = 5 * 512;

template <int NT>
OJ_DEV void i8_superblock4f(const I8Blk (&b)[2], const u8* __restrict__ X, long ldx, int R, int K, int sb,
                            int lane, int gid, int t, float (&acc)[NT][2], float (&mh)[NT][2],
                            float (&ml)[NT][2]) {
    const int nsb = K >> 8;
    u32 sc[2][2], mm[2][2];
    i8_scales(b[0].hdr, sc[0], mm[0]);
    i8_scales(b[1].hdr, sc[1], mm[1]);
    // 16 x the exact sums: the low nibbles' sums (even sub-blocks) times 16 scale, the high
    // nibbles' (odd, already 16q) times scale: rows_i8m*'s 16 e + o as one accumulator
    int th[NT][2][2] = {};
    const uint4* fr[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n)
        fr[n] = (const uint4*)(X + (size_t)R * ldx + ((size_t)n * nsb + sb) * I8F_QUAD_SB) + lane;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        uint4 bv[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) bv[n] = fr[n][32 * p];
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
            const int s = 2 * p + odd;
            const u32 mask = odd ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                int c[4];
                mma_16832_u8s8(c, b[0].q[p].x & mask, b[1].q[p].x & mask, b[0].q[p].y & mask, b[1].q[p].y & mask,
                               odd ? bv[n].z : bv[n].x, odd ? bv[n].w : bv[n].y);
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int scale = (int)__byte_perm(sc[r][s >> 2], 0u, 0x4440u + (s & 3)) << (odd ? 0 : 4);
                    th[n][r][0] += scale * c[2 * r];
                    th[n][r][1] += scale * c[2 * r + 1];
                }
            }
        }
    }
    const int sh = 8 * t;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        const float sxv = i8_row_scale(X, ldx, min(4 * n + t, R - 1), K, sb);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float d = h2f((u16)(b[r].hdr.x & 0xFFFFu));
            const float f = (float)th[n][r][0] + (float)th[n][r][1] * (1.0f / 254.0f);
            acc[n][r] = fmaf(d * sxv, f, acc[n][r]);
        }
        const uint4 mv = fr[n][32 * 4];
#pragma unroll
        for (int part = 0; part < 2; ++part) {
            const float scale = part ? sxv * (16.0f / 254.0f) : sxv * 16.0f;
            int c[4];
            mma_16832_u8s8(c, mm[0][0] >> sh, mm[1][0] >> sh, mm[0][1] >> sh, mm[1][1] >> sh, part ? mv.z : mv.x,
                           part ? mv.w : mv.y);
            float(&dst)[2] = part ? ml[n] : mh[n];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float dmin = h2f((u16)(b[r].hdr.x >> 16));
                dst[r] = fmaf(dmin * scale, (float)(c[2 * r] + 64 * c[2 * r + 1]), dst[r]);
            }
        }
    }
}

template <int NT>
OJ_DEV void i8_rows4f(const u8* __restrict__ p0, int rows, int cols, const u8* __restrict__ X, long ldx,
                      float* __restrict__ Y, int ldy, int R) {
    __shared__ float red[MM_NW][4 * NT][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};
    const int row0 = blockIdx.y * 16, nsb = cols >> 8;
    float acc[NT][2] = {}, mh[NT][2] = {}, ml[NT][2] = {};
    auto load_to = [&](I8Blk (&b)[2], int sb) {
#pragma unroll
        for (int h = 0; h < 2; ++h) i8_load(b[h], W, min(row0 + 8 * h + gid, rows - 1), sb, t);
    };
    i8_turns<I8Blk[2]>(warp, nsb, load_to, [&](I8Blk (&b)[2], int sb) {
        i8_superblock4f<NT>(b, X, ldx, R, cols, sb, lane, gid, t, acc, mh, ml);
    });
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) red[warp][4 * n + t][gid + 8 * r] = acc[n][r] - (mh[n][r] + ml[n][r]);
    i8_warps_store(red, row0, rows, R, Y, ldy);
}

PRODUCT_PROBE((32 * MM_NW, MM_MINB1), rows_i8f4, i8_rows4f<1>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
PRODUCT_PROBE((32 * MM_NW, 3), rows_i8f8, i8_rows4f<2>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
PRODUCT_PROBE((32 * MM_NW, 3), rows_i8f12, i8_rows4f<3>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
// 16 and 20 rows: four and five n-tiles, at 2 CTAs per SM (their accumulators need the registers)
PRODUCT_PROBE((32 * MM_NW, 2), rows_i8f16, i8_rows4f<4>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))
PRODUCT_PROBE((32 * MM_NW, 2), rows_i8f20, i8_rows4f<5>(p0, rows, cols, (const u8*)X, ldx, Y, ldy, R))

// ---- Integer prefill (--set int8 at 512 rows): gemm_i8 gives every row `rows_i8m`'s bits with
// the tiling of a prefill product. A CTA of 8 warps owns 128 weight rows (a warp its m-tile, as
// `rows_i8m`'s) and 32 activation rows (8 n-tiles of 4 rows, hi and lo in B columns 2r, 2r + 1,
// staged in shared memory per super-block for all 8 warps); each warp walks the K classes as the
// row kernels split them (super-blocks sb = w mod 4, class by class, each summed from zero and
// added in order) with the same integers (16e + o: even sub-blocks' scales times 16) and the same
// float folds, so a row's result does not depend on which kernel made it (checked). Why: v35g-h
// showed the integer one-row product 17 % faster and bit-compatible across row counts; the
// integer design needs a prefill kernel that keeps those bits and llama.cpp's prefill rate.
// Measured (bench/NOTES.md v35k): the bits hold row by row; 512 rows of the 27B's Q4_K matrices
// take 278 ms against the engine gemm's 127 (no load pipeline yet, two barriers per super-block).
constexpr int G8_ROWS = 32;   // activation rows per CTA
constexpr int G8_PART = 288;  // bytes per part (hi, lo) of a staged row: 256 + 32 of padding,
constexpr int G8_ROWB = 2 * G8_PART;  // so the 16 lanes of a half-warp's B loads fall on distinct banks
constexpr int G8_MINB = 192;  // bytes per staged row of the mins' fragments (128 + 64 padding)
// one stage: the rows' hi | lo, their mins' fragments, their scales
constexpr int G8_STAGE = G8_ROWS * (G8_ROWB + G8_MINB) + 4 * G8_ROWS;

// d and dmin (f16 in the header's first word) of the two blocks of a warp's rows gid, gid + 8
OJ_DEV void i8_d_dmin(const I8Blk (&b)[2], float (&dd)[2], float (&dm)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        dd[r] = h2f((u16)(b[r].hdr.x & 0xFFFFu));
        dm[r] = h2f((u16)(b[r].hdr.x >> 16));
    }
}

// A super-block's float folds (rows_i8m's): T, 16 x the exact sums of each n-tile's rows gid,
// gid + 8 against its activation rows' hi and lo; then the mins' term as one more mma per part.
OJ_DEV void g8_fold(const I8Blk (&b)[2], const u32 (&mm)[2][2], const u8* stage, int gid, int t,
                    const int (&T)[8][2][2], float (&acc)[8][2], float (&mh)[8][2], float (&ml)[8][2]) {
    const u8* sm_b = stage + G8_ROWS * G8_ROWB;
    const float* ss = (const float*)(sm_b + G8_ROWS * G8_MINB);
    const int sh = 8 * t;
    float dd[2], dm[2];
    i8_d_dmin(b, dd, dm);
    const u8* bm = sm_b + (gid >> 1) * G8_MINB + (gid & 1) * 32 + 8 * t;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
        const float sxv = ss[4 * n + t];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float f = (float)T[n][r][0] + (float)T[n][r][1] * (1.0f / 254.0f);
            acc[n][r] = fmaf(dd[r] * sxv, f, acc[n][r]);
        }
#pragma unroll
        for (int part = 0; part < 2; ++part) {
            const uint2 bv = *(const uint2*)(bm + 4 * n * G8_MINB + part * 64);
            int c[4];
            mma_16832_u8s8(c, mm[0][0] >> sh, mm[1][0] >> sh, mm[0][1] >> sh, mm[1][1] >> sh, bv.x, bv.y);
            const float scale = part ? sxv * (16.0f / 254.0f) : sxv * 16.0f;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float& dst = part ? ml[n][r] : mh[n][r];
                dst = fmaf(dm[r] * scale, (float)(c[2 * r] + 64 * c[2 * r + 1]), dst);
            }
        }
    }
}

// One super-block of a warp's m-tile against the CTA's 32 staged activation rows (stage: as
// G8_STAGE lays it out): the same integers and float folds as rows_i8m's.
OJ_DEV void g8_superblock(const I8Blk (&b)[2], const u8* stage, int gid, int t, float (&acc)[8][2],
                          float (&mh)[8][2], float (&ml)[8][2]) {
    u32 sc[2][2], mm[2][2];
    i8_scales(b[0].hdr, sc[0], mm[0]);
    i8_scales(b[1].hdr, sc[1], mm[1]);
    int T[8][2][2] = {};  // [n-tile][row gid, gid + 8][hi, lo]: 16e + o
    const u8* bx = stage + (gid >> 1) * G8_ROWB + (gid & 1) * G8_PART + 8 * t;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        const int j = s >> 1;
        const u32 mask = (s & 1) ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
        const u32 a0 = b[0].q[j].x & mask, a1 = b[1].q[j].x & mask, a2 = b[0].q[j].y & mask,
                  a3 = b[1].q[j].y & mask;
        int scale[2];
#pragma unroll
        for (int r = 0; r < 2; ++r)
            scale[r] = (int)__byte_perm(sc[r][s >> 2], 0u, 0x4440u + (s & 3)) * ((s & 1) ? 1 : 16);
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            const uint2 bv = *(const uint2*)(bx + 4 * n * G8_ROWB + 32 * s);
            int c[4];
            mma_16832_u8s8(c, a0, a1, a2, a3, bv.x, bv.y);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                T[n][r][0] += scale[r] * c[2 * r];
                T[n][r][1] += scale[r] * c[2 * r + 1];
            }
        }
    }
    g8_fold(b, mm, stage, gid, t, T, acc, mh, ml);
}

// The 16-byte pieces of super-block sb of the CTA's activation rows into a stage (piece i of
// G8_STAGE / 16, as G8_STAGE lays it out; rows past R as zeros): `put(dst, src)` copies one
// piece, `zero(dst)` clears one; the scales (4 bytes each) go through put4 / the same zero.
struct G8Rows {
    const u8* X;
    long ldx, xm_off;
    int cols, rbase, nr;
    OJ_DEV const u8* row(int r) const { return X + (size_t)(rbase + r) * ldx; }
};
// The rows' pieces of one super-block in a stage, for int8 rows (EB = 1: g8_stage) and gemm_h8's
// f16 rows (EB = 2: h8_stage): each row's two parts (256 EB bytes each, at EB cols apart in the
// row, staged G8_PART EB apart), the first MIN_BYTES of its MIN_SB bytes of the mins' operands per
// super-block (staged MINB apart), its scale (after the parts: 2 EB cols)
template <int EB, int MINB, int MIN_SB, int MIN_BYTES, class Put, class Put4>
OJ_DEV void stage_rows(const G8Rows& a, u8* stage, int sb, Put put, Put4 put4) {
    constexpr int PART = G8_PART * EB, ROWB = 2 * PART, PIECES = 16 * EB;  // 16-byte pieces per part
    for (int i = threadIdx.x; i < G8_ROWS * 2 * PIECES; i += blockDim.x) {
        const int r = (unsigned)i / (2 * PIECES), q = (unsigned)i % (2 * PIECES), part = q / PIECES,
                  off = ((unsigned)q % PIECES) * 16;  // (unsigned: shifts and masks, as before)
        put(stage + r * ROWB + part * PART + off,
            r < a.nr ? a.row(r) + (size_t)part * EB * a.cols + sb * 256 * EB + off : nullptr);
    }
    u8* sm_m = stage + G8_ROWS * ROWB;
    for (int i = threadIdx.x; i < G8_ROWS * (MIN_BYTES / 16); i += blockDim.x) {
        const int r = (unsigned)i / (MIN_BYTES / 16), q = (unsigned)i % (MIN_BYTES / 16);
        put(sm_m + r * MINB + q * 16, r < a.nr ? a.row(r) + a.xm_off + sb * MIN_SB + q * 16 : nullptr);
    }
    float* ss = (float*)(sm_m + G8_ROWS * MINB);
    if (threadIdx.x < G8_ROWS) {
        const int r = threadIdx.x;
        put4(ss + r, r < a.nr ? (const float*)(a.row(r) + 2 * EB * (size_t)a.cols) + sb : nullptr);
    }
}
template <class Put, class Put4>
OJ_DEV void g8_stage(const G8Rows& a, u8* stage, int sb, Put put, Put4 put4) {
    stage_rows<1, G8_MINB, 256, 128>(a, stage, sb, put, put4);  // columns 0-3 of 8
}

// the class totals of a warp's m-tile and the CTA's rows into Y
OJ_DEV void g8_store(const float (&total)[8][2], int row0, int rbase, int gid, int t, int rows, int R,
                     float* Y, int ldy) {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int arow = rbase + 4 * n + t, wrow = row0 + gid + 8 * r;
            if (arow < R && wrow < rows) Y[(size_t)arow * ldy + wrow] = total[n][r];
        }
}

extern "C" __global__ void __launch_bounds__(256, 1)
    gemm_i8(const u8* p0, int rows, int cols, const void* Xv, int ldx, float* Y, int ldy, int R) {
    __shared__ __align__(16) u8 stage[G8_STAGE];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};
    const int row0 = blockIdx.y * 128 + 16 * warp, rbase = blockIdx.x * G8_ROWS, nsb = cols >> 8;
    const G8Rows a = {(const u8*)Xv, ldx, 2 * (long)cols + 16 * ((nsb + 3) / 4) + 4 * (cols >> 5), cols, rbase,
                      min(G8_ROWS, R - rbase)};
    float total[8][2] = {};
    oj_grid_dep();
    for (int w = 0; w < MM_NW; ++w) {
        float acc[8][2] = {}, mh[8][2] = {}, ml[8][2] = {};
        for (int sb = w; sb < nsb; sb += MM_NW) {
            I8Blk b[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) i8_load(b[h], W, min(row0 + 8 * h + gid, rows - 1), sb, t);
            __syncthreads();  // the last super-block's stage is read
            g8_stage(
                a, stage, sb,
                [](u8* dst, const u8* src) {
                    *(uint4*)dst = src ? *(const uint4*)src : make_uint4(0u, 0u, 0u, 0u);
                },
                [](float* dst, const float* src) { *dst = src ? *src : 0.0f; });
            __syncthreads();
            g8_superblock(b, stage, gid, t, acc, mh, ml);
        }
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
            for (int r = 0; r < 2; ++r) total[n][r] += acc[n][r] - (mh[n][r] + ml[n][r]);
    }
    g8_store(total, row0, rbase, gid, t, rows, R, Y, ldy);
}

// gemm_i8p: gemm_i8's work and bits with a pipeline: the (class, super-block) items in the same
// order, the next item's activations copied (cp.async) into the other of two stages (dynamic
// shared memory, 2 x G8_STAGE) and its weights loaded into registers while this item's are
// multiplied, one block barrier per item. Why: v35k's first version waited on both at every
// super-block, one CTA per SM.
// Measured (bench/NOTES.md v36a): the bits hold; 512 rows 188.8 ms against gemm_i8's 284.1 and
// the engine gemm's 126.7: still 1.49x, where prefill's margin over llama.cpp allows ~1.17x.
// src null: zeros (src-size 0 reads nothing; `any` is only a valid global address to name)
OJ_DEV void g8_copy16(void* dst, const void* src, const void* any) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)),
                 "l"(src ? src : any), "r"(src ? 16 : 0)
                 : "memory");
}
OJ_DEV void g8_copy4(void* dst, const void* src, const void* any) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)),
                 "l"(src ? src : any), "r"(src ? 4 : 0)
                 : "memory");
}

// gemm_i8s: gemm_i8p with the sub-block scales on the A side, so the mma's own accumulators sum
// the whole super-block: scale = 8 sh + sl (sl, sh < 8), A_l = q sl and A_h = q sh (q < 16 true
// codes: a packed word times a scalar, no byte carries), T = 16 (C_l + 8 C_h), the same exact
// integers as g8_superblock's and so the same bits. Why: g8_superblock scales every sub-block's
// mma result per output element (four IMADs per mma: ~3x the f16 gemm's instructions per
// multiply-add, v35k); this is two mma per sub-block and n-tile and eight IMULs per sub-block
// shared by the warp's eight n-tiles.
// Measured (v36b): the bits hold, but slower: 217.4 ms against gemm_i8p's 188.7 (1,077 loop
// instructions against 1,107, 144 integer mma against 80): the integer mma's own rate on
// mma.sync limits it as much as the per-element scaling did.
OJ_DEV void g8_superblock_split(const I8Blk (&b)[2], const u8* stage, int gid, int t, float (&acc)[8][2],
                                float (&mh)[8][2], float (&ml)[8][2]) {
    u32 sc[2][2], mm[2][2];
    i8_scales(b[0].hdr, sc[0], mm[0]);
    i8_scales(b[1].hdr, sc[1], mm[1]);
    int cl[8][4] = {}, ch[8][4] = {};  // [n-tile][mma fragment]: the q sl and q sh sums
    const u8* bx = stage + (gid >> 1) * G8_ROWB + (gid & 1) * G8_PART + 8 * t;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        u32 l[4], h[4];
        i8_split_a(b[0], b[1], sc[0], sc[1], s, l, h);
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            const uint2 bv = *(const uint2*)(bx + 4 * n * G8_ROWB + 32 * s);
            mma_16832_u8s8_acc(cl[n], l[0], l[1], l[2], l[3], bv.x, bv.y);
            mma_16832_u8s8_acc(ch[n], h[0], h[1], h[2], h[3], bv.x, bv.y);
        }
    }
    int T[8][2][2];  // 16 x the exact sums: 16 (C_l + 8 C_h), as g8_superblock's
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int part = 0; part < 2; ++part) T[n][r][part] = 16 * (cl[n][2 * r + part] + 8 * ch[n][2 * r + part]);
    g8_fold(b, mm, stage, gid, t, T, acc, mh, ml);
}

// ---- gemm_h8 (--set int8 at 512 rows): the integer products' bits at prefill through f16 mma on
// integer-valued operands. A = sc q (a sub-block's 6-bit scale times its 4-bit codes, <= 945:
// exact in f16, one LOP3 and one HFMA2 per two codes), B = the activation parts hi and lo (|.| <=
// 127, exact in f16); their products and sums are integers, exact in the f32 accumulators while
// below 2^24: a half super-block's sums are (4 x 32 x 945 x 127 < 15.4M), so each half is summed
// from zero and the two added in f32, one rounding of the exact total, as the integer kernels'
// (float) of their exact int. 16 x that total is rows_i8m's T, and the folds are g8_fold's, so a
// row's result is rows_i8m's bit for bit (checked). The mins' term likewise: A = the 6-bit mins,
// B = the activations' sub-block sums as 64a + b (a, b exact in f16). Why: gemm_i8p (v36a) stayed
// 1.49x the f16 gemm because every integer mma's sums were scaled per element and sub-block
// (four IMADs per mma); here the scales ride in A, the mma's accumulators sum a half super-block,
// and the integer design's missing prefill piece (v43's plan) may come within reach of the f16
// gemm. Tiling as gemm_i8p: a CTA of 8 warps owns 128 weight rows (a warp its m-tile, weights in
// registers) and 32 activation rows (8 n-tiles of 4 rows, hi and lo in B columns 2r, 2r + 1),
// staged per super-block by cp.async in two stages, the (class, super-block) items in the row
// kernels' order.
// Measured (bench/NOTES.md v46c, an H100): 257.7 ms at 512 rows against gemm_i8p's 185.5 and the
// engine gemm's 127.0 (2.03x; 1,193 loop instructions per super-block and warp); the bits were
// 9.5e-7 off rows_i8m while nvcc contracted the fold differently (now explicit; not run since).
// Activations (tma_probe.py h8_activations), per row: f16 hi [K] and lo [K], each group of 8
// in the order 0 2 1 3 4 6 5 7 (the lanes' k order below); f32 s / 16 [K / 256, padded to 4];
// f16 mins' sums [K / 256][part: XH, XL][b, a][8 sub-blocks].
// mma k order: lane t's A and B hold elements 8t + (0, 2 | 1, 3) of a sub-block in its first k16
// step and 8t + (4, 6 | 5, 7) in its second; the sums are exact, so any order gives the same.
// Staged as gemm_i8p's rows (G8_ROWS of them) with elements of two bytes: a part of a row takes
// 2 G8_PART bytes (512 + 64 of padding, so lanes 4-7 leave lanes 0-3's banks)
constexpr int H8_PART = 2 * G8_PART;
constexpr int H8_ROWB = 2 * H8_PART;
constexpr int H8_MINB = 80;  // bytes per staged row of the mins' sums: 64 + 16
constexpr int H8_STAGE = G8_ROWS * (H8_ROWB + H8_MINB) + 4 * G8_ROWS;

// super-block sb of the CTA's rows into a stage (rows past R as zeros), as g8_stage
template <class Put, class Put4>
OJ_DEV void h8_stage(const G8Rows& a, u8* stage, int sb, Put put, Put4 put4) {
    stage_rows<2, H8_MINB, 64, 64>(a, stage, sb, put, put4);
}
// two bytes of word as f16 values (exact: < 1024), picked into bytes 0 and 2 by PRMT selector
// sel whose other two nibbles pick zeros (4)
OJ_DEV u32 h8_pair(u32 word, u32 sel) {
    const u32 m = __byte_perm(word, 0u, sel) | 0x64006400u;  // 1024 + v in each half
    return hsub2(m, 0x64006400u);
}
// One super-block of a warp's m-tile against the CTA's 32 staged rows: rows_i8m's integers as
// f32, then g8_fold's float folds.
OJ_DEV void h8_superblock(const I8Blk (&b)[2], const u8* stage, int gid, int t, float (&acc)[8][2],
                          float (&mh)[8][2], float (&ml)[8][2]) {
    u32 sc[2][2], mm[2][2];
    i8_scales(b[0].hdr, sc[0], mm[0]);
    i8_scales(b[1].hdr, sc[1], mm[1]);
    float C[2][8][4];  // each half's sums
    const u8* bx = stage + (gid >> 1) * H8_ROWB + (gid & 1) * H8_PART + 16 * t;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int n = 0; n < 8; ++n) C[half][n][0] = C[half][n][1] = C[half][n][2] = C[half][n][3] = 0.0f;
#pragma unroll
        for (int ss = 0; ss < 4; ++ss) {
            const int s = 4 * half + ss, j = s >> 1;
            // A: rows gid (r 0) and gid + 8 (r 1), codes of sub-block s as sc q in f16
            u32 a[2][4];  // [r][step 0 (e0 e2), step 0 (e1 e3), step 1 (e4 e6), step 1 (e5 e7)]
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const u32 sel = (u32)(s & 3) | 0x4000u | ((u32)(s & 3) << 8) | 0x0040u;
                const u32 sc2 = h8_pair(sc[r][s >> 2], sel);   // (sc, sc)
                const u32 nb2 = hmul2(sc2, 0xE400E400u);         // (-1024 sc, -1024 sc)
                const u32 wx = (s & 1) ? b[r].q[j].x >> 4 : b[r].q[j].x;
                const u32 wy = (s & 1) ? b[r].q[j].y >> 4 : b[r].q[j].y;
                a[r][0] = hfma2((wx & 0x000F000Fu) | 0x64006400u, sc2, nb2);
                a[r][1] = hfma2(((wx >> 8) & 0x000F000Fu) | 0x64006400u, sc2, nb2);
                a[r][2] = hfma2((wy & 0x000F000Fu) | 0x64006400u, sc2, nb2);
                a[r][3] = hfma2(((wy >> 8) & 0x000F000Fu) | 0x64006400u, sc2, nb2);
            }
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                const uint4 bv = *(const uint4*)(bx + 4 * n * H8_ROWB + 64 * s);
                mma_16816(C[half][n], a[0][0], a[1][0], a[0][1], a[1][1], bv.x, bv.y);
                mma_16816(C[half][n], a[0][2], a[1][2], a[0][3], a[1][3], bv.z, bv.w);
            }
        }
    }
    // g8_fold's folds on the same values: T = 16 x the exact sums (one rounding of the total)
    const u8* sm_m = stage + G8_ROWS * H8_ROWB;
    const float* ssx = (const float*)(sm_m + G8_ROWS * H8_MINB);
    float dd[2], dm[2];
    i8_d_dmin(b, dd, dm);
    // the mins as A: (m_2t, m_2t+1) of rows gid, gid + 8 (bytes 2 (t & 1), + 1 of their word);
    // k 8-15 zero
    const u32 msel = (t & 1) ? 0x4342u : 0x4140u;
    const u32 ma[2] = {h8_pair(mm[0][t >> 1], msel), h8_pair(mm[1][t >> 1], msel)};
    const u8* bm = sm_m + (gid >> 1) * H8_MINB + (gid & 1) * 16 + 4 * t;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
        const float sxv = ssx[4 * n + t];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            // explicit roundings: the compiler must not contract 16 (.) into the fold's FFMA, which
            // the integer kernels compute as FFMA(tl, 1 / 254, th) on their (float) sums
            const float th = __fmul_rn(16.0f, __fadd_rn(C[0][n][2 * r], C[1][n][2 * r]));
            const float tl = __fmul_rn(16.0f, __fadd_rn(C[0][n][2 * r + 1], C[1][n][2 * r + 1]));
            const float f = __fmaf_rn(tl, 1.0f / 254.0f, th);
            acc[n][r] = fmaf(dd[r] * sxv, f, acc[n][r]);
        }
#pragma unroll
        for (int part = 0; part < 2; ++part) {
            const u32 bv = *(const u32*)(bm + 4 * n * H8_MINB + part * 32);
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_16816(c, ma[0], ma[1], 0u, 0u, bv, 0u);
            const float scale = part ? sxv * (16.0f / 254.0f) : sxv * 16.0f;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float& dst = part ? ml[n][r] : mh[n][r];
                dst = fmaf(dm[r] * scale, fmaf(64.0f, c[2 * r + 1], c[2 * r]), dst);
            }
        }
    }
}

// KIND 0: gemm_i8p (g8_stage, g8_superblock), 1: gemm_i8s (g8_superblock_split), 2: gemm_h8
// (h8_stage, h8_superblock: its own staged rows, in stages of H8_STAGE bytes)
template <int KIND>
OJ_DEV void g8_pipelined(const u8* p0, int rows, int cols, const void* Xv, int ldx, float* Y, int ldy, int R) {
    extern __shared__ __align__(16) u8 stages[];  // 2 x STAGE
    constexpr int STAGE = KIND == 2 ? H8_STAGE : G8_STAGE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const WDesc W = {p0, nullptr, nullptr, nullptr, rows, cols};
    const int row0 = blockIdx.y * 128 + 16 * warp, rbase = blockIdx.x * G8_ROWS, nsb = cols >> 8;
    // the mins' operands after the parts (EB cols each) and the scales' 16 * ceil(nsb / 4) bytes
    const long sx_bytes = 16 * ((nsb + 3) / 4);
    const long xm_off = KIND == 2 ? 4 * (long)cols + sx_bytes : 2 * (long)cols + sx_bytes + 4 * (cols >> 5);
    const G8Rows a = {(const u8*)Xv, ldx, xm_off, cols, rbase, min(G8_ROWS, R - rbase)};
    // item i: class w, its k-th super-block; items run class by class as gemm_i8's loops
    auto item_sb = [&](int i, int& w) {
        for (w = 0; w < MM_NW; ++w) {
            const int n = (nsb - w + MM_NW - 1) / MM_NW;  // super-blocks of class w
            if (i < n) return w + i * MM_NW;
            i -= n;
        }
        return -1;
    };
    const int items = nsb;  // every super-block once
    auto stage_of = [&](int i) { return stages + (i & 1) * STAGE; };
    auto ask = [&](int i) {  // item i's activations into its stage, as one commit group
        int w;
        const int sb = i < items ? item_sb(i, w) : -1;
        auto put = [&](u8* d, const u8* src) { g8_copy16(d, src, a.X); };
        auto put4 = [&](float* d, const float* src) { g8_copy4(d, src, a.X); };
        if (sb >= 0 && KIND == 2)
            h8_stage(a, stage_of(i), sb, put, put4);
        else if (sb >= 0)
            g8_stage(a, stage_of(i), sb, put, put4);
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    float total[8][2] = {}, acc[8][2] = {}, mh[8][2] = {}, ml[8][2] = {};
    I8Blk b[2], nb[2];
    int w0;
    if (items > 0) {
        const int sb = item_sb(0, w0);
#pragma unroll
        for (int h = 0; h < 2; ++h) i8_load(b[h], W, min(row0 + 8 * h + gid, rows - 1), sb, t);
    }
    oj_grid_dep();
    ask(0);
    for (int i = 0; i < items; ++i) {
        int w, wn = -1;
        item_sb(i, w);
        const int sbn = i + 1 < items ? item_sb(i + 1, wn) : -1;
        if (sbn >= 0) {
#pragma unroll
            for (int h = 0; h < 2; ++h) i8_load(nb[h], W, min(row0 + 8 * h + gid, rows - 1), sbn, t);
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads();  // item i's stage is in for every thread; item i - 1's is read by all
        ask(i + 1);       // into item i - 1's stage
        if constexpr (KIND == 2)
            h8_superblock(b, stage_of(i), gid, t, acc, mh, ml);
        else if constexpr (KIND == 1)
            g8_superblock_split(b, stage_of(i), gid, t, acc, mh, ml);
        else
            g8_superblock(b, stage_of(i), gid, t, acc, mh, ml);
        if (wn != w) {  // the class ends: add it, start the next from zero
#pragma unroll
            for (int n = 0; n < 8; ++n)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    total[n][r] += acc[n][r] - (mh[n][r] + ml[n][r]);
                    acc[n][r] = mh[n][r] = ml[n][r] = 0.0f;
                }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) b[h] = nb[h];
    }
    g8_store(total, row0, rbase, gid, t, rows, R, Y, ldy);
}

extern "C" __global__ void __launch_bounds__(256, 1)
    gemm_i8p(const u8* p0, int rows, int cols, const void* Xv, int ldx, float* Y, int ldy, int R) {
    g8_pipelined<0>(p0, rows, cols, Xv, ldx, Y, ldy, R);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    gemm_i8s(const u8* p0, int rows, int cols, const void* Xv, int ldx, float* Y, int ldy, int R) {
    g8_pipelined<1>(p0, rows, cols, Xv, ldx, Y, ldy, R);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    gemm_h8(const u8* p0, int rows, int cols, const void* Xv, int ldx, float* Y, int ldy, int R) {
    g8_pipelined<2>(p0, rows, cols, Xv, ldx, Y, ldy, R);
}

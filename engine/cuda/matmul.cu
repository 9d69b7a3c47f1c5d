// Weight x rows products: Y[r][n] (+)= sum_k W[n][k] * X[r][k].
//
// Quantized weights (Q4_K, Q5_K, Q6_K, Q8_0) go through `wmat_pipe`, f16 weights through
// `wmat_rows`, both on the tensor cores (mma.sync m16n8k16, f16 operands, f32 accumulation,
// sm_80+); f32 weights through `mm_f32_exact`, plain f32 arithmetic on the CUDA cores.
//
// One CTA owns 16*MT output features (weight rows) and reads each of their weight blocks from
// memory exactly once for all R <= 8*NT activation rows of the launch; blockIdx.x walks further
// groups of 8*NT rows (prefill), so the CTAs that share a weight tile run side by side and the
// tile comes from L2 after the first. The NW warps split the K super-blocks round-robin (fixed
// by K, never by R) and are summed in warp order at the end, so a row's result does not depend
// on how many other rows share the launch (batch invariance). Weights are dequantized to f16 in
// registers (quant.cuh), activations are rounded to f16.
//
// `wmat_pipe` keeps HBM busy with a per-warp ring of S stages in shared memory filled by
// cp.async: each stage holds one super-block of the warp's 16*MT rows, and S-1 stages are in
// flight while the warp computes on the oldest (the register-prefetch kernel had at most two
// super-blocks per warp in flight, too few bytes to cover HBM latency at one row). Its numerics
// are those of `wmat_rows` (same fragments, same order). The instantiations (format, NT, MT, S)
// are chosen and appended by engine/cuda/build.py.
//
//   W: WDesc (quant.cuh)                 rows N, cols K (K % 256 == 0)
//   X: f32 [R][ldx]  (row-major, ldx % 4 == 0, 16-byte aligned)
//   Y: f32 [R][ldy]  (row-major); accumulate != 0 adds to Y (residual connections)
#include "quant.cuh"

#ifndef MM_NW
#define MM_NW 4  // warps per CTA, splitting K
#endif
#ifndef MM_MT
#define MM_MT 2  // 16-row m-tiles per warp
#endif
#ifndef MM_MINB
#define MM_MINB 2  // __launch_bounds__ min blocks per SM (caps registers when > 1)
#endif
#ifndef MM_MT1
#define MM_MT1 1  // the same two for the single-row (NT = 1) kernels
#endif
#ifndef MM_MINB1
#define MM_MINB1 3
#endif

OJ_DEV void mma_16816(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The 16 mma chunks of one super-block: acc[m][n] += A(cur[m]) * B(rows 8n.., chunk c).
template <class Frag, int MT, int NT>
OJ_DEV void mma_superblock(const Frag (&cur)[MT][2], float (&acc)[MT][NT][4],
                           const float* __restrict__ X, int ldx, int sb, int nrows, int gid, int t) {
#pragma unroll
    for (int c = 0; c < 16; ++c) {
        const int e = sb * 256 + Frag::e0(t, c);
        u32 b[NT][2];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const int r = 8 * n + gid;
            if (r < nrows) {
                const float4 x = *(const float4*)(X + (size_t)r * ldx + e);
                b[n][0] = pack_h2(x.x, x.z);
                b[n][1] = pack_h2(x.y, x.w);
            } else {
                b[n][0] = 0u;
                b[n][1] = 0u;
            }
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            u32 a0, a1, a2, a3;
            cur[m][0].get(c, a0, a2);
            cur[m][1].get(c, a1, a3);
#pragma unroll
            for (int n = 0; n < NT; ++n) mma_16816(acc[m][n], a0, a1, a2, a3, b[n][0], b[n][1]);
        }
    }
}

// Sum the warps' partial tiles in warp order (red: smem of MM_NW * MT*NT*4 * 32 floats) and
// store (or add) each output element.
template <int MT, int NT>
OJ_DEV void reduce_store(float* red, const float (&acc)[MT][NT][4], int n_out, float* __restrict__ Y,
                         int ldy, int row0, int nrows, int accumulate) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    constexpr int J = MT * NT * 4;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[(warp * J + (m * NT + n) * 4 + i) * 32 + lane] = acc[m][n][i];
    __syncthreads();
    for (int idx = threadIdx.x; idx < J * 32; idx += blockDim.x) {
        const int j = idx >> 5, ln = idx & 31;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < MM_NW; ++w) s += red[(w * J + j) * 32 + ln];
        const int m = j / (NT * 4), n = (j / 4) % NT, i = j & 3;
        const int out_row = row0 + 16 * m + (ln >> 2) + 8 * (i >> 1);  // weight row = feature
        const int r = 8 * n + 2 * (ln & 3) + (i & 1);                     // activation row
        if (out_row < n_out && r < nrows) {
            float* y = Y + (size_t)r * ldy + out_row;
            *y = accumulate ? *y + s : s;
        }
    }
}

template <class Frag, int MT, int NT>
OJ_DEV void wmat_rows(const WDesc W, const float* __restrict__ X, int ldx, float* __restrict__ Y,
                      int ldy, int R, int accumulate) {
    __shared__ float red[MM_NW][MT * NT * 4][32];  // the cross-warp sum
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.y * 16 * MT;
    const int rbase = blockIdx.x * 8 * NT;
    const int nrows = min(8 * NT, R - rbase);
    X += (size_t)rbase * ldx;
    Y += (size_t)rbase * ldy;

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;

    const int nsb = W.cols >> 8;
    // Software pipeline: the next super-block's raw blocks are in flight while this one is
    // dequantized and multiplied (the loop is latency-bound otherwise).
    Frag cur[MT][2], nxt[MT][2];
    int sb = warp;
    if (sb < nsb) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                cur[m][h].load(W, min(row0 + 16 * m + 8 * h + gid, W.rows - 1), sb, t);
    }
    for (; sb < nsb; sb += MM_NW) {
        if (sb + MM_NW < nsb) {
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    nxt[m][h].load(W, min(row0 + 16 * m + 8 * h + gid, W.rows - 1), sb + MM_NW, t);
        }
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) cur[m][h].prep(t);
        mma_superblock<Frag, MT, NT>(cur, acc, X, ldx, sb, nrows, gid, t);
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) cur[m][h] = nxt[m][h];
    }

    reduce_store<MT, NT>(&red[0][0][0], acc, W.rows, Y, ldy, row0, nrows, accumulate);
}

// One warp's share of the pipelined product: its super-blocks sb = warp, warp + NW, ... of the
// CTA's 16*MT rows, each staged whole into shared memory by cp.async S-1 steps ahead.
template <class Frag, int MT, int S>
struct PipeRing {
    static constexpr int ROWS = 16 * MT;
    static constexpr int STAGE = ROWS * Frag::STRIDE;  // bytes of one stage
    static constexpr int BYTES = MM_NW * S * STAGE;    // the whole CTA's rings

    // Issue the copies of super-block sb of rows row0.. into `stage` (every lane takes part).
    OJ_DEV static void fill(const WDesc& W, int row0, int sb, u8* stage, int lane) {
        for (int idx = lane; idx < ROWS * Frag::N16; idx += 32) {
            const int r = idx / Frag::N16, i = idx - r * Frag::N16;
            cp_async16(stage + r * Frag::STRIDE + 16 * i, Frag::piece(W, min(row0 + r, W.rows - 1), sb, i));
        }
        for (int r = lane; r < ROWS; r += 32) Frag::piece4(W, min(row0 + r, W.rows - 1), sb, stage + r * Frag::STRIDE);
    }
};

template <class Frag, int MT, int NT, int S>
OJ_DEV void wmat_pipe(const WDesc W, const float* __restrict__ X, int ldx, float* __restrict__ Y,
                      int ldy, int R, int accumulate) {
    typedef PipeRing<Frag, MT, S> Ring;
    constexpr int RED = MM_NW * MT * NT * 4 * 32 * 4;  // bytes of the cross-warp sum
    __shared__ __align__(16) u8 smem[Ring::BYTES > RED ? Ring::BYTES : RED];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.y * 16 * MT;
    const int rbase = blockIdx.x * 8 * NT;
    const int nrows = min(8 * NT, R - rbase);
    X += (size_t)rbase * ldx;
    Y += (size_t)rbase * ldy;

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;

    const int nsb = W.cols >> 8;
    const int mine = nsb > warp ? (nsb - warp + MM_NW - 1) / MM_NW : 0;  // this warp's super-blocks
    u8* ring = smem + warp * S * Ring::STAGE;
    // Every iteration commits one group (empty when nothing is left), so "the oldest S-1
    // groups may still fly" always means "stage i has landed".
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if (s < mine) Ring::fill(W, row0, warp + s * MM_NW, ring + s * Ring::STAGE, lane);
        cp_async_commit();
    }
    for (int i = 0; i < mine; ++i) {
        const int ahead = i + S - 1;
        if (ahead < mine) Ring::fill(W, row0, warp + ahead * MM_NW, ring + (ahead % S) * Ring::STAGE, lane);
        cp_async_commit();
        cp_async_wait<S - 1>();
        __syncwarp();  // every lane's copies of stage i are visible to the whole warp
        const u8* stage = ring + (i % S) * Ring::STAGE;
        const int sb = warp + i * MM_NW;
        Frag cur[MT][2];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = 16 * m + 8 * h + gid;
                const size_t b = (size_t)min(row0 + r, W.rows - 1) * nsb + sb;
                cur[m][h].lds(stage + r * Frag::STRIDE, t, b);
                cur[m][h].prep(t);
            }
        mma_superblock<Frag, MT, NT>(cur, acc, X, ldx, sb, nrows, gid, t);
        __syncwarp();  // stage i is refilled by the next iteration's copies
    }
    cp_async_wait<0>();
    __syncthreads();  // the rings become the cross-warp sum buffer
    reduce_store<MT, NT>((float*)smem, acc, W.rows, Y, ldy, row0, nrows, accumulate);
}

// Instantiated by build.py: one kernel per (format, NT) with the MT and S it chose.
#define OJ_MMP_KERNEL(NAME, FRAG, MT, NT, S, MINB)                                                \
    extern "C" __global__ void __launch_bounds__(32 * MM_NW, MINB)                                \
        NAME(const u8* p0, const u8* p1, const u8* p2, const u8* p3, int rows, int cols,          \
             const float* X, int ldx, float* Y, int ldy, int R, int accumulate) {                 \
        const WDesc W = {p0, p1, p2, p3, rows, cols};                                             \
        wmat_pipe<FRAG, MT, NT, S>(W, X, ldx, Y, ldy, R, accumulate);                             \
    }

// F32 weights (the tiny DeltaNet beta/alpha projections of every mix, and whole f32 models):
// plain f32 FMAs, so an f32 model's products are as exact as the reference's. A warp owns one
// weight row and 8 activation rows (grid: rows/4 x R/8); lane l sums k = 4l + 128j in order,
// then a fixed shuffle tree: the order never depends on R (batch invariance).
extern "C" __global__ void __launch_bounds__(128)
    mm_f32_exact(const float* __restrict__ W, int rows, int cols, const float* __restrict__ X,
                 int ldx, float* __restrict__ Y, int ldy, int R, int accumulate) {
    const int lane = threadIdx.x & 31, n = blockIdx.x * 4 + (threadIdx.x >> 5);
    const int r0 = blockIdx.y * 8, nr = min(8, R - r0);
    if (n >= rows) return;
    const float* w = W + (size_t)n * cols;
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
    for (int k = 4 * lane; k < cols; k += 128) {
        const float4 wv = *(const float4*)(w + k);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (i < nr) {
                const float4 xv = *(const float4*)(X + (size_t)(r0 + i) * ldx + k);
                acc[i] = fmaf(wv.x, xv.x, acc[i]);
                acc[i] = fmaf(wv.y, xv.y, acc[i]);
                acc[i] = fmaf(wv.z, xv.z, acc[i]);
                acc[i] = fmaf(wv.w, xv.w, acc[i]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float s = warp_sum(acc[i]);
        if (lane == 0 && i < nr) {
            float* y = Y + (size_t)(r0 + i) * ldy + n;
            *y = accumulate ? *y + s : s;
        }
    }
}

#define OJ_MM_KERNEL(NAME, FRAG, MT, NT, MINB)                                                    \
    extern "C" __global__ void __launch_bounds__(32 * MM_NW, MINB)                                \
        NAME(const u8* p0, const u8* p1, const u8* p2, const u8* p3, int rows, int cols,          \
             const float* X, int ldx, float* Y, int ldy, int R, int accumulate) {                 \
        const WDesc W = {p0, p1, p2, p3, rows, cols};                                             \
        wmat_rows<FRAG, MT, NT>(W, X, ldx, Y, ldy, R, accumulate);                                \
    }

// The register-prefetch kernels: f16 weights, and every quantized format for bench/decode.py's
// comparison. Tilings chosen by its sweep on an H200 (bench/NOTES.md): one 16-row tile per warp
// and 3 CTAs/SM for single-row products, two tiles per warp (B fragments shared) above that.
// The accumulation order of an output element is the same in every instantiation (same K
// split, same chunk order, one mma per chunk), so results do not depend on the row count.
#define OJ_MM_ALL_NT(PREFIX, FRAG)               \
    OJ_MM_KERNEL(PREFIX##_1, FRAG, MM_MT1, 1, MM_MINB1) \
    OJ_MM_KERNEL(PREFIX##_2, FRAG, MM_MT, 2, MM_MINB)   \
    OJ_MM_KERNEL(PREFIX##_3, FRAG, MM_MT, 3, MM_MINB)   \
    OJ_MM_KERNEL(PREFIX##_4, FRAG, MM_MT, 4, MM_MINB)

OJ_MM_ALL_NT(mm_q4_k, FragQ4K)
OJ_MM_ALL_NT(mm_q5_k, FragQ5K)
OJ_MM_ALL_NT(mm_q6_k, FragQ6K)
OJ_MM_ALL_NT(mm_q8_0, FragQ8_0)
OJ_MM_ALL_NT(mm_f16, FragF16)

// Dequantized rows of a weight (the token embedding gather, and tests of the formats).
//   tok: i32 [T] row ids;  out: f32 [T][W.cols]
extern "C" __global__ void embed_rows(const u8* p0, const u8* p1, const u8* p2, const u8* p3,
                                      int rows, int cols, int type, const int* tok, float* out) {
    const WDesc W = {p0, p1, p2, p3, rows, cols};
    const int t = blockIdx.x, row = tok[t];
    for (int k = threadIdx.x; k < cols; k += blockDim.x)
        out[(size_t)t * cols + k] = wget(W, type, row, k);
}

// Weight x rows products on the tensor cores: Y[r][n] (+)= sum_k W[n][k] * X[r][k].
//
// One CTA owns 16*MT output features (weight rows) and reads each of their weight blocks from
// memory exactly once for all R <= 8*NT activation rows of the step; grid.y walks further
// groups of 8*NT rows (prefill). The NW warps split the K super-blocks round-robin (fixed by K,
// never by R) and are summed in warp order at the end, so a row's result does not depend on how
// many other rows share the launch (batch invariance). Weights are dequantized to f16 in
// registers (quant.cuh), activations are rounded to f16, products accumulate in f32 (mma.sync
// m16n8k16, sm_80+).
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

template <class Frag, int MT, int NT>
OJ_DEV void wmat_rows(const WDesc W, const float* __restrict__ X, int ldx, float* __restrict__ Y,
                      int ldy, int R, int accumulate) {
    __shared__ float red[MM_NW][MT * NT * 4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * 16 * MT;
    const int rbase = blockIdx.y * 8 * NT;
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
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) cur[m][h] = nxt[m][h];
    }

#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[warp][(m * NT + n) * 4 + i][lane] = acc[m][n][i];
    __syncthreads();
    for (int idx = threadIdx.x; idx < MT * NT * 4 * 32; idx += blockDim.x) {
        const int j = idx >> 5, ln = idx & 31;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < MM_NW; ++w) s += red[w][j][ln];
        const int m = j / (NT * 4), n = (j / 4) % NT, i = j & 3;
        const int out_row = row0 + 16 * m + (ln >> 2) + 8 * (i >> 1);  // weight row = feature
        const int r = 8 * n + 2 * (ln & 3) + (i & 1);                     // activation row
        if (out_row < W.rows && r < nrows) {
            float* y = Y + (size_t)r * ldy + out_row;
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

// Tilings chosen by bench/decode.py's sweep on an H200 (bench/NOTES.md): one 16-row tile per warp
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
OJ_MM_ALL_NT(mm_f32, FragF32)

// Dequantized rows of a weight (the token embedding gather, and tests of the formats).
//   tok: i32 [T] row ids;  out: f32 [T][W.cols]
extern "C" __global__ void embed_rows(const u8* p0, const u8* p1, const u8* p2, const u8* p3,
                                      int rows, int cols, int type, const int* tok, float* out) {
    const WDesc W = {p0, p1, p2, p3, rows, cols};
    const int t = blockIdx.x, row = tok[t];
    for (int k = threadIdx.x; k < cols; k += blockDim.x)
        out[(size_t)t * cols + k] = wget(W, type, row, k);
}

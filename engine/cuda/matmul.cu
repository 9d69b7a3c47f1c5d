// Weight x rows products: Y[r][n] (+)= sum_k W[n][k] * X[r][k].
//
// Quantized and f16 weights run on the tensor cores (mma.sync m16n8k16, f16 operands, f32
// accumulation, sm_80+): `wmat_rows` for up to 8*MAX_NT rows (decode), `wmat_gemm` above that
// (prefill); f32 weights through `mm_f32_exact`, plain f32 arithmetic on the CUDA cores.
//
// wmat_rows: one CTA owns 16*MT output features (weight rows) and reads each of their weight
// blocks from memory exactly once for all R <= 8*NT activation rows of the launch. The NW warps
// split the K super-blocks round-robin (fixed by K, never by R) and are summed in warp order at
// the end, so a row's result does not depend on how many other rows share the launch (batch
// invariance); wmat_gemm keeps that exact order. Weights are dequantized to f16 in registers
// (quant.cuh), activations are rounded to f16. (A variant that staged the weights through a
// cp.async ring in shared memory was measured 5-10 % slower at 1-8 rows, and L2 prefetches of
// the blocks 2-8 super-blocks ahead 1-10 % slower, a ring with truly two super-blocks in
// flight no faster, and a dequantization with 13 % fewer instructions no faster either: the
// products' speed follows the shape of their launches (fill, drain, the last partial wave),
// not the loop's bytes in flight or its instruction count; bench/NOTES.md v15f, v16, v17.
// Cache policies on the weight loads (L1::no_allocate, L2 evict_first, an L2::256B hint) were
// 7-8 % slower at one row, v40a, and the FFN's down product waiting for the gate|up product
// chunk by chunk through counters 3 % slower than griddepcontrol.wait, v39a.)
//
//   W: WDesc (quant.cuh)                 rows N, cols K (K % 256 == 0)
//   X: f32 [R][ldx]  (row-major, ldx % 4 == 0, 16-byte aligned)
//   Y: f32 [R][ldy]  (row-major); accumulate: MM_STORE, MM_ADD (adds to Y: residual connections)
//      or, for the row kernels, MM_SWIGLU (below)
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
#define MM_MINB1 4
#endif
#ifndef MM_MINB1D
#define MM_MINB1D 3  // the deep single-n-tile kernels (_1d) for narrow products
#endif
#ifndef MM_MTF
#define MM_MTF 1  // the two-n-tile kernels of passes of few rows (_2f)
#endif
#ifndef MM_MINBF
#define MM_MINBF 3
#endif
#ifndef MM_TURNS
#define MM_TURNS 1  // MatmulConfig.turns
#endif
#ifndef MM_DEEP_TURNS
#define MM_DEEP_TURNS 1  // MatmulConfig.deep_turns
#endif

// The B fragment of activation row r at elements e..e+3 of super-block sb, e = Frag::e0(t, c)
// (a fragment chunk's four k): f16 pairs (x0, x2) and (x1, x3); zeros past the last row. Both
// kernels take their B operands from here, which is half of why wmat_gemm's results are
// wmat_rows's bit for bit. (Loading the last row's fragment instead of zeros needs no branch
// and gives the same bits, but it held more registers and made the steps 2.5-19 % slower on
// the H200: v32a.)
// X: f32 rows (XL < 0; ldx in floats), or the same rows as their producer already rounded them
// (`pack_b`, common.cuh: f16, each group of four stored x0 x2 x1 x3; rows interleaved in groups
// of 2^XL as `packed_at` says, XL a constant so the chunks' offsets are too; ldx in halves),
// so the fragment is one 8-byte load: no conversions, half the bytes, half the registers for
// the unrolled loads (bench/NOTES.md v15: products of 4-8 rows 5 % faster; v19: the
// interleaving, 8-row products 23 % faster).
// Every format's e0(t, c) is e0(t, 0) + e0(0, c) with disjoint bits (tests/unit/
// test_packed_layout.py), so packed_at's quad slots are taken of the two parts apart: the
// lane's part once per kernel, the chunk's a constant (taken of their sum, the slot cost
// instructions in every chunk: sass_counts, mmh1_q4_k_1 800 -> 1,138 per pass).
template <int XL, class Frag>
OJ_DEV uint2 b_pair(const void* __restrict__ X, int ldx, int r, int sb, int t, int c, int nrows) {
    if (r >= nrows) return make_uint2(0u, 0u);
    if (XL >= 0) {
        const int e_slot = sb * 256 + packed_elem(Frag::e0(t, 0)) + packed_elem(Frag::e0(0, c));
        return *(const uint2*)((const u16*)X + packed_at_slot(r, e_slot, ldx, XL));
    }
    return pack_b(*(const float4*)((const float*)X + (size_t)r * ldx + sb * 256 + Frag::e0(t, c)));
}

// The 16 mma chunks of one super-block: acc[m][n] += A(cur[m]) * B(rows 8n.., chunk c).
template <class Frag, int MT, int NT, int XL>
OJ_DEV void mma_superblock(const Frag (&cur)[MT][2], float (&acc)[MT][NT][4],
                           const void* __restrict__ X, int ldx, int sb, int nrows, int gid, int t) {
#pragma unroll
    for (int c = 0; c < 16; ++c) {
        u32 b[NT][2];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const uint2 v = b_pair<XL, Frag>(X, ldx, 8 * n + gid, sb, t, c, nrows);
            b[n][0] = v.x;
            b[n][1] = v.y;
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

// The epilogue a row product runs (its `accumulate` argument): store, add to Y (residual
// connections), or finish SwiGLU. MM_SWIGLU is for a gate|up weight whose rows alternate
// between gate and up in groups of 8 (weights.interleave_halves): an m-tile's accumulators i
// and i + 2 then hold gate and up of the same feature and activation row, so the product
// writes h = silu(g) * u itself, only packed (`pack_b`'s f16 into Y read as the packed buffer
// of ldy halves per row, rows grouped as `packed_at` says for a pass of R rows), and the
// swiglu kernel and its dependent launch go (bench/NOTES.md v26). g and u are summed exactly
// as the stores sum them and h is swiglu_rows's expression: the same bits as the product
// followed by swiglu_rows.
#define MM_STORE 0
#define MM_ADD 1
#define MM_SWIGLU 2

// Sum the warps' partial tiles in warp order (red: smem of MM_NW * MT*NT*4 * 32 floats) and
// finish each output element as `mode` says (rbase: the first activation row of this CTA's
// row group, R the pass's rows).
template <int MT, int NT>
OJ_DEV void reduce_store(float* red, const float (&acc)[MT][NT][4], int n_out, float* __restrict__ Y,
                         int ldy, int row0, int rbase, int nrows, int R, int mode) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    constexpr int J = MT * NT * 4;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[(warp * J + (m * NT + n) * 4 + i) * 32 + lane] = acc[m][n][i];
    __syncthreads();
    auto warp_order_sum = [&](int j, int ln) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < MM_NW; ++w) s += red[(w * J + j) * 32 + ln];
        return s;
    };
    if (mode == MM_SWIGLU) {
        u16* hh = (u16*)Y;
        const int lg = packed_group(R);
        for (int idx = threadIdx.x; idx < J / 2 * 32; idx += blockDim.x) {
            const int p = idx >> 5, ln = idx & 31;
            const int j = (p >> 1) * 4 + (p & 1);  // accumulator i = 0 or 1: the gate's
            const int m = j / (NT * 4), n = (j / 4) % NT;
            const int r = 8 * n + 2 * (ln & 3) + (p & 1);  // activation row
            if (row0 + 16 * m < n_out && r < nrows) {
                const float g = warp_order_sum(j, ln), u = warp_order_sum(j + 2, ln);
                const int f = (row0 + 16 * m) / 2 + (ln >> 2);  // the feature of h
                store_packed_half(hh, rbase + r, f, ldy, lg, silu_f(g) * u);
            }
        }
        return;
    }
    for (int idx = threadIdx.x; idx < J * 32; idx += blockDim.x) {
        const int j = idx >> 5, ln = idx & 31;
        const float s = warp_order_sum(j, ln);
        const int m = j / (NT * 4), n = (j / 4) % NT, i = j & 3;
        const int out_row = row0 + 16 * m + (ln >> 2) + 8 * (i >> 1);  // weight row = feature
        const int r = 8 * n + 2 * (ln & 3) + (i & 1);                     // activation row
        if (out_row < n_out && r < nrows) {
            float* y = Y + (size_t)(rbase + r) * ldy + out_row;
            *y = mode == MM_ADD ? *y + s : s;
        }
    }
}

// tile: this CTA's group of 16 * MT weight rows (grid y, or its place in a pair: below);
// red: the cross-warp sum's shared memory, MM_NW * MT*NT*4 * 32 floats
template <class Frag, int MT, int NT, int XL, int DEPTH>
OJ_DEV void wmat_rows(float* red, const WDesc W, int tile, const void* __restrict__ X, int ldx,
                      float* __restrict__ Y, int ldy, int R, int accumulate) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int row0 = tile * 16 * MT;
    const int rbase = blockIdx.x * 8 * NT;
    const int nrows = min(8 * NT, R - rbase);
    X = (const char*)X + (size_t)rbase * ldx * (XL >= 0 ? 2 : 4);

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;

    const int nsb = W.cols >> 8;
    auto load_to = [&](Frag (&f)[MT][2], int sb) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) f[m][h].load(W, min(row0 + 16 * m + 8 * h + gid, W.rows - 1), sb, t);
    };
    // the activations come as an argument: nothing before oj_grid_dep() below names them
    // (tests/unit/test_cuda_launch.py reads these sources for that)
    auto run = [&](Frag (&f)[MT][2], int sb, const void* __restrict__ act) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) f[m][h].prep(t);
        mma_superblock<Frag, MT, NT, XL>(f, acc, act, ldx, sb, nrows, gid, t);
    };
    if constexpr (DEPTH == 1 && Frag::kTurns && MM_TURNS) {
        // Two buffers taking turns: the next super-block's raw blocks load into one while the
        // other is dequantized and multiplied, and the load after that is issued as soon as a
        // buffer is free. (A ring shifted by one each super-block, ring[0] = ring[1], spends a
        // register move per raw register and makes the warp wait for the load in flight before
        // it can issue the next.) Same super-blocks in the same order: the same bits. Only the
        // formats whose kernels still fit their register caps so (Frag::kTurns: Q6_K and F16
        // spilled, sm_90 ptxas).
        Frag fa[MT][2], fb[MT][2];
        if (warp < nsb) load_to(fa, warp);
        // The weights do not depend on the kernel before this one: with programmatic dependent
        // launch their first loads are in flight while it finishes (common.cuh oj_grid_dep).
        oj_grid_dep();
        for (int sb = warp; sb < nsb; sb += 2 * MM_NW) {
            const int sb2 = sb + MM_NW;
            if (sb2 < nsb) load_to(fb, sb2);
            run(fa, sb, X);
            if (sb2 >= nsb) break;
            if (sb2 + MM_NW < nsb) load_to(fa, sb2 + MM_NW);
            run(fb, sb2, X);
        }
    } else if constexpr (DEPTH == 2 && MM_DEEP_TURNS) {
        // The deep kernels (_1d), every format: three buffers taking turns, two super-blocks in
        // flight while the third is multiplied, and no register moves (the ring below spends
        // one per raw register and super-block and, with the shift, waits for the load just
        // issued; sass_counts: mmh1_q4_k_1d 458 -> 375 loop instructions per super-block,
        // q6_k 542 -> 465, q8_0 393 -> 293). Their cap of MM_MINB1D CTAs per SM leaves the
        // registers for it but for 4-16 bytes of spills in some Q6_K, Q8_0 and pair kernels
        // (sm_90 ptxas). Same super-blocks in the same order: the same bits.
        Frag fa[MT][2], fb[MT][2], fc[MT][2];
        if (warp < nsb) load_to(fa, warp);
        if (warp + MM_NW < nsb) load_to(fb, warp + MM_NW);
        oj_grid_dep();  // after the first loads, as above
        for (int sb = warp; sb < nsb; sb += 3 * MM_NW) {
            const int sb1 = sb + MM_NW, sb2 = sb + 2 * MM_NW;
            if (sb2 < nsb) load_to(fc, sb2);
            run(fa, sb, X);
            if (sb1 >= nsb) break;
            if (sb2 + MM_NW < nsb) load_to(fa, sb2 + MM_NW);
            run(fb, sb1, X);
            if (sb2 >= nsb) break;
            if (sb2 + 2 * MM_NW < nsb) load_to(fb, sb2 + 2 * MM_NW);
            run(fc, sb2, X);
        }
    } else {
        // The other formats' single-super-block kernels (and the deep ones without
        // MatmulConfig.deep_turns): a ring of raw blocks, ring[d] the
        // super-block d steps ahead, shifted by one each super-block. (With DEPTH 2 the shift
        // makes the compiler wait for the load just issued, so one super-block is in flight in
        // effect; an unrolled ring that kept two was no faster, bench/NOTES.md v16a.)
        Frag ring[DEPTH + 1][MT][2];
#pragma unroll
        for (int d = 0; d < DEPTH; ++d)
            if (warp + d * MM_NW < nsb) load_to(ring[d], warp + d * MM_NW);
        oj_grid_dep();  // after the first loads, as above
        for (int sb = warp; sb < nsb; sb += MM_NW) {
            if (sb + DEPTH * MM_NW < nsb) load_to(ring[DEPTH], sb + DEPTH * MM_NW);
            run(ring[0], sb, X);
#pragma unroll
            for (int d = 0; d < DEPTH; ++d)
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int h = 0; h < 2; ++h) ring[d][m][h] = ring[d + 1][m][h];
        }
    }

    reduce_store<MT, NT>(red, acc, W.rows, Y, ldy, row0, rbase, nrows, R, accumulate);
}

#define OJ_MM_KERNEL(NAME, MT, NT, MINB, XL, DEPTH, FRAG)                                         \
    extern "C" __global__ void __launch_bounds__(32 * MM_NW, MINB)                                \
        NAME(const u8* p0, const u8* p1, const u8* p2, const u8* p3, int rows, int cols,          \
             const void* X, int ldx, float* Y, int ldy, int R, int accumulate) {                  \
        __shared__ float red[MM_NW * MT * NT * 4 * 32];                                           \
        const WDesc W = {p0, p1, p2, p3, rows, cols};                                             \
        wmat_rows<FRAG, MT, NT, XL, DEPTH>(red, W, blockIdx.y, X, ldx, Y, ldy, R, accumulate);    \
    }

// Two weights of different formats on the same activations (a mixer's input projections whose
// types differ: the 27B Q4_K_M's Q6_K qkv beside its Q4_K gate|beta|alpha, its Q4_K q|k beside
// its Q6_K v) in ONE launch: the first weight's tiles on grid rows y below its tile count, the
// second's after them, each product into its own columns of Y (ya, yb: column offsets). A CTA
// runs its own weight's code, so the results are two launches' bits, with one dependent launch
// (and one partial last wave) fewer per mixer (bench/NOTES.md v26). Packed activations only:
// the mixers' inputs come from rmsnorm.
#define OJ_MM_PAIR_KERNEL(NAME, MT, NT, MINB, XL, DEPTH, FA, FB)                                  \
    extern "C" __global__ void __launch_bounds__(32 * MM_NW, MINB)                                \
        NAME(const u8* a0, const u8* a1, const u8* a2, const u8* a3, int rows_a, const u8* b0,    \
             const u8* b1, const u8* b2, const u8* b3, int rows_b, int cols, const void* X,       \
             int ldx, float* Y, int ldy, int ya, int yb, int R, int accumulate) {                 \
        __shared__ float red[MM_NW * MT * NT * 4 * 32];                                           \
        const int tiles_a = (rows_a + 16 * MT - 1) / (16 * MT);                                   \
        if ((int)blockIdx.y < tiles_a) {                                                          \
            const WDesc W = {a0, a1, a2, a3, rows_a, cols};                                       \
            wmat_rows<FA, MT, NT, XL, DEPTH>(red, W, blockIdx.y, X, ldx, Y + ya, ldy, R, accumulate); \
        } else {                                                                                  \
            const WDesc W = {b0, b1, b2, b3, rows_b, cols};                                       \
            wmat_rows<FB, MT, NT, XL, DEPTH>(red, W, blockIdx.y - tiles_a, X, ldx, Y + yb, ldy, R, \
                                             accumulate);                                         \
        }                                                                                         \
    }

// Tilings chosen by bench/decode.py's sweep on an H200 (bench/NOTES.md): one 16-row tile per warp
// and 4 CTAs/SM for single-row products (with the tile-major weights; 3 with row-major ones),
// two tiles per warp (B fragments shared) above that.
// The accumulation order of an output element is the same in every instantiation (same K
// split, same chunk order, one mma per chunk), so results do not depend on the row count.
// mm_<type>_<NT> take f32 activations, mmh_<type>_<NT> packed f16 ones in groups of 8 rows
// (b_pair), mmh1_ / mmh4_<type>_1 packed ones of 1-row / 2-4-row passes (groups of 1 and 4:
// kernels.packed_group).
// <...>_1d: the single-n-tile kernel with DEPTH 2 and MM_MINB1D CTAs per SM (more registers)
// for narrow products, whose grid (e.g. 320 CTAs for 5,120 features) fills less than one wave
// at 4 CTAs per SM anyway: 2 % off the weight pass at 1-4 rows (bench/NOTES.md v16). Same
// order, same bits.
// <...>_2f: the two-n-tile kernel with MM_MTF m-tiles per warp and MM_MINBF CTAs per SM, for
// passes of 9 to MatmulConfig.few_rows rows: fewer registers, more warps per SM, the activation
// rows read once per m-tile (weight pass at 12 rows 10.62 -> 10.00 ms, at 16 rows 10.98 ->
// 11.67, bench/NOTES.md v20b). Same order, same bits.
// K: the kernel macro (OJ_MM_KERNEL, or OJ_MM_PAIR_KERNEL for the pairs below), then its
// fragment type(s).
#define OJ_MM_ONE(K, PREFIX, XL, ...)                              \
    K(PREFIX##_1, MM_MT1, 1, MM_MINB1, XL, 1, __VA_ARGS__)         \
    K(PREFIX##_1d, MM_MT1, 1, MM_MINB1D, XL, 2, __VA_ARGS__)
#define OJ_MM_NT(K, PREFIX, XL, ...)                               \
    OJ_MM_ONE(K, PREFIX, XL, __VA_ARGS__)                          \
    K(PREFIX##_2, MM_MT, 2, MM_MINB, XL, 1, __VA_ARGS__)           \
    K(PREFIX##_2f, MM_MTF, 2, MM_MINBF, XL, 1, __VA_ARGS__)        \
    K(PREFIX##_3, MM_MT, 3, MM_MINB, XL, 1, __VA_ARGS__)           \
    K(PREFIX##_4, MM_MT, 4, MM_MINB, XL, 1, __VA_ARGS__)
#define OJ_MM_ALL_NT(TYPE, FRAG)                     \
    OJ_MM_NT(OJ_MM_KERNEL, mm_##TYPE, -1, FRAG)      \
    OJ_MM_NT(OJ_MM_KERNEL, mmh_##TYPE, 3, FRAG)      \
    OJ_MM_ONE(OJ_MM_KERNEL, mmh1_##TYPE, 0, FRAG)    \
    OJ_MM_ONE(OJ_MM_KERNEL, mmh4_##TYPE, 2, FRAG)

// mmp_ / mmp1_ / mmp4_<a>_<b>_<NT>: the pairs, on packed activations in groups of 8 / 1 / 4 as
// mmh_ / mmh1_ / mmh4_, with the same tilings; for the pairs of formats of the K-quant mixes
// (build.PAIRED_TYPES: first the lower ggml type). Other pairs run as two launches.
#define OJ_MM_PAIRS(A, B, FA, FB)                                 \
    OJ_MM_NT(OJ_MM_PAIR_KERNEL, mmp_##A##_##B, 3, FA, FB)         \
    OJ_MM_ONE(OJ_MM_PAIR_KERNEL, mmp1_##A##_##B, 0, FA, FB)       \
    OJ_MM_ONE(OJ_MM_PAIR_KERNEL, mmp4_##A##_##B, 2, FA, FB)

// Many rows (prefill): a tiled product. A CTA of GM warps owns 16*GM weight rows (GM m-tiles)
// x 64 activation rows (8 n-tiles). Per half super-block each warp dequantizes one m-tile into
// shared memory (A fragments, in the register kernel's fragment order) and converts 8/GM n-tiles
// of activations (B fragments); then each warp runs its 2 x 4 tile of mma from shared memory.
// So a weight is dequantized once per 64 rows and an activation converted once per 16*GM
// features; the next super-block's raw weight blocks load during this one's work. Batch
// invariance: the super-blocks are visited in the register kernel's K split (class w = sb mod
// MM_NW, each class summed from zero in order, the classes added in order), so every output
// element is bit for bit what wmat_rows gives, at any row count.
using GemmTiles = float[2][4][4];  // a warp's 2 x 4 mma tiles of 4 accumulators
OJ_DEV void tiles_zero(GemmTiles& a) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) a[i][j][q] = 0.0f;
}
OJ_DEV void tiles_add(GemmTiles& total, const GemmTiles& a) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) total[i][j][q] += a[i][j][q];
}

template <class Frag, int GM, int XL>
OJ_DEV void wmat_gemm(const WDesc W, const void* __restrict__ X, int ldx, float* __restrict__ Y,
                      int ldy, int R, int accumulate) {
    __shared__ uint4 As[GM][8][32];  // [m-tile][chunk of the half][lane]: a0 a1 a2 a3
    __shared__ uint2 Bs[8][8][32];   // [n-tile][chunk of the half][lane]: b0 b1
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
    const int wm = warp >> 1, wn = warp & 1;  // this warp's m-tiles 2wm.., n-tiles 4wn..
    const int row0 = blockIdx.y * 16 * GM;
    const int rbase = blockIdx.x * 64;
    const int nrows = min(64, R - rbase);
    X = (const char*)X + (size_t)rbase * ldx * (XL >= 0 ? 2 : 4);
    Y += (size_t)rbase * ldy;

    GemmTiles total, acc;
    tiles_zero(total);

    const int nsb = W.cols >> 8;
    // Software pipeline over the (class, super-block) sequence: the next super-block's raw
    // blocks are in flight while this one is dequantized and multiplied (one CTA per SM
    // leaves too few warps to hide the load otherwise).
    Frag fa[2], fnext[2];
    auto load = [&](Frag (&f)[2], int sb) {
#pragma unroll
        for (int h = 0; h < 2; ++h) f[h].load(W, min(row0 + 16 * warp + 8 * h + gid, W.rows - 1), sb, t);
    };
    if (nsb > 0) load(fa, 0);
    oj_grid_dep();  // after the first weight loads, as in wmat_rows
    for (int w = 0; w < MM_NW; ++w) {
        tiles_zero(acc);
        for (int sb = w; sb < nsb; sb += MM_NW) {
            // the next item: this class's next super-block, else the next class's first
            const bool same_class = sb + MM_NW < nsb;
            if (same_class || (w + 1 < MM_NW && w + 1 < nsb))
                load(fnext, same_class ? sb + MM_NW : w + 1);
#pragma unroll
            for (int h = 0; h < 2; ++h) fa[h].prep(t);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
#pragma unroll
                for (int cc = 0; cc < 8; ++cc) {
                    u32 a0, a1, a2, a3;
                    fa[0].get(8 * half + cc, a0, a2);
                    fa[1].get(8 * half + cc, a1, a3);
                    As[warp][cc][lane] = make_uint4(a0, a1, a2, a3);
                }
#pragma unroll
                for (int q = 0; q < 8 / GM; ++q) {
                    const int n = (8 / GM) * warp + q, r = 8 * n + gid;
#pragma unroll
                    for (int cc = 0; cc < 8; ++cc)
                        Bs[n][cc][lane] = b_pair<XL, Frag>(X, ldx, r, sb, t, 8 * half + cc, nrows);
                }
                __syncthreads();
#pragma unroll
                for (int cc = 0; cc < 8; ++cc) {
                    uint4 a[2];
                    uint2 b[4];
#pragma unroll
                    for (int i = 0; i < 2; ++i) a[i] = As[2 * wm + i][cc][lane];
#pragma unroll
                    for (int j = 0; j < 4; ++j) b[j] = Bs[4 * wn + j][cc][lane];
#pragma unroll
                    for (int i = 0; i < 2; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            mma_16816(acc[i][j], a[i].x, a[i].y, a[i].z, a[i].w, b[j].x, b[j].y);
                }
                __syncthreads();  // the next half overwrites As and Bs
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) fa[h] = fnext[h];
        }
        tiles_add(total, acc);
    }

#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int out_row = row0 + 16 * (2 * wm + i) + gid + 8 * (q >> 1);
                const int r = 8 * (4 * wn + j) + 2 * t + (q & 1);
                if (out_row < W.rows && r < nrows) {
                    float* y = Y + (size_t)r * ldy + out_row;
                    *y = accumulate ? *y + total[i][j][q] : total[i][j][q];
                }
            }
}

// mmg_*: 64 weight rows per CTA (4 warps, 2 CTAs/SM); mmg8_*: 128 (8 warps, X read half as
// often, 48 KiB of shared memory). mmgh_* / mmg8h_*: the same on packed f16 activations (every
// CTA reads its 64 activation rows whole: from L2, 2 instead of 4 bytes per element).
#define OJ_MMG_KERNEL(NAME, FRAG, GM, MINB, XL)                                                   \
    extern "C" __global__ void __launch_bounds__(32 * GM, MINB)                                   \
        NAME(const u8* p0, const u8* p1, const u8* p2, const u8* p3, int rows, int cols,          \
             const void* X, int ldx, float* Y, int ldy, int R, int accumulate) {                  \
        const WDesc W = {p0, p1, p2, p3, rows, cols};                                             \
        wmat_gemm<FRAG, GM, XL>(W, X, ldx, Y, ldy, R, accumulate);                                \
    }
#define OJ_MMG_BOTH(NAME, FRAG)                 \
    OJ_MMG_KERNEL(mmg_##NAME, FRAG, 4, 2, -1)   \
    OJ_MMG_KERNEL(mmg8_##NAME, FRAG, 8, 1, -1)  \
    OJ_MMG_KERNEL(mmgh_##NAME, FRAG, 4, 2, 3)   \
    OJ_MMG_KERNEL(mmg8h_##NAME, FRAG, 8, 1, 3)

// ---- The kernels (bench probes define OJ_MM_DEVICE_ONLY to take the device functions above
// without them) ----
#ifndef OJ_MM_DEVICE_ONLY
// F32 weights (the tiny DeltaNet beta/alpha projections of every mix, and whole f32 models):
// plain f32 FMAs, so an f32 model's products are as exact as the reference's. A warp owns one
// weight row and 8 activation rows (grid: rows/4 x R/8); lane l sums k = 4l + 128j in order,
// then a fixed shuffle tree: the order never depends on R (batch invariance).
extern "C" __global__ void __launch_bounds__(128)
    mm_f32_exact(const float* __restrict__ W, int rows, int cols, const float* __restrict__ X,
                 int ldx, float* __restrict__ Y, int ldy, int R, int accumulate) {
    oj_grid_dep_early();
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

OJ_MM_ALL_NT(q4_k, FragQ4K)
OJ_MM_ALL_NT(q5_k, FragQ5K)
OJ_MM_ALL_NT(q6_k, FragQ6K)
OJ_MM_ALL_NT(q8_0, FragQ8_0)
OJ_MM_ALL_NT(f16, FragF16)

OJ_MM_PAIRS(q4_k, q5_k, FragQ4K, FragQ5K)
OJ_MM_PAIRS(q4_k, q6_k, FragQ4K, FragQ6K)
OJ_MM_PAIRS(q5_k, q6_k, FragQ5K, FragQ6K)

OJ_MMG_BOTH(q4_k, FragQ4K)
OJ_MMG_BOTH(q5_k, FragQ5K)
OJ_MMG_BOTH(q6_k, FragQ6K)
OJ_MMG_BOTH(q8_0, FragQ8_0)
OJ_MMG_BOTH(f16, FragF16)

// Dequantized rows of a weight (the token embedding gather, and tests of the formats).
//   tok: i32 [T] row ids;  out: f32 [T][W.cols]
// grid (T, ceil(cols / blockDim.x)): one element a thread. (One CTA per row, each thread
// dequantizing cols / 256 elements one after another, took 12.9 us for a row of 5,120 on the
// H200: a chain of dependent loads per element; bench/NOTES.md v36f.)
extern "C" __global__ void embed_rows(const u8* p0, const u8* p1, const u8* p2, const u8* p3,
                                      int rows, int cols, int type, const int* tok, float* out) {
    oj_grid_dep_early();
    const WDesc W = {p0, p1, p2, p3, rows, cols};
    const int t = blockIdx.x, k = blockIdx.y * blockDim.x + threadIdx.x;
    if (k < cols) out[(size_t)t * cols + k] = wget(W, type, tok[t], k);
}
#endif

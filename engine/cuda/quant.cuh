// Weight formats as the GPU holds them, and per-format device functions that turn one
// 256-element super-block of one weight row into mma A-fragments (f16x2 registers).
//
// GPU layouts (made by engine/cuda/weights.py from the GGUF blocks). A unit is one row's 256
// elements of one super-block; units are in tile-major order U = [rows/16][K/256][16] (rows
// padded to a multiple of 16; `unit_index` below), each unit in GGUF's block encoding:
//   Q4_K  p0: [U] x 144 B  (one GGUF block; 16-byte aligned)
//   Q5_K  p0: [U] x 176 B
//   Q6_K  p0: ql [U][128] u8, p1: qh [U][64] u8, p2: scales [U][16] i8, p3: d [U] f16
//         (planes: 210-byte blocks are only 2-byte aligned, planes allow 8/16-byte loads)
//   Q8_0  p0: qs [U][256] i8, p1: d [U][8] f16  (planes, same reason)
//   F16   p0: [U][256] f16
//   F32   p0: [rows][K] f32, row-major (BF16 is widened to F32 at upload)
//
// Fragment mapping. mma.m16n8k16 sums over k inside a 16-wide chunk; any permutation of the k
// positions is fine as long as A (weights) and B (activations) agree. Thread t (= lane & 3)
// of a warp owns, for super-block chunk c (0..15), four consecutive elements e0(t,c)+0..3:
// A register "02" holds elements (e0, e0+2), register "13" holds (e0+1, e0+3), for k slots
// (2t, 2t+1) and (2t+8, 2t+9). This lets each thread dequantize whole 32-bit words of quants
// with bit tricks (0x6400 | q is the f16 value 1024 + q) and load B as one float4.
#pragma once
#include "common.cuh"

struct WDesc {
    const u8* p0;  // see layouts above
    const u8* p1;
    const u8* p2;
    const u8* p3;
    int rows;      // N (output features)
    int cols;      // K (input features), a multiple of 256
};

// Tile-major order of the 256-element units (one super-block of one row) of every format but
// F32: the 16 rows of a tile are adjacent for each super-block, so a warp's loads of one
// super-block fall in one contiguous span (bench/weight_access.py: the row kernels' pattern
// reads at 4.0 TB/s, against 3.1-3.3 from GGUF's row-major order, at 3 CTAs per SM). The
// row count is padded to a multiple of 16 on the GPU.
OJ_DEV size_t unit_index(const WDesc& W, int row, int sb) {
    return ((size_t)(row >> 4) * (W.cols >> 8) + sb) * 16 + (row & 15);
}

// f16x2 constants (both halves equal)
#define H2_1024 0x64006400u       // 1024: OR-ed onto up to 10 low bits b it gives 1024 + b
#define H2_1056 0x64206420u       // 1024 + 32 (the Q6_K offset)
#define H2_1152 0x64806480u       // 1024 + 128 (signed bytes stored XOR 0x80)
#define H2_SIXTEENTH 0x2C002C00u  // 1/16
#define H2_M96 0xD600D600u        // -96

OJ_DEV u32 byte_of(const uint4& v, int i) { return (word_of(v, i >> 2) >> (8 * (i & 3))) & 0xFFu; }

// (x & MASK) | y in one LOP3: written in C the compiler spends two instructions when both
// operands are immediates (a LOP3 encodes one), and this is the inner loop of every product.
template <u32 MASK>
OJ_DEV u32 and_or(u32 x, u32 y) {
    u32 r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "n"(MASK), "r"(y));
    return r;
}
template <u32 MASK, u32 OR>
OJ_DEV u32 and_or(u32 x) {
    u32 r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(x), "n"(MASK), "n"(OR));
    return r;
}
// Low / high half of an f16x2 in both halves. Written as PTX half moves, so ptxas folds the
// splat into the f16x2 instruction that reads it (an operand's .H0_H0 / .H1_H1 selector) and
// no register holds it: the one-row Q4_K kernel's loop 868 -> 816 instructions per two
// super-blocks (bench/sass_counts.py), the same values. The _prmt forms (a PRMT each) stay for
// Q6_K, whose wide kernels spill a few more bytes with the folded form.
OJ_DEV u32 splat_lo(u32 v) {
    u32 d;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {l, l}; }" : "=r"(d) : "r"(v));
    return d;
}
OJ_DEV u32 splat_hi(u32 v) {
    u32 d;
    asm("{ .reg .b16 l, h; mov.b32 {l, h}, %1; mov.b32 %0, {h, h}; }" : "=r"(d) : "r"(v));
    return d;
}
OJ_DEV u32 splat_lo_prmt(u32 v) { return __byte_perm(v, 0u, 0x1010); }
OJ_DEV u32 splat_hi_prmt(u32 v) { return __byte_perm(v, 0u, 0x3232); }

// 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes at scale_base (Q4_K/Q5_K).
// hdr = the first 16 bytes of the block: d, dmin, scales[12].
OJ_DEV void kquant_scale_min(const uint4& hdr, int j, float& sc, float& mn) {
    // packed byte i of scales[] is byte 4 + i of the header
    if (j < 4) {
        sc = (float)(byte_of(hdr, 4 + j) & 63u);
        mn = (float)(byte_of(hdr, 8 + j) & 63u);
    } else {
        sc = (float)((byte_of(hdr, 8 + j) & 0xFu) | ((byte_of(hdr, j) >> 6) << 4));
        mn = (float)((byte_of(hdr, 8 + j) >> 4) | ((byte_of(hdr, 4 + j) >> 6) << 4));
    }
}

// Q4_K and Q5_K build each weight d*sc*q - dmin*m as
//     A = (q*sc*2^-14) * (d*2^14) + Mhi, then + Mlo            (fma.f16x2, then add.f16x2)
// where the code q comes from a LOP3 as an f16 subnormal (a nibble masked in place, 0x000q, is
// q * 2^-24 exactly; a high nibble 0x00q0 is 16q * 2^-24; a Q5_K code's fifth bit joins it),
// so one mul.f16x2 by sc*2^10 (sc*2^6 for a high nibble) gives q*sc*2^-14 exactly (q*sc <
// 2^11); d*2^14 is d exactly; the fma rounds d*sc*q + Mhi once; and Mhi + Mlo is -dmin*m as
// an f16 pair (Mlo = the fma's exact remainder of the f16 product). So a weight is rounded
// about once, at its own size. (Built as fma(q, f16(d*sc), f16(-dmin*m)) before, the two f16
// products, each of the order of 8 d*sc, put their rounding errors into every weight of a
// sub-block: top-1 99.48 % (q4_k_m) and 99.27 % (mixed) over 4,800 positions on the H200
// against 99.6-99.7 % for forms rounded once, bench/NOTES.md v22c-v23.) A pair of weights
// costs a LOP3, an HMUL2, an HFMA2 and an HADD2, one more than that form; the scales need no
// f32 arithmetic. d*2^14 overflows f16 for d > 4 (weights of magnitude ~4,000, far beyond any
// trained model's; weights.py refuses such blocks).
#define H2_2P14 0x74007400u    // 2^14
#define H2_SC_Q4K 0x54006400u  // f16x2 (2^10, 2^6): low-nibble sub-blocks 2g, high 2g + 1
#define H2_SC_Q5K 0x64006400u  // 2^10 for both

// The four halves of two f16x2 values, each as a splat: out = lo.lo, lo.hi, hi.lo, hi.hi.
OJ_DEV void splat_pairs(u32 lo, u32 hi, u32 (&out)[4]) {
    out[0] = splat_lo(lo);
    out[1] = splat_hi(lo);
    out[2] = splat_lo(hi);
    out[3] = splat_hi(hi);
}

// The splats a thread's four sub-blocks (2g, 2g+1, 4+2g, 5+2g; g = t >> 1) need: scm[s] =
// sc * mul (exact), mhi[s] / mlo[s] = -dmin*m as an f16 pair, and dd = d * 2^14.
OJ_DEV void kquant_splats(const uint4& hdr, int t, u32 mul, u32 (&scm)[4], u32 (&mhi)[4],
                          u32 (&mlo)[4], u32& dd) {
    const u32 sel = 0x4140u + 0x0202u * (u32)(t >> 1);  // bytes 2g, 2g+1 -> low bytes of halves
    const u32 y = __byte_perm(hdr.y, 0u, sel), z = __byte_perm(hdr.z, 0u, sel);
    const u32 w = __byte_perm(hdr.w, 0u, sel);
    // the 6-bit scales and mins as exact f16 integers, two sub-blocks at a time
    const u32 sc_lo = hsub2(and_or<0x003F003Fu, H2_1024>(y), H2_1024);
    const u32 mn_lo = hsub2(and_or<0x003F003Fu, H2_1024>(z), H2_1024);
    const u32 sc_hi = hsub2(and_or<0x000F000Fu>(w, and_or<0x00300030u, H2_1024>(y >> 2)), H2_1024);
    const u32 mn_hi = hsub2(and_or<0x000F000Fu>(w >> 4, and_or<0x00300030u, H2_1024>(z >> 2)), H2_1024);
    dd = hmul2(splat_lo(hdr.x), H2_2P14);
    const u32 ndmin2 = hneg2(splat_hi(hdr.x));
    const u32 p_lo = hmul2(sc_lo, mul), p_hi = hmul2(sc_hi, mul);
    const u32 h_lo = hmul2(ndmin2, mn_lo), h_hi = hmul2(ndmin2, mn_hi);
    // the exact remainder of each f16 product (fma), rounded: what h_lo / h_hi left over
    const u32 l_lo = hfma2(ndmin2, mn_lo, hneg2(h_lo));
    const u32 l_hi = hfma2(ndmin2, mn_hi, hneg2(h_hi));
    splat_pairs(p_lo, p_hi, scm);
    splat_pairs(h_lo, h_hi, mhi);
    splat_pairs(l_lo, l_hi, mlo);
}

// The A pair of two codes (f16 subnormals) of sub-block s.
#define KQUANT_A(code, s) hadd2(hfma2(hmul2((code), scm[s]), dd, mhi[s]), mlo[s])

// ---------------------------------------------------------------------------------------------
struct FragQ4K {
    static constexpr bool kTurns = true;  // wmat_rows: two raw buffers taking turns
    uint4 hdr, q0, q1;
    u32 scm[4], mhi[4], mlo[4], dd;  // sub-blocks 2G0, 2G0+1, 2G1, 2G1+1 (G as e0)
    OJ_HD static int e0(int t, int c) {
        const int w = c >> 1, h = c & 1, G = (w < 4 ? 0 : 2) + (t >> 1);
        return 64 * G + 32 * h + 16 * (t & 1) + 4 * (w & 3);
    }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        const u8* blk = W.p0 + unit_index(W, row, sb) * 144;
        hdr = *(const uint4*)blk;
        q0 = *(const uint4*)(blk + 16 + 16 * t);
        q1 = *(const uint4*)(blk + 80 + 16 * t);
    }
    OJ_DEV void prep(int t) { kquant_splats(hdr, t, H2_SC_Q4K, scm, mhi, mlo, dd); }
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const int w = c >> 1, h = c & 1, s = (w < 4 ? 0 : 2) + h;
        const u32 word = w < 4 ? word_of(q0, w & 3) : word_of(q1, w & 3);
        const u32 mask = h ? 0x00F000F0u : 0x000F000Fu;
        a02 = KQUANT_A(word & mask, s);
        a13 = KQUANT_A((word >> 8) & mask, s);
    }
};

struct FragQ5K {
    static constexpr bool kTurns = true;
    uint4 hdr, qh, q0, q1;
    u32 scm[4], mhi[4], mlo[4], dd;
    int t_;
    OJ_HD static int e0(int t, int c) { return FragQ4K::e0(t, c); }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        const u8* blk = W.p0 + unit_index(W, row, sb) * 176;
        hdr = *(const uint4*)blk;
        qh = *(const uint4*)(blk + 16 + 16 * (t & 1));
        q0 = *(const uint4*)(blk + 48 + 16 * t);
        q1 = *(const uint4*)(blk + 112 + 16 * t);
        t_ = t;
    }
    OJ_DEV void prep(int t) { kquant_splats(hdr, t, H2_SC_Q5K, scm, mhi, mlo, dd); }
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const int w = c >> 1, h = c & 1, s = (w < 4 ? 0 : 2) + h;
        const int G = (w < 4 ? 0 : 2) + (t_ >> 1), bit = 2 * G + h;
        const u32 word = w < 4 ? word_of(q0, w & 3) : word_of(q1, w & 3);
        const u32 hw = word_of(qh, w & 3);
        const u32 nib = word >> (4 * h);
        const u32 q02 = (nib & 0x000F000Fu) | (((hw >> bit) & 0x00010001u) << 4);
        const u32 q13 = ((nib >> 8) & 0x000F000Fu) | (((hw >> (bit + 8)) & 0x00010001u) << 4);
        a02 = KQUANT_A(q02, s);
        a13 = KQUANT_A(q13, s);
    }
};
#undef KQUANT_A

struct FragQ6K {
    static constexpr bool kTurns = false;
    uint2 ql[2][2], qh[2];
    uint4 sc;
    u16 dbits;
    u32 ds[2][4];
    OJ_HD static int e0(int t, int c) {
        const int n = c >> 3, q = (c >> 1) & 3, j = c & 1;
        return 128 * n + 32 * q + 8 * t + 4 * j;
    }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        const size_t b = unit_index(W, row, sb);
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int p = 0; p < 2; ++p) ql[n][p] = *(const uint2*)(W.p0 + b * 128 + 64 * n + 32 * p + 8 * t);
            qh[n] = *(const uint2*)(W.p1 + b * 64 + 32 * n + 8 * t);
        }
        sc = *(const uint4*)(W.p2 + b * 16);
        dbits = *(const u16*)(W.p3 + b * 2);
    }
    // ds[n][q] = d * scale(8n + 2q + g) (g = t >> 1) as f16x2 splats, two at a time: the i8
    // scales become exact f16 by the XOR-0x80 + 1152 trick, and d * sc (11 x 8 bits) is exact
    // in f32, so the f16 product rounds to the bits of the f32 one.
    OJ_DEV void prep(int t) {
        const u32 d2 = splat_lo_prmt(dbits), sel = 0x4240u + 0x0101u * (u32)(t >> 1);
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int qh2 = 0; qh2 < 2; ++qh2) {
                const u32 b = word_of(sc, 2 * n + qh2) ^ 0x80808080u;
                const u32 p = hmul2(d2, hsub2(__byte_perm(b, 0x64646464u, sel), H2_1152));
                ds[n][2 * qh2] = splat_lo_prmt(p);
                ds[n][2 * qh2 + 1] = splat_hi_prmt(p);
            }
    }
    // 6-bit codes as f16: 4 low bits | 2 high bits << 4 OR-ed onto 1024 (q < 2), or, for the
    // high nibbles (q >= 2), 16 x that read in place (x/16 - 96 = code - 32).
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const int n = c >> 3, q = (c >> 1) & 3, j = c & 1;
        const u32 lw = j ? ql[n][q & 1].y : ql[n][q & 1].x;
        const u32 hw = j ? qh[n].y : qh[n].x;
        u32 c02, c13;
        if (q < 2) {
            const u32 h02 = q == 0 ? hw << 4 : hw << 2, h13 = q == 0 ? hw >> 4 : hw >> 6;
            c02 = hsub2(and_or<0x000F000Fu>(lw, and_or<0x00300030u, H2_1024>(h02)), H2_1056);
            c13 = hsub2(and_or<0x000F000Fu>(lw >> 8, and_or<0x00300030u, H2_1024>(h13)), H2_1056);
        } else {
            const u32 h02 = q == 2 ? hw << 4 : hw << 2, h13 = q == 2 ? hw >> 4 : hw >> 6;
            c02 = hfma2(and_or<0x00F000F0u>(lw, and_or<0x03000300u, H2_1024>(h02)), H2_SIXTEENTH, H2_M96);
            c13 = hfma2(and_or<0x00F000F0u>(lw >> 8, and_or<0x03000300u, H2_1024>(h13)), H2_SIXTEENTH, H2_M96);
        }
        a02 = hmul2(c02, ds[n][q]);
        a13 = hmul2(c13, ds[n][q]);
    }
};

struct FragQ8_0 {
    static constexpr bool kTurns = false;
    uint4 qv[4];
    u32 dpair;  // the two f16 block scales of this thread's 64 elements
    u32 dsp[2];
    OJ_HD static int e0(int t, int c) { return 64 * t + 4 * c; }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        const size_t u = unit_index(W, row, sb);
        const u8* q = W.p0 + u * 256 + 64 * t;
#pragma unroll
        for (int i = 0; i < 4; ++i) qv[i] = *(const uint4*)(q + 16 * i);
        dpair = *(const u32*)(W.p1 + (u * 8 + 2 * t) * 2);
    }
    OJ_DEV void prep(int) {
        dsp[0] = (dpair & 0xFFFFu) | (dpair << 16);
        dsp[1] = (dpair >> 16) | (dpair & 0xFFFF0000u);
    }
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const u32 u = word_of(qv[c >> 2], c & 3) ^ 0x80808080u;  // byte = q + 128
        const u32 p02 = __byte_perm(u, 0x64646464u, 0x4240), p13 = __byte_perm(u, 0x64646464u, 0x4341);
        a02 = hmul2(hsub2(p02, H2_1152), dsp[c >> 3]);
        a13 = hmul2(hsub2(p13, H2_1152), dsp[c >> 3]);
    }
};

// F16 rows are read chunk by chunk (a format that is rare on the hot path). F32 weights have
// their own exact kernel (matmul.cu).
struct FragF16 {
    static constexpr bool kTurns = false;
    const u8* base;
    OJ_HD static int e0(int t, int c) { return 64 * t + 4 * c; }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        base = W.p0 + (unit_index(W, row, sb) * 256 + 64 * t) * 2;
    }
    OJ_DEV void prep(int) {}
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const uint2 v = *(const uint2*)(base + 8 * c);
        a02 = __byte_perm(v.x, v.y, 0x5410);
        a13 = __byte_perm(v.x, v.y, 0x7632);
    }
};

// ---------------------------------------------------------------------------------------------
// One weight element, scalar (embedding rows, tests). k < W.cols.
OJ_DEV float wget(const WDesc& W, int type, int row, int k) {
    const int sb = k >> 8, e = k & 255;
    const size_t u = unit_index(W, row, sb);
    if (type == GGML_Q4_K || type == GGML_Q5_K) {
        const int bs = type == GGML_Q4_K ? 144 : 176, qs_off = type == GGML_Q4_K ? 16 : 48;
        const u8* blk = W.p0 + u * bs;
        const uint4 hdr = *(const uint4*)blk;
        const int G = e >> 6, h = (e >> 5) & 1, l = e & 31;
        const u32 byte = blk[qs_off + 32 * G + l];
        u32 q = h ? byte >> 4 : byte & 15u;
        if (type == GGML_Q5_K) q += ((blk[16 + l] >> (2 * G + h)) & 1u) << 4;
        float sc, mn;
        kquant_scale_min(hdr, 2 * G + h, sc, mn);
        return h2f((u16)(hdr.x & 0xFFFFu)) * sc * (float)q - h2f((u16)(hdr.x >> 16)) * mn;
    }
    if (type == GGML_Q6_K) {
        const int n = e >> 7, q = (e >> 5) & 3, l = e & 31;
        const u32 lb = W.p0[u * 128 + 64 * n + 32 * (q & 1) + l];
        const u32 hb = W.p1[u * 64 + 32 * n + l];
        const int code = (int)(((q >> 1) ? lb >> 4 : lb & 15u) | (((hb >> (2 * q)) & 3u) << 4)) - 32;
        const float d = h2f(*(const u16*)(W.p3 + u * 2));
        return d * (float)((const i8*)W.p2)[u * 16 + (e >> 4)] * (float)code;
    }
    if (type == GGML_Q8_0) {
        const size_t i = u * 256 + e;
        return h2f(((const u16*)W.p1)[i >> 5]) * (float)((const i8*)W.p0)[i];
    }
    if (type == GGML_F16) return h2f(((const u16*)W.p0)[u * 256 + e]);
    return ((const float*)W.p0)[(size_t)row * W.cols + k];
}

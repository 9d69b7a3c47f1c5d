// Weight formats as the GPU holds them, and per-format device functions that turn one
// 256-element super-block of one weight row into mma A-fragments (f16x2 registers).
//
// GPU layouts (made by engine/cuda/weights.py from the GGUF blocks):
//   Q4_K  p0: blocks [rows][K/256] x 144 B  (native GGUF layout; 16-byte aligned)
//   Q5_K  p0: blocks [rows][K/256] x 176 B  (native)
//   Q6_K  p0: ql [rows][K/256][128] u8, p1: qh [rows][K/256][64] u8,
//         p2: scales [rows][K/256][16] i8, p3: d [rows][K/256] f16   (planes: 210-byte blocks
//         are only 2-byte aligned, planes allow 8/16-byte loads)
//   Q8_0  p0: qs [rows][K] i8, p1: d [rows][K/32] f16                (planes, same reason)
//   F16   p0: [rows][K] f16;   F32 p0: [rows][K] f32 (BF16 is widened to F32 at upload)
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

#define H2_1024 0x64006400u
#define H2_1056 0x64206420u
#define H2_1152 0x64806480u

OJ_DEV u32 word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
OJ_DEV u32 byte_of(const uint4& v, int i) { return (word_of(v, i >> 2) >> (8 * (i & 3))) & 0xFFu; }

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

// The four sub-block scales a thread of the mma fragment needs (Q4_K and Q5_K share the
// super-block header layout): f16x2 splats of d*sc and -dmin*mn.
OJ_DEV void kquant_splat_scales(const uint4& hdr, int t, u32 (&ds)[4], u32 (&dmn)[4]) {
    const float d = h2f((u16)(hdr.x & 0xFFFFu)), dmin = h2f((u16)(hdr.x >> 16));
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        const int j = 2 * ((s >> 1) * 2 + (t >> 1)) + (s & 1);
        float sc, mn;
        kquant_scale_min(hdr, j, sc, mn);
        ds[s] = h2_splat(d * sc);
        dmn[s] = h2_splat(-dmin * mn);
    }
}

// ---------------------------------------------------------------------------------------------
struct FragQ4K {
    uint4 hdr, q0, q1;
    u32 ds[4], dmn[4];  // f16x2 splats of d*sc and -dmin*mn for sub-blocks 2G0,2G0+1,2G1,2G1+1
    OJ_DEV static int e0(int t, int c) {
        const int w = c >> 1, h = c & 1, G = (w < 4 ? 0 : 2) + (t >> 1);
        return 64 * G + 32 * h + 16 * (t & 1) + 4 * (w & 3);
    }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        const u8* blk = W.p0 + ((size_t)row * (W.cols >> 8) + sb) * 144;
        hdr = *(const uint4*)blk;
        q0 = *(const uint4*)(blk + 16 + 16 * t);
        q1 = *(const uint4*)(blk + 80 + 16 * t);
    }
    OJ_DEV void prep(int t) { kquant_splat_scales(hdr, t, ds, dmn); }
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const int w = c >> 1, h = c & 1, s = (w < 4 ? 0 : 2) + h;
        const u32 word = w < 4 ? word_of(q0, w & 3) : word_of(q1, w & 3);
        const u32 nib = word >> (4 * h);
        const u32 p02 = (nib & 0x000F000Fu) | H2_1024, p13 = ((nib >> 8) & 0x000F000Fu) | H2_1024;
        a02 = hfma2(hsub2(p02, H2_1024), ds[s], dmn[s]);
        a13 = hfma2(hsub2(p13, H2_1024), ds[s], dmn[s]);
    }
};

struct FragQ5K {
    uint4 hdr, qh, q0, q1;
    u32 ds[4], dmn[4];
    int t_;
    OJ_DEV static int e0(int t, int c) { return FragQ4K::e0(t, c); }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        const u8* blk = W.p0 + ((size_t)row * (W.cols >> 8) + sb) * 176;
        hdr = *(const uint4*)blk;
        qh = *(const uint4*)(blk + 16 + 16 * (t & 1));
        q0 = *(const uint4*)(blk + 48 + 16 * t);
        q1 = *(const uint4*)(blk + 112 + 16 * t);
        t_ = t;
    }
    OJ_DEV void prep(int t) { kquant_splat_scales(hdr, t, ds, dmn); }
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const int w = c >> 1, h = c & 1, s = (w < 4 ? 0 : 2) + h;
        const int G = (w < 4 ? 0 : 2) + (t_ >> 1), bit = 2 * G + h;
        const u32 word = w < 4 ? word_of(q0, w & 3) : word_of(q1, w & 3);
        const u32 hw = word_of(qh, w & 3);
        const u32 nib = word >> (4 * h);
        const u32 p02 = (nib & 0x000F000Fu) | (((hw >> bit) & 0x00010001u) << 4) | H2_1024;
        const u32 p13 = ((nib >> 8) & 0x000F000Fu) | (((hw >> (bit + 8)) & 0x00010001u) << 4) | H2_1024;
        a02 = hfma2(hsub2(p02, H2_1024), ds[s], dmn[s]);
        a13 = hfma2(hsub2(p13, H2_1024), ds[s], dmn[s]);
    }
};

struct FragQ6K {
    uint2 ql[2][2], qh[2];
    uint4 sc;
    u16 dbits;
    u32 ds[2][4];
    OJ_DEV static int e0(int t, int c) {
        const int n = c >> 3, q = (c >> 1) & 3, j = c & 1;
        return 128 * n + 32 * q + 8 * t + 4 * j;
    }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        const size_t b = (size_t)row * (W.cols >> 8) + sb;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int p = 0; p < 2; ++p) ql[n][p] = *(const uint2*)(W.p0 + b * 128 + 64 * n + 32 * p + 8 * t);
            qh[n] = *(const uint2*)(W.p1 + b * 64 + 32 * n + 8 * t);
        }
        sc = *(const uint4*)(W.p2 + b * 16);
        dbits = *(const u16*)(W.p3 + b * 2);
    }
    OJ_DEV void prep(int t) {
        const float d = h2f(dbits);
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int si = 8 * n + 2 * q + (t >> 1);
                ds[n][q] = h2_splat(d * (float)(i8)byte_of(sc, si));
            }
    }
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const int n = c >> 3, q = (c >> 1) & 3, j = c & 1;
        const u32 lw = j ? ql[n][q & 1].y : ql[n][q & 1].x;
        const u32 hw = j ? qh[n].y : qh[n].x;
        const int ns = 4 * (q >> 1);
        const u32 p02 = ((lw >> ns) & 0x000F000Fu) | (((hw >> (2 * q)) & 0x00030003u) << 4) | H2_1024;
        const u32 p13 = ((lw >> (ns + 8)) & 0x000F000Fu) | (((hw >> (2 * q + 8)) & 0x00030003u) << 4) | H2_1024;
        a02 = hmul2(hsub2(p02, H2_1056), ds[n][q]);
        a13 = hmul2(hsub2(p13, H2_1056), ds[n][q]);
    }
};

struct FragQ8_0 {
    uint4 qv[4];
    u32 dpair;  // the two f16 block scales of this thread's 64 elements
    u32 dsp[2];
    OJ_DEV static int e0(int t, int c) { return 64 * t + 4 * c; }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        const u8* q = W.p0 + (size_t)row * W.cols + sb * 256 + 64 * t;
#pragma unroll
        for (int i = 0; i < 4; ++i) qv[i] = *(const uint4*)(q + 16 * i);
        dpair = *(const u32*)(W.p1 + ((size_t)row * (W.cols >> 5) + sb * 8 + 2 * t) * 2);
    }
    OJ_DEV void prep(int) {
        dsp[0] = (dpair & 0xFFFFu) | (dpair << 16);
        dsp[1] = (dpair >> 16) | (dpair & 0xFFFF0000u);
    }
    OJ_DEV void get(int c, u32& a02, u32& a13) const {
        const u32 u = word_of(qv[c >> 2], c & 3) ^ 0x80808080u;
        const u32 p02 = (u & 0x00FF00FFu) | H2_1024, p13 = ((u >> 8) & 0x00FF00FFu) | H2_1024;
        a02 = hmul2(hsub2(p02, H2_1152), dsp[c >> 3]);
        a13 = hmul2(hsub2(p13, H2_1152), dsp[c >> 3]);
    }
};

// F16 rows are read chunk by chunk (a format that is rare on the hot path). F32 weights have
// their own exact kernel (matmul.cu).
struct FragF16 {
    const u8* base;
    OJ_DEV static int e0(int t, int c) { return 64 * t + 4 * c; }
    OJ_DEV void load(const WDesc& W, int row, int sb, int t) {
        base = W.p0 + ((size_t)row * W.cols + sb * 256 + 64 * t) * 2;
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
    const int nb = W.cols >> 8, sb = k >> 8, e = k & 255;
    if (type == GGML_Q4_K || type == GGML_Q5_K) {
        const int bs = type == GGML_Q4_K ? 144 : 176, qs_off = type == GGML_Q4_K ? 16 : 48;
        const u8* blk = W.p0 + ((size_t)row * nb + sb) * bs;
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
        const size_t b = (size_t)row * nb + sb;
        const int n = e >> 7, q = (e >> 5) & 3, l = e & 31;
        const u32 lb = W.p0[b * 128 + 64 * n + 32 * (q & 1) + l];
        const u32 hb = W.p1[b * 64 + 32 * n + l];
        const int code = (int)(((q >> 1) ? lb >> 4 : lb & 15u) | (((hb >> (2 * q)) & 3u) << 4)) - 32;
        const float d = h2f(*(const u16*)(W.p3 + b * 2));
        return d * (float)((const i8*)W.p2)[b * 16 + (e >> 4)] * (float)code;
    }
    if (type == GGML_Q8_0) {
        const size_t i = (size_t)row * W.cols + k;
        return h2f(((const u16*)W.p1)[i >> 5]) * (float)((const i8*)W.p0)[i];
    }
    if (type == GGML_F16) return h2f(((const u16*)W.p0)[(size_t)row * W.cols + k]);
    return ((const float*)W.p0)[(size_t)row * W.cols + k];
}

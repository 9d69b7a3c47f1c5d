// Gated full attention (spec section 4.5): per-head RMSNorm + partial NeoX RoPE on q and k,
// K/V written to a paged q8_0 pool, causal GQA attention over the pool with an online softmax,
// and the sigmoid output gate.
//
// Compile-time dims: ATT_D (head dim), ATT_HQ, ATT_HKV (query / KV heads), ATT_NROT (rotated
// dims, pairs (i, i + ATT_NROT/2)), KV_PAGE (tokens per page).
//
//   qg     f32 [T][ldp] (ATT_HQ*2*ATT_D used)  per head: query then gate (attn_q output)
//   kf, vf f32 [T][ldp] (ATT_HKV*ATT_D used)    attn_k / attn_v outputs
//   q      f32 [T][ATT_HQ][ATT_D]        normed, rotated queries
//   pool:  kq, vq  i8  [pool_tokens][ATT_HKV][ATT_D]
//          kd, vd  f16 [pool_tokens][ATT_HKV][ATT_D/32]   (q8_0: value = d * q)
//   page_table i32 [slots][max_pages]; pool token of (slot, pos) =
//          page_table[slot][pos / KV_PAGE] * KV_PAGE + pos % KV_PAGE
//   row_slot, row_pos i32 [T]
//   y      f32 [T][ATT_HQ*ATT_D]         gated attention output (input of attn_output)
#include "common.cuh"

#ifndef ATT_D
#define ATT_D 256
#endif
#ifndef ATT_HQ
#define ATT_HQ 24
#endif
#ifndef ATT_HKV
#define ATT_HKV 4
#endif
#ifndef ATT_NROT
#define ATT_NROT 64
#endif
#ifndef KV_PAGE
#define KV_PAGE 16
#endif
#define ATT_GROUP (ATT_HQ / ATT_HKV)
#define ATT_DPL (ATT_D / 32)  // dims per lane
#define ATT_WARPS 4
#define ATT_UNROLL 4
#ifndef ATT_SPLITS
#define ATT_SPLITS 16  // CTAs per (row, KV head) over the context (KernelDims.att_splits)
#endif
#define ATT_CHUNK 64
// attn_decode's chunk (KernelDims.att_core_chunk): at a short context, fewer positions per warp
// shorten the split's serial work (attn_decode_tc keeps ATT_CHUNK, its warps' 16-position tiles)
#ifndef ATT_CORE_CHUNK
#define ATT_CORE_CHUNK ATT_CHUNK
#endif
static_assert(ATT_CORE_CHUNK % (ATT_WARPS * ATT_UNROLL) == 0, "whole blocks per chunk");

OJ_DEV int pool_token(const int* page_table, int max_pages, int slot, int pos) {
    return page_table[(size_t)slot * max_pages + pos / KV_PAGE] * KV_PAGE + pos % KV_PAGE;
}

// RMSNorm (weight w) then RoPE of one head held one element per thread in xs[ATT_D].
OJ_DEV float norm_rope(float x, const float* w, float* xs, float* scratch, int pos,
                       float theta_scale, bool rope) {
    const int d = threadIdx.x;
    const float ss = block_sum(x * x, scratch);
    x = x * rsqrtf(ss / (float)ATT_D + OJ_EPS) * w[d];
    if (!rope) return x;
    xs[d] = x;
    __syncthreads();
    if (d < ATT_NROT) {
        const int half = ATT_NROT / 2, i = d % half;
        const float theta = (float)pos * powf(theta_scale, (float)i);
        float sn, cs;
        sincosf(theta, &sn, &cs);
        x = d < half ? xs[d] * cs - xs[d + half] * sn : xs[d - half] * sn + xs[d] * cs;
    }
    return x;
}

// One warp quantizes its 32 values (one q8_0 block) and stores them.
OJ_DEV void store_q8(float x, i8* q, u16* dscale) {
    const float amax = warp_max(fabsf(x));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    q[threadIdx.x & 31] = (i8)__float2int_rn(x * id);
    if ((threadIdx.x & 31) == 0) *dscale = f2h(d);
}

// A lane's ATT_DPL q8_0 codes of one position as raw words: one 8-byte load for the 27B
// model's 256-wide heads (ATT_DPL = 8), not eight byte loads. Each byte is stored biased,
// q + 128 (XOR 0x80), for code_of.
#define ATT_RAW ((ATT_DPL + 3) / 4)
OJ_DEV void load_raw(const i8* p, u32 (&w)[ATT_RAW]) {
#if ATT_DPL % 8 == 0
#pragma unroll
    for (int i = 0; i < ATT_RAW; i += 2) {
        const uint2 v = ((const uint2*)p)[i / 2];
        w[i] = v.x ^ 0x80808080u;
        w[i + 1] = v.y ^ 0x80808080u;
    }
#elif ATT_DPL % 4 == 0
#pragma unroll
    for (int i = 0; i < ATT_RAW; ++i) w[i] = ((const u32*)p)[i] ^ 0x80808080u;
#else
    w[0] = 0u;
#pragma unroll
    for (int e = 0; e < ATT_DPL; ++e) w[0] |= (u32)((u8)p[e] ^ 0x80u) << (8 * e);
#endif
}
// Code e of a lane's words as a float, exactly: the biased byte under the exponent of 2^23 is
// the float 2^23 + q + 128, minus 2^23 + 128. One PRMT and one FADD, where the int8 -> float
// conversion (I2F) issues at 16 per clock per SM on sm_80-sm_90, an eighth of the FFMA rate,
// and was the attention loop's largest cost (64 conversions per lane per 4-position block).
OJ_DEV float code_of(const u32 (&w)[ATT_RAW], int e) {
    const u32 bits = __byte_perm(w[e >> 2], 0x4B000000u, 0x7540u | (u32)(e & 3));
    return __int_as_float((int)bits) - 8388736.0f;
}

// The raw K and V codes and scales of one warp's block of ATT_UNROLL positions.
struct KVBlock {
    u32 k[ATT_UNROLL][ATT_RAW], v[ATT_UNROLL][ATT_RAW];
    float kd[ATT_UNROLL], vd[ATT_UNROLL];
};

// Sums over the warp of ATT_UNROLL * ATT_GP values at once: each xor step hands half of the
// values still held to the partner lane, so 32 values cost 31 shuffles (not 5 each), and lane
// L ends with the sum of value index L >> (5 - log2(ATT_UNROLL * ATT_GP)).
#define ATT_GP (ATT_GROUP <= 1 ? 1 : ATT_GROUP <= 2 ? 2 : ATT_GROUP <= 4 ? 4 : 8)
#define ATT_NV (ATT_UNROLL * ATT_GP)
#define ATT_VSHIFT (ATT_NV >= 32 ? 0 : ATT_NV >= 16 ? 1 : ATT_NV >= 8 ? 2 : ATT_NV >= 4 ? 3 : 4)
static_assert(ATT_NV <= 32 && (ATT_NV & (ATT_NV - 1)) == 0, "a block's scores fit one per lane");
OJ_DEV float multi_warp_sum(float (&x)[ATT_NV], int lane) {
#pragma unroll
    for (int o = 16, n = ATT_NV; o >= 1; o >>= 1) {
        if (n > 1) {
            const bool upper = (lane & o) != 0;
#pragma unroll
            for (int i = 0; i < n / 2; ++i) {
                const float send = upper ? x[i] : x[i + n / 2];
                const float keep = upper ? x[i + n / 2] : x[i];
                x[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
            n /= 2;
        } else {
            x[0] += __shfl_xor_sync(0xffffffffu, x[0], o);
        }
    }
    return x[0];
}

// Max (or sum) of a head's scores over the block's positions: the lanes holding them differ
// only in the position bits of their value index (multi_warp_sum's layout).
OJ_DEV float over_positions(float v, bool max) {
#pragma unroll
    for (int o = ATT_GP << ATT_VSHIFT; o < 32; o <<= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = max ? fmaxf(v, other) : v + other;
    }
    return v;
}

// grid (T, ATT_HQ + ATT_HKV), block ATT_D.
extern "C" __global__ void attn_prep(const float* qg, const float* kf, const float* vf, int ldp,
                                     const float* q_norm, const float* k_norm, float* q,
                                     i8* kq, u16* kd, i8* vq, u16* vd, const int* page_table,
                                     int max_pages, const int* row_slot, const int* row_pos,
                                     float theta_scale) {
    oj_grid_dep_early();
    __shared__ float xs[ATT_D], scratch[32];
    const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x, pos = row_pos[t];
    if (h < ATT_HQ) {
        const float x = qg[(size_t)t * ldp + h * 2 * ATT_D + d];
        q[((size_t)t * ATT_HQ + h) * ATT_D + d] = norm_rope(x, q_norm, xs, scratch, pos, theta_scale, true);
        return;
    }
    const int u = h - ATT_HQ;
    const size_t tok = pool_token(page_table, max_pages, row_slot[t], pos);
    const size_t base = (tok * ATT_HKV + u) * ATT_D, dbase = (tok * ATT_HKV + u) * (ATT_D / 32);
    const float k = norm_rope(kf[(size_t)t * ldp + u * ATT_D + d], k_norm, xs, scratch,
                              pos, theta_scale, true);
    store_q8(k, kq + base + (d & ~31), kd + dbase + (d >> 5));
    store_q8(vf[(size_t)t * ldp + u * ATT_D + d], vq + base + (d & ~31), vd + dbase + (d >> 5));
}

// A CTA's split result from its warps' partial ones (running max, sum and weighted V per head,
// in shared memory), combined in warp order: part_o / part_ml at index `part` (attn_decode).
OJ_DEV void store_split(const float (*sm_m)[ATT_GROUP], const float (*sm_l)[ATT_GROUP],
                        const float (*sm_acc)[ATT_GROUP][ATT_D], size_t part, float* part_o,
                        float* part_ml) {
    for (int idx = threadIdx.x; idx < ATT_GROUP * ATT_D; idx += blockDim.x) {
        const int g = idx / ATT_D, d = idx % ATT_D;
        float M = -OJ_INF;
        for (int w = 0; w < ATT_WARPS; ++w) M = fmaxf(M, sm_m[w][g]);
        float L = 0.0f, O = 0.0f;
        for (int w = 0; w < ATT_WARPS; ++w) {
            const float f = sm_l[w][g] > 0.0f ? __expf(sm_m[w][g] - M) : 0.0f;
            L += sm_l[w][g] * f;
            O += sm_acc[w][g][d] * f;
        }
        part_o[(part * ATT_GROUP + g) * ATT_D + d] = O;
        if (d == 0) {
            part_ml[(part * ATT_GROUP + g) * 2] = M;
            part_ml[(part * ATT_GROUP + g) * 2 + 1] = L;
        }
    }
}

// The two decode kernels' parameters (one launch site, kernels.Ops.attention, for both): each
// takes only the rows at positions pos_lo <= row_pos < pos_hi and returns at once for the
// others (the other kernel's rows: KernelDims.att_core_below).
#define ATT_DECODE_PARAMS                                                                        \
    const float *q, const i8 *kq, const u16 *kd, const i8 *vq, const u16 *vd,                   \
        const int *page_table, int max_pages, const int *row_slot, const int *row_pos,          \
        float scale, float *part_o, float *part_ml, int pos_lo, int pos_hi

// Split over the context (flash-decoding): grid (T, ATT_HKV, ATT_SPLITS), block 32*ATT_WARPS.
// Positions come in chunks of ATT_CORE_CHUNK; chunk c belongs to split c % ATT_SPLITS, and inside a
// chunk warp w takes blocks of ATT_UNROLL positions w + ATT_WARPS*j, ... Every split depends
// only on the position, so a row's result never depends on the batch; attn_merge combines the
// splits in order. Per block a warp computes all its scores, reduces them together
// (multi_warp_sum), and rescales its running sums once.
//   part_o  f32 [T][ATT_HKV][ATT_SPLITS][ATT_GROUP][ATT_D]  (sum of p*v, relative to part max)
//   part_ml f32 [T][ATT_HKV][ATT_SPLITS][ATT_GROUP][2]      (running max, sum of p)
extern "C" __global__ void __launch_bounds__(32 * ATT_WARPS)
    attn_decode(ATT_DECODE_PARAMS) {
    oj_grid_dep_early();
    __shared__ float sm_m[ATT_WARPS][ATT_GROUP], sm_l[ATT_WARPS][ATT_GROUP];
    __shared__ float sm_acc[ATT_WARPS][ATT_GROUP][ATT_D];
    const int t = blockIdx.x, u = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int pos = row_pos[t], slot = row_slot[t];
    if (pos < pos_lo || pos >= pos_hi) return;  // the other kernel's row

    float qv[ATT_GROUP][ATT_DPL], acc[ATT_GROUP][ATT_DPL];
#pragma unroll
    for (int g = 0; g < ATT_GROUP; ++g) {
        const float* qh = q + ((size_t)t * ATT_HQ + u * ATT_GROUP + g) * ATT_D + lane * ATT_DPL;
#pragma unroll
        for (int e = 0; e < ATT_DPL; ++e) {
            qv[g][e] = qh[e] * scale;
            acc[g][e] = 0.0f;
        }
    }
    // running max and sum of the group of this lane's score (the lanes of a group agree)
    const int my_j = (lane >> ATT_VSHIFT) / ATT_GP;  // the position of this lane's score
    float m = -OJ_INF, l = 0.0f;

    // This warp's blocks: chunks c = split, split + ATT_SPLITS, ... of ATT_CORE_CHUNK positions, in
    // each the positions tau0 + j*ATT_WARPS (j < ATT_UNROLL) for tau0 = c*ATT_CORE_CHUNK + warp,
    // + ATT_WARPS*ATT_UNROLL, ... A flat block index lets the next block's loads fly while this
    // one is computed.
    constexpr int per_chunk = ATT_CORE_CHUNK / (ATT_WARPS * ATT_UNROLL);
    const int n_chunks =
        split * ATT_CORE_CHUNK <= pos ? (pos / ATT_CORE_CHUNK - split) / ATT_SPLITS + 1 : 0;
    const int n_blocks = n_chunks * per_chunk;
    auto block_at = [&](int b, int& tau0, int& hi) {
        const int c = split + (b / per_chunk) * ATT_SPLITS;
        tau0 = c * ATT_CORE_CHUNK + warp + (b % per_chunk) * ATT_WARPS * ATT_UNROLL;
        hi = min(c * ATT_CORE_CHUNK + ATT_CORE_CHUNK - 1, pos);
    };
    auto load = [&](KVBlock& kvb, int b) {
        int tau0, hi;
        block_at(b, tau0, hi);
#pragma unroll
        for (int j = 0; j < ATT_UNROLL; ++j) {
            const int tau = min(tau0 + j * ATT_WARPS, hi);
            const size_t tok = pool_token(page_table, max_pages, slot, tau);
            const size_t base = (tok * ATT_HKV + u) * ATT_D + lane * ATT_DPL;
            const size_t didx = (tok * ATT_HKV + u) * (ATT_D / 32) + (lane * ATT_DPL) / 32;
            load_raw(kq + base, kvb.k[j]);
            load_raw(vq + base, kvb.v[j]);
            kvb.kd[j] = h2f(kd[didx]);
            kvb.vd[j] = h2f(vd[didx]);
        }
    };
    KVBlock cur, nxt;
    if (n_blocks > 0) load(cur, 0);
    for (int b = 0; b < n_blocks; ++b) {
        if (b + 1 < n_blocks) load(nxt, b + 1);
        int tau0, hi;
        block_at(b, tau0, hi);
        if (tau0 <= hi) {  // (warp-uniform) a last partial chunk can leave a block empty
            // scores of the block's ATT_UNROLL positions x ATT_GROUP heads (a lane's 8 dims share
            // one q8_0 scale, applied to the lane's partial sum)
            float x[ATT_NV];
#pragma unroll
            for (int j = 0; j < ATT_UNROLL; ++j)
#pragma unroll
                for (int g = 0; g < ATT_GP; ++g) {
                    float s = 0.0f;
                    if (g < ATT_GROUP) {
#pragma unroll
                        for (int e = 0; e < ATT_DPL; ++e) s = fmaf(qv[g][e], code_of(cur.k[j], e), s);
                    }
                    x[j * ATT_GP + g] = s * cur.kd[j];
                }
            float sc = multi_warp_sum(x, lane);
            if (tau0 + my_j * ATT_WARPS > hi) sc = -OJ_INF;  // past the chunk's end
            // online softmax, one rescale per block: max and sum over the block's positions
            const float mn = fmaxf(m, over_positions(sc, true));
            const float corr = __expf(m - mn);  // 0 on the first block (m = -inf)
            const float p = __expf(sc - mn);
            l = l * corr + over_positions(p, false);
            m = mn;
#pragma unroll
            for (int g = 0; g < ATT_GROUP; ++g) {
                const float cg = __shfl_sync(0xffffffffu, corr, g << ATT_VSHIFT);
#pragma unroll
                for (int e = 0; e < ATT_DPL; ++e) acc[g][e] *= cg;
            }
#pragma unroll
            for (int j = 0; j < ATT_UNROLL; ++j)
#pragma unroll
                for (int g = 0; g < ATT_GROUP; ++g) {
                    const float pv = __shfl_sync(0xffffffffu, p, (j * ATT_GP + g) << ATT_VSHIFT) * cur.vd[j];
#pragma unroll
                    for (int e = 0; e < ATT_DPL; ++e) acc[g][e] = fmaf(pv, code_of(cur.v[j], e), acc[g][e]);
                }
        }
        cur = nxt;
    }
    float mg[ATT_GROUP], lg[ATT_GROUP];
#pragma unroll
    for (int g = 0; g < ATT_GROUP; ++g) {
        mg[g] = __shfl_sync(0xffffffffu, m, g << ATT_VSHIFT);
        lg[g] = __shfl_sync(0xffffffffu, l, g << ATT_VSHIFT);
    }
#pragma unroll
    for (int g = 0; g < ATT_GROUP; ++g) {
        if (lane == 0) {
            sm_m[warp][g] = mg[g];
            sm_l[warp][g] = lg[g];
        }
#pragma unroll
        for (int e = 0; e < ATT_DPL; ++e) sm_acc[warp][g][lane * ATT_DPL + e] = acc[g][e];
    }
    __syncthreads();
    store_split(sm_m, sm_l, sm_acc, ((size_t)t * ATT_HKV + u) * ATT_SPLITS + split, part_o, part_ml);
}

// ---- the same on the tensor cores (KernelDims.att_tc; 256-wide heads, <= 8 per KV head) -----
// attn_decode's grid, chunks, splits and outputs (attn_merge unchanged); each warp takes the
// 16 positions c*ATT_CHUNK + 16*warp .. of each of its chunks as one block:
//   S^T = Q K^T   (mma m16n8k16: A = Q, heads as rows (rows >= ATT_GROUP zero); B = K^T, the
//                 block's positions as two n-tiles of 8). A thread owns 4 consecutive dims of
//                 each 16-dim chunk (slots 2t, 2t+1 <- e0, e0+2; 2t+8, 2t+9 <- e0+1, e0+3, as
//                 the products), so a position's codes are one u32 per chunk; the q8_0 scale
//                 (per 32 dims) multiplies each 32-dim block's partial score.
//   softmax per head over the block (a head's 16 scores sit in one quad of lanes);
//   O^T += V^T P^T (A = V^T, dims as rows: m-tile mt row gid <-> dim 32*gid + mt, row gid + 8
//                 <-> 32*gid + 16 + mt, so a thread's V codes are 32 contiguous bytes of one
//                 q8_0 block per position and the V scale folds into A; B = P^T straight from
//                 S^T's accumulators).
// f16 operands: Q, P and V*scale are rounded to f16 (attn_decode keeps them in f32), the
// products' precision; q8_0 codes become f16 exactly (0x6400 | biased byte, minus 1152).
#if ATT_D == 256 && ATT_GROUP <= 8 && ATT_CHUNK == 16 * ATT_WARPS
// Bytes (0, 2) (sel 0x4240) or (1, 3) (sel 0x4341) of w, biased codes (XOR 0x80), as an exact
// f16 pair: 0x64 above a byte b is the f16 1024 + b.
#define ATT_H2_1152 0x64806480u
OJ_DEV u32 codes_h2(u32 w, u32 sel) { return hsub2(__byte_perm(w, 0x64646464u, sel), ATT_H2_1152); }
// Byte i of a and of b (biased codes) as the f16 pair (a_i, b_i), exactly.
OJ_DEV u32 code_pair(u32 a, u32 b, int i) {
    const u32 t = __byte_perm(a, b, (u32)i | ((u32)(i + 4) << 4));
    // t = [a_i, b_i, ., .] -> [a_i, 0x64, b_i, 0x64]
    const u32 v = __byte_perm(t, 0x64646464u, 0x4140u);
    return hsub2(v, ATT_H2_1152);
}

extern "C" __global__ void __launch_bounds__(32 * ATT_WARPS)
    attn_decode_tc(ATT_DECODE_PARAMS) {
    oj_grid_dep_early();
    __shared__ float sm_m[ATT_WARPS][ATT_GROUP], sm_l[ATT_WARPS][ATT_GROUP];
    __shared__ float sm_acc[ATT_WARPS][ATT_GROUP][ATT_D];
    const int t = blockIdx.x, u = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tq = lane & 3;
    const int pos = row_pos[t], slot = row_slot[t];
    if (pos < pos_lo || pos >= pos_hi) return;  // the other kernel's row
    const bool head_ok = gid < ATT_GROUP;

    // Q as A fragments, 2 registers per 16-dim chunk (rows gid + 8 are zero registers)
    u32 qa[16][2];
    {
        const float* qh = q + ((size_t)t * ATT_HQ + u * ATT_GROUP + (head_ok ? gid : 0)) * ATT_D;
#pragma unroll
        for (int kc = 0; kc < 16; ++kc) {
            float4 x = *(const float4*)(qh + 16 * kc + 4 * tq);
            if (!head_ok) x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            qa[kc][0] = pack_h2(x.x * scale, x.z * scale);
            qa[kc][1] = pack_h2(x.y * scale, x.w * scale);
        }
    }
    float o[16][4];
#pragma unroll
    for (int mt = 0; mt < 16; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[mt][i] = 0.0f;
    float m = -OJ_INF, l = 0.0f;  // this lane's head (gid): running max and sum

    const int n_chunks = split * ATT_CHUNK <= pos ? (pos / ATT_CHUNK - split) / ATT_SPLITS + 1 : 0;
    for (int i = 0; i < n_chunks; ++i) {
        const int c = split + i * ATT_SPLITS;
        const int tau0 = c * ATT_CHUNK + 16 * warp, hi = min(c * ATT_CHUNK + ATT_CHUNK - 1, pos);
        if (tau0 > hi) continue;  // (warp-uniform) the last chunk's tail
        auto kv_base = [&](int p) {  // pool row of (slot, position p <= hi), this KV head
            return (size_t)pool_token(page_table, max_pages, slot, min(p, hi)) * ATT_HKV + u;
        };
        // scores: head gid, positions tau0 + 8j + 2tq (+1), j = 0, 1
        float sc[2][2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const size_t kb = kv_base(tau0 + 8 * j + gid);  // this lane's B column
            const u32* kw = (const u32*)(kq + kb * ATT_D) + tq;
            const int p0 = tau0 + 8 * j + 2 * tq;  // this lane's accumulator columns
            const uint4 d0 = *(const uint4*)(kd + kv_base(p0) * (ATT_D / 32));
            const uint4 d1 = *(const uint4*)(kd + kv_base(p0 + 1) * (ATT_D / 32));
            sc[j][0] = sc[j][1] = 0.0f;
#pragma unroll
            for (int bb = 0; bb < 8; ++bb) {  // 32-dim q8_0 blocks
                float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int kc = 2 * bb + h;
                    const u32 w = kw[4 * kc] ^ 0x80808080u;
                    mma_16816(acc, qa[kc][0], 0u, qa[kc][1], 0u, codes_h2(w, 0x4240u), codes_h2(w, 0x4341u));
                }
                sc[j][0] = fmaf(acc[0], h2f((u16)(word_of(d0, bb >> 1) >> (16 * (bb & 1)))), sc[j][0]);
                sc[j][1] = fmaf(acc[1], h2f((u16)(word_of(d1, bb >> 1) >> (16 * (bb & 1)))), sc[j][1]);
            }
            if (p0 > hi) sc[j][0] = -OJ_INF;
            if (p0 + 1 > hi) sc[j][1] = -OJ_INF;
        }
        // online softmax for head gid over the block (its 16 scores: this quad's lanes)
        float bmax = fmaxf(fmaxf(sc[0][0], sc[0][1]), fmaxf(sc[1][0], sc[1][1]));
        bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, 1));
        bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, 2));
        const float mn = fmaxf(m, bmax);
        const float corr = __expf(m - mn);  // 0 on the first block (m = -inf)
        float p[2][2];
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int k = 0; k < 2; ++k) p[j][k] = head_ok ? __expf(sc[j][k] - mn) : 0.0f;
        float ps = p[0][0] + p[0][1] + p[1][0] + p[1][1];
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2);
        l = l * corr + ps;
        m = mn;
        // this lane's O^T columns are heads 2tq, 2tq + 1: their rescale comes from those quads
        const float c0 = __shfl_sync(0xffffffffu, corr, 8 * tq);
        const float c1 = __shfl_sync(0xffffffffu, corr, 8 * tq + 4);
#pragma unroll
        for (int mt = 0; mt < 16; ++mt) {
            o[mt][0] *= c0;
            o[mt][1] *= c1;
            o[mt][2] *= c0;
            o[mt][3] *= c1;
        }
        // B = P^T: k slots 2tq, 2tq+1 = positions 2tq, 2tq+1; slots 2tq+8, 2tq+9 = 8+2tq, 9+2tq
        const u32 pb0 = pack_h2(p[0][0], p[0][1]), pb1 = pack_h2(p[1][0], p[1][1]);
        // A = V^T: positions 2tq, 2tq+1 (a0, a1) and 8+2tq, 9+2tq (a2, a3), dims 32 gid + ..
        u32 vw[4][8];
        u32 vs01, vs23;  // f16 V scales (block gid) of the position pairs
        {
            const int pv[4] = {tau0 + 2 * tq, tau0 + 2 * tq + 1, tau0 + 8 + 2 * tq, tau0 + 9 + 2 * tq};
            u16 sv[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const size_t vb = kv_base(pv[k]);
                const uint4* src = (const uint4*)(vq + vb * ATT_D + 32 * gid);
                const uint4 x0 = src[0], x1 = src[1];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    vw[k][i] = word_of(x0, i) ^ 0x80808080u;
                    vw[k][4 + i] = word_of(x1, i) ^ 0x80808080u;
                }
                sv[k] = vd[vb * (ATT_D / 32) + gid];
            }
            vs01 = (u32)sv[0] | ((u32)sv[1] << 16);
            vs23 = (u32)sv[2] | ((u32)sv[3] << 16);
        }
#pragma unroll
        for (int mt = 0; mt < 16; ++mt) {
            const int wl = mt >> 2, wh = 4 + (mt >> 2), bi = mt & 3;  // dims 32gid+mt, +16+mt
            const u32 a0 = hmul2(code_pair(vw[0][wl], vw[1][wl], bi), vs01);
            const u32 a1 = hmul2(code_pair(vw[0][wh], vw[1][wh], bi), vs01);
            const u32 a2 = hmul2(code_pair(vw[2][wl], vw[3][wl], bi), vs23);
            const u32 a3 = hmul2(code_pair(vw[2][wh], vw[3][wh], bi), vs23);
            mma_16816(o[mt], a0, a1, a2, a3, pb0, pb1);
        }
    }
    // the warps' partial results through shared memory, combined as in attn_decode
    if (head_ok && tq == 0) {
        sm_m[warp][gid] = m;
        sm_l[warp][gid] = l;
    }
#pragma unroll
    for (int mt = 0; mt < 16; ++mt) {
        const int d0 = 32 * gid + mt, d1 = d0 + 16, h0 = 2 * tq, h1 = 2 * tq + 1;
        if (h0 < ATT_GROUP) {
            sm_acc[warp][h0][d0] = o[mt][0];
            sm_acc[warp][h0][d1] = o[mt][2];
        }
        if (h1 < ATT_GROUP) {
            sm_acc[warp][h1][d0] = o[mt][1];
            sm_acc[warp][h1][d1] = o[mt][3];
        }
    }
    __syncthreads();
    store_split(sm_m, sm_l, sm_acc, ((size_t)t * ATT_HKV + u) * ATT_SPLITS + split, part_o, part_ml);
}
#endif

// y = (merged softmax-weighted V) * sigmoid(gate), splits combined in split order.
// grid (T, ATT_HKV, ATT_GROUP), block 256: one query head per CTA, so the loads over the splits
// run in that many more CTAs (the 27B at one row: 24, where one per KV head was 4, and each
// thread looped over 6 outputs; 0.15 ms per step).  y: f32 [T][ATT_HQ*ATT_D]; yh (may be null):
// the same values packed for the output product (`store_packed_half`), this launch's row t being
// row r0 + t of a pass whose packed rows go in groups of 2^lg
extern "C" __global__ void attn_merge(const float* qg, int ldp, const float* part_o,
                                      const float* part_ml, float* y, u16* yh, int lg, int r0) {
    oj_grid_dep_early();
    const int t = blockIdx.x, u = blockIdx.y, g = blockIdx.z;
    const size_t part0 = ((size_t)t * ATT_HKV + u) * ATT_SPLITS;
    float M = -OJ_INF;
#pragma unroll
    for (int k = 0; k < ATT_SPLITS; ++k) M = fmaxf(M, part_ml[((part0 + k) * ATT_GROUP + g) * 2]);
    float f[ATT_SPLITS], L = 0.0f;
#pragma unroll
    for (int k = 0; k < ATT_SPLITS; ++k) {
        const float* ml = part_ml + ((part0 + k) * ATT_GROUP + g) * 2;
        f[k] = ml[1] > 0.0f ? __expf(ml[0] - M) : 0.0f;
        L += ml[1] * f[k];
    }
    const int h = u * ATT_GROUP + g;
    for (int d = threadIdx.x; d < ATT_D; d += blockDim.x) {
        float O = 0.0f;
#pragma unroll
        for (int k = 0; k < ATT_SPLITS; ++k)
            O += part_o[((part0 + k) * ATT_GROUP + g) * ATT_D + d] * f[k];
        const float gate = qg[(size_t)t * ldp + h * 2 * ATT_D + ATT_D + d];
        const float v = (O / L) * sigmoid_f(gate);
        y[(size_t)t * ATT_HQ * ATT_D + h * ATT_D + d] = v;
        if (yh) store_packed_half(yh, r0 + t, h * ATT_D + d, ATT_HQ * ATT_D, lg, v);
    }
}

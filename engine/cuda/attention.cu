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

// A lane's ATT_DPL q8_0 codes times their block scale, read in words where the head size
// allows (one 8-byte load for the 27B model's 256-wide heads, not eight byte loads).
OJ_DEV void load_codes(const i8* p, float d, float (&out)[ATT_DPL]) {
#if ATT_DPL % 8 == 0
    constexpr int per = 8;
#elif ATT_DPL % 4 == 0
    constexpr int per = 4;
#else
    constexpr int per = 1;
#endif
#pragma unroll
    for (int w = 0; w < ATT_DPL / per; ++w) {
        u32 lo, hi = 0u;
        if (per == 8) {
            const uint2 v = ((const uint2*)p)[w];
            lo = v.x;
            hi = v.y;
        } else if (per == 4) {
            lo = ((const u32*)p)[w];
        } else {
            lo = (u32)(u8)p[w];
        }
#pragma unroll
        for (int b = 0; b < per; ++b)
            out[per * w + b] = d * (float)(i8)(((b < 4 ? lo : hi) >> (8 * (b & 3))) & 0xFFu);
    }
}

// grid (T, ATT_HQ + ATT_HKV), block ATT_D.
extern "C" __global__ void attn_prep(const float* qg, const float* kf, const float* vf, int ldp,
                                     const float* q_norm, const float* k_norm, float* q,
                                     i8* kq, u16* kd, i8* vq, u16* vd, const int* page_table,
                                     int max_pages, const int* row_slot, const int* row_pos,
                                     float theta_scale) {
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

// Split over the context (flash-decoding): grid (T, ATT_HKV, ATT_SPLITS), block 32*ATT_WARPS.
// Positions come in chunks of ATT_CHUNK; chunk c belongs to split c % ATT_SPLITS, and inside a
// chunk warp w takes positions w, w + ATT_WARPS, ... Every split depends only on the position,
// so a row's result never depends on the batch; attn_merge combines the splits in order.
//   part_o  f32 [T][ATT_HKV][ATT_SPLITS][ATT_GROUP][ATT_D]  (sum of p*v, relative to part max)
//   part_ml f32 [T][ATT_HKV][ATT_SPLITS][ATT_GROUP][2]      (running max, sum of p)
extern "C" __global__ void __launch_bounds__(32 * ATT_WARPS)
    attn_decode(const float* q, const i8* kq, const u16* kd, const i8* vq, const u16* vd,
                const int* page_table, int max_pages, const int* row_slot, const int* row_pos,
                float scale, float* part_o, float* part_ml) {
    __shared__ float sm_m[ATT_WARPS][ATT_GROUP], sm_l[ATT_WARPS][ATT_GROUP];
    __shared__ float sm_acc[ATT_WARPS][ATT_GROUP][ATT_D];
    const int t = blockIdx.x, u = blockIdx.y, split = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int pos = row_pos[t], slot = row_slot[t];

    float qv[ATT_GROUP][ATT_DPL], acc[ATT_GROUP][ATT_DPL], m[ATT_GROUP], l[ATT_GROUP];
#pragma unroll
    for (int g = 0; g < ATT_GROUP; ++g) {
        const float* qh = q + ((size_t)t * ATT_HQ + u * ATT_GROUP + g) * ATT_D + lane * ATT_DPL;
#pragma unroll
        for (int e = 0; e < ATT_DPL; ++e) {
            qv[g][e] = qh[e] * scale;
            acc[g][e] = 0.0f;
        }
        m[g] = -OJ_INF;
        l[g] = 0.0f;
    }
    for (int c = split; c * ATT_CHUNK <= pos; c += ATT_SPLITS) {
        const int hi = min(c * ATT_CHUNK + ATT_CHUNK - 1, pos);
        // ATT_UNROLL positions per iteration: their loads are issued together, then the online
        // softmax consumes them in position order (the same order as one at a time).
        for (int tau0 = c * ATT_CHUNK + warp; tau0 <= hi; tau0 += ATT_WARPS * ATT_UNROLL) {
            float kv[ATT_UNROLL][ATT_DPL], vv[ATT_UNROLL][ATT_DPL];
#pragma unroll
            for (int j = 0; j < ATT_UNROLL; ++j) {
                const int tau = min(tau0 + j * ATT_WARPS, hi);
                const size_t tok = pool_token(page_table, max_pages, slot, tau);
                const size_t base = (tok * ATT_HKV + u) * ATT_D + lane * ATT_DPL;
                const size_t didx = (tok * ATT_HKV + u) * (ATT_D / 32) + (lane * ATT_DPL) / 32;
                load_codes(kq + base, h2f(kd[didx]), kv[j]);
                load_codes(vq + base, h2f(vd[didx]), vv[j]);
            }
#pragma unroll
            for (int j = 0; j < ATT_UNROLL; ++j) {
                if (tau0 + j * ATT_WARPS > hi) break;
#pragma unroll
                for (int g = 0; g < ATT_GROUP; ++g) {
                    float s = 0.0f;
#pragma unroll
                    for (int e = 0; e < ATT_DPL; ++e) s += qv[g][e] * kv[j][e];
                    s = warp_sum(s);
                    const float mn = fmaxf(m[g], s), corr = __expf(m[g] - mn), p = __expf(s - mn);
                    l[g] = l[g] * corr + p;
#pragma unroll
                    for (int e = 0; e < ATT_DPL; ++e) acc[g][e] = acc[g][e] * corr + p * vv[j][e];
                    m[g] = mn;
                }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < ATT_GROUP; ++g) {
        if (lane == 0) {
            sm_m[warp][g] = m[g];
            sm_l[warp][g] = l[g];
        }
#pragma unroll
        for (int e = 0; e < ATT_DPL; ++e) sm_acc[warp][g][lane * ATT_DPL + e] = acc[g][e];
    }
    __syncthreads();
    const size_t part = ((size_t)t * ATT_HKV + u) * ATT_SPLITS + split;
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

// y = (merged softmax-weighted V) * sigmoid(gate), splits combined in split order.
// grid (T, ATT_HKV), block 256.  y: f32 [T][ATT_HQ*ATT_D]
extern "C" __global__ void attn_merge(const float* qg, int ldp, const float* part_o,
                                      const float* part_ml, float* y) {
    const int t = blockIdx.x, u = blockIdx.y;
    const size_t part0 = ((size_t)t * ATT_HKV + u) * ATT_SPLITS;
    for (int idx = threadIdx.x; idx < ATT_GROUP * ATT_D; idx += blockDim.x) {
        const int g = idx / ATT_D, d = idx % ATT_D;
        float M = -OJ_INF;
        for (int k = 0; k < ATT_SPLITS; ++k) M = fmaxf(M, part_ml[((part0 + k) * ATT_GROUP + g) * 2]);
        float L = 0.0f, O = 0.0f;
        for (int k = 0; k < ATT_SPLITS; ++k) {
            const float* ml = part_ml + ((part0 + k) * ATT_GROUP + g) * 2;
            const float f = ml[1] > 0.0f ? __expf(ml[0] - M) : 0.0f;
            L += ml[1] * f;
            O += part_o[((part0 + k) * ATT_GROUP + g) * ATT_D + d] * f;
        }
        const int h = u * ATT_GROUP + g;
        const float gate = qg[(size_t)t * ldp + h * 2 * ATT_D + ATT_D + d];
        y[(size_t)t * ATT_HQ * ATT_D + h * ATT_D + d] = (O / L) * sigmoid_f(gate);
    }
}

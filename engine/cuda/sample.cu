// On-device sampling, one CTA (SAMPLE_THREADS threads) per logits row, no cap on top_k.
// Order as llama.cpp's default chain: penalties -> top_k -> top_p -> min_p -> temperature ->
// draw. Thresholds are found by a bitwise search over order-preserving keys of the logits, so
// nothing is sorted. Each thread owns one contiguous range of the vocabulary; every sum is
// taken in that fixed order, so the draw is reproducible.
//
//   logits  f32 [M][V]  (penalties are applied in place)
//   fparams f32 [M][8]  temperature, top_p, min_p, repetition, frequency, presence, -, -
//   iparams i32 [M][4]  top_k (<= 0: off), seed low 32 bits, seed high 32 bits, draw counter
//   pen_off i32 [M+1];  pen_tok, pen_cnt i32 [pen_off[M]]: distinct recent tokens and counts
//   out     i32 [M]     chosen token; temperature <= 0 means greedy (lowest id on ties)
#include "common.cuh"

#ifndef SAMPLE_THREADS
#define SAMPLE_THREADS 1024
#endif

OJ_DEV u32 order_key(float f) {
    const u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

OJ_DEV u64 splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

struct Range {
    int lo, hi;
};
OJ_DEV Range my_range(int V) {
    const int chunk = (V + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
    const int lo = min(V, (int)threadIdx.x * chunk);
    return {lo, min(V, lo + chunk)};
}

OJ_DEV void apply_penalties(float* lg, const float* fp, const int* pen_tok, const int* pen_cnt,
                            int lo, int hi) {
    const float rep = fp[3], freq = fp[4], pres = fp[5];
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        const int tok = pen_tok[j], cnt = pen_cnt[j];
        float l = lg[tok];
        if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;
        l -= (float)cnt * freq + (cnt > 0 ? pres : 0.0f);
        lg[tok] = l;
    }
    __syncthreads();
}

// Largest key threshold T with weight(key >= T) >= need, where weight is a count (mode 0) or a
// probability mass exp(l - mx) (mode 1) over the candidates key >= floor_key.
OJ_DEV u32 search_threshold(const float* lg, Range r, u32 floor_key, float mx, int mode,
                            float need, float* scratch) {
    u32 prefix = 0;
    for (int bit = 31; bit >= 0; --bit) {
        const u32 cand = prefix | (1u << bit);
        float w = 0.0f;
        for (int i = r.lo; i < r.hi; ++i) {
            const u32 k = order_key(lg[i]);
            if (k >= cand && k >= floor_key) w += mode == 0 ? 1.0f : __expf(lg[i] - mx);
        }
        if (block_sum(w, scratch) >= need) prefix = cand;
    }
    return prefix;
}

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_rows(float* logits, int V, const float* fparams, const int* iparams,
                const int* pen_off, const int* pen_tok, const int* pen_cnt, int* out) {
    oj_grid_dep_early();
    __shared__ float scratch[32];
    __shared__ float part[SAMPLE_THREADS];
    __shared__ int sidx[32];
    const int row = blockIdx.x;
    float* lg = logits + (size_t)row * V;
    const float* fp = fparams + row * 8;
    const int* ip = iparams + row * 4;
    apply_penalties(lg, fp, pen_tok, pen_cnt, pen_off[row], pen_off[row + 1]);
    const Range r = my_range(V);

    // argmax with the lowest index on ties (also the greedy answer)
    float best = -OJ_INF;
    int bi = 0x7fffffff;
    for (int i = r.lo; i < r.hi; ++i)
        if (lg[i] > best) best = lg[i], bi = i;
    const float mx = block_max(best, scratch);
    int cand = best == mx ? bi : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) cand = min(cand, __shfl_xor_sync(0xffffffffu, cand, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sidx[threadIdx.x >> 5] = cand;
    __syncthreads();
    const float temp = fp[0];
    if (temp <= 0.0f) {
        if (threadIdx.x == 0) {
            int b = 0x7fffffff;
            for (int w = 0; w < SAMPLE_THREADS / 32; ++w) b = min(b, sidx[w]);
            out[row] = b;
        }
        return;
    }

    u32 floor_key = 0;
    const int top_k = ip[0];
    if (top_k > 0 && top_k < V) floor_key = search_threshold(lg, r, 0, mx, 0, (float)top_k, scratch);
    const float top_p = fp[1];
    if (top_p < 1.0f) {
        float z = 0.0f;
        for (int i = r.lo; i < r.hi; ++i)
            if (order_key(lg[i]) >= floor_key) z += __expf(lg[i] - mx);
        const float zt = block_sum(z, scratch);
        const u32 kp = search_threshold(lg, r, floor_key, mx, 1, top_p * zt, scratch);
        floor_key = max(floor_key, kp);
    }
    const float min_p = fp[2];
    if (min_p > 0.0f) floor_key = max(floor_key, order_key(mx + logf(min_p)));
    floor_key = min(floor_key, order_key(mx));  // the best token always survives

    // draw: weights exp((l - mx) / temp) over survivors, prefix sums in thread order
    const float inv_t = 1.0f / temp;
    float w = 0.0f;
    for (int i = r.lo; i < r.hi; ++i)
        if (order_key(lg[i]) >= floor_key) w += __expf((lg[i] - mx) * inv_t);
    part[threadIdx.x] = w;
    __syncthreads();
    if (threadIdx.x == 0) {
        const u64 seed = (u64)(u32)ip[1] | ((u64)(u32)ip[2] << 32);
        const u64 x = splitmix64(seed ^ splitmix64((u64)(u32)ip[3]));
        float total = 0.0f;
        for (int i = 0; i < SAMPLE_THREADS; ++i) total += part[i];
        float target = (float)(x >> 40) * (1.0f / 16777216.0f) * total;
        int owner = -1, last = 0;
        for (int i = 0; i < SAMPLE_THREADS && owner < 0; ++i) {
            if (part[i] > 0.0f) last = i;
            if (target < part[i]) owner = i;
            else target -= part[i];
        }
        if (owner < 0) owner = last, target = 0.0f;  // rounding at the very end
        sidx[0] = owner;
        scratch[0] = target;
    }
    __syncthreads();
    if ((int)threadIdx.x == sidx[0]) {
        float target = scratch[0];
        int pick = -1;
        for (int i = r.lo; i < r.hi; ++i) {
            if (order_key(lg[i]) < floor_key) continue;
            pick = i;
            const float wi = __expf((lg[i] - mx) * inv_t);
            if (target < wi) break;
            target -= wi;
        }
        out[row] = pick >= 0 ? pick : bi;
    }
}

// On-device sampling, one CTA (SAMPLE_THREADS threads) per logits row, no cap on top_k.
// Order as llama.cpp's default chain: penalties -> top_k -> top_p -> min_p -> temperature ->
// draw. Thresholds are found by a bitwise search over order-preserving keys of the logits, so
// nothing is sorted; every sum is taken in a fixed order, so the draw is reproducible.
//
// Two paths, the same thresholds (up to the order of the float sums) and the same draw rule:
//   fast   the row's candidates above a lower bound L of the final threshold are compacted (in
//          vocabulary order) into shared memory in one pass, and warp 0 searches and draws over
//          them. L: with top_k (k <= SAMPLE_THREADS), the k-th largest of the threads' own
//          maxima (at least k logits are >= it, so the top-k threshold is); without top_k, the
//          higher of min_p's max + log(min_p) and top_p's bound: the lowest of the largest
//          maxima that together hold top_p of the row's mass (the logits >= it hold at least
//          as much; the row's mass takes one more pass). Why: the full search reads the
//          whole row (1 MB at 248K tokens) about 32 times per threshold from one SM: 3.2 ms a
//          step with llama-server's defaults (top_k 40, top_p 0.95, min_p 0.05), 88 us this
//          way (bench/NOTES.md v36g), and 1.7 ms with top_p alone.
//   full   without such a bound (top_k > SAMPLE_THREADS, or top_p alone where the maxima hold
//          less than top_p), or when a warp's candidates overflow its share of the buffer
//          (SAMPLE_CAPW): the search over the whole row, each thread one contiguous range.
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
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)
#ifndef SAMPLE_CAPW
#define SAMPLE_CAPW 128  // compacted candidates per warp (the fast path's buffer: 32 KiB)
#endif
#ifndef SAMPLE_BATCH
#define SAMPLE_BATCH 8  // rows of 32 logits a warp loads before compacting any (the fast path)
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

// the argmax: the lowest of the warps' lowest indices of the maximum
OJ_DEV int lowest(const int* sidx) {
    int b = 0x7fffffff;
    for (int w = 0; w < SAMPLE_WARPS; ++w) b = min(b, sidx[w]);
    return b;
}

// The fast path's passes read the row warp by warp, each warp one contiguous chunk (a multiple
// of 32 tokens), its lanes 32 apart: coalesced, and the chunks in vocabulary order.
OJ_DEV Range warp_chunk(int V) {
    const int chunk = (V + 32 * SAMPLE_WARPS - 1) / (32 * SAMPLE_WARPS) * 32;
    const int lo = min(V, (int)(threadIdx.x >> 5) * chunk);
    return {lo, min(V, lo + chunk)};
}

// One warp alone: the largest key T with weight(key >= T) >= need over the n logits val, where
// weight is a count (mode 0) or a probability mass exp(l - mx) (mode 1), counting only keys >=
// floor_key. Lane j takes entries j, j + 32, ...; the lanes' sums are added in a fixed order.
OJ_DEV u32 warp_threshold(const float* val, int n, float mx, u32 floor_key, int mode, float need) {
    const int lane = threadIdx.x & 31;
    u32 prefix = 0;
    for (int bit = 31; bit >= 0; --bit) {
        const u32 cand = prefix | (1u << bit);
        float s = 0.0f;
        for (int i = lane; i < n; i += 32) {
            const u32 k = order_key(val[i]);
            if (k >= cand && k >= floor_key) s += mode == 0 ? 1.0f : __expf(val[i] - mx);
        }
        if (warp_sum(s) >= need) prefix = cand;
    }
    return prefix;
}

// The fast path after the compaction: warp 0 over the n candidates (val, idx: logits and token
// ids in vocabulary order) -> the token (-1 if rounding left none). z_all: the whole row's mass
// (top_p without top_k); use_k: top_k applies.
OJ_DEV int draw_compacted(const float* val, const int* idx, int n, float mx, const float* fp, const int* ip,
                          float z_all, bool use_k) {
    const int lane = threadIdx.x & 31;
    u32 floor_key = 0;
    if (use_k) floor_key = warp_threshold(val, n, mx, 0, 0, (float)ip[0]);
    const float top_p = fp[1];
    if (top_p < 1.0f) {
        float zc = 0.0f;
        for (int i = lane; i < n; i += 32)
            if (order_key(val[i]) >= floor_key) zc += __expf(val[i] - mx);
        zc = warp_sum(zc);
        const float z = use_k ? zc : z_all;  // with top_k, every candidate of top_p is here
        // without it, the candidates here are those above a lower bound of the final
        // threshold: if they hold less than the need, top_p's threshold is below them and
        // min_p's decides
        if (zc >= top_p * z) floor_key = max(floor_key, warp_threshold(val, n, mx, floor_key, 1, top_p * z));
    }
    const float min_p = fp[2];
    if (min_p > 0.0f) floor_key = max(floor_key, order_key(mx + logf(min_p)));
    floor_key = min(floor_key, order_key(mx));
    // draw in vocabulary order: lane j owns entries [j c, j c + c)
    const float inv_t = 1.0f / fp[0];
    const int c = (n + 31) / 32, lo = min(n, lane * c), hi = min(n, lo + c);
    float part = 0.0f;
    for (int i = lo; i < hi; ++i)
        if (order_key(val[i]) >= floor_key) part += __expf((val[i] - mx) * inv_t);
    // every lane walks the 32 partial sums in order (the same bits on each)
    const u64 seed = (u64)(u32)ip[1] | ((u64)(u32)ip[2] << 32);
    const u64 x = splitmix64(seed ^ splitmix64((u64)(u32)ip[3]));
    float total = 0.0f;
    for (int j = 0; j < 32; ++j) total += __shfl_sync(0xffffffffu, part, j);
    float target = (float)(x >> 40) * (1.0f / 16777216.0f) * total;
    int owner = -1, last = 0;
    for (int j = 0; j < 32; ++j) {
        const float pj = __shfl_sync(0xffffffffu, part, j);
        if (owner >= 0) continue;
        if (pj > 0.0f) last = j;
        if (target < pj) owner = j;
        else target -= pj;
    }
    if (owner < 0) owner = last, target = 0.0f;  // rounding at the very end
    int pick = -1;
    if (lane == owner) {
        for (int i = lo; i < hi; ++i) {
            if (order_key(val[i]) < floor_key) continue;
            pick = idx[i];
            const float wi = __expf((val[i] - mx) * inv_t);
            if (target < wi) break;
            target -= wi;
        }
    }
    return __shfl_sync(0xffffffffu, pick, owner);
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
    const Range r = my_range(V), wc = warp_chunk(V);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // argmax with the lowest index on ties (also the greedy answer; each thread's indices rise)
    float best = -OJ_INF;
    int bi = 0x7fffffff;
    for (int i = wc.lo + lane; i < wc.hi; i += 32)
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
        if (threadIdx.x == 0) out[row] = lowest(sidx);
        return;
    }

    const int top_k = ip[0];
    const float min_p = fp[2];
    const bool use_k = top_k > 0 && top_k < V;
    const float top_p = fp[1];
    const bool bound_p = !use_k && top_p < 1.0f;  // top_p alone (with or without min_p)
    if ((use_k && top_k <= SAMPLE_THREADS) || bound_p || (!use_k && min_p > 0.0f)) {
        // the fast path (header): L, then the candidates >= L compacted per warp, in order
        __shared__ u32 low_key;
        __shared__ int ccount[SAMPLE_WARPS];
        __shared__ float cval[SAMPLE_WARPS * SAMPLE_CAPW];
        __shared__ int cidx[SAMPLE_WARPS * SAMPLE_CAPW];
        // top_p alone: the row's mass, for its bound (one more pass, for such rows alone)
        float z_all = 0.0f;
        if (bound_p) {
            float z = 0.0f;
            for (int i = wc.lo + lane; i < wc.hi; i += 32) z += __expf(lg[i] - mx);
            z_all = block_sum(z, scratch);
        }
        if (use_k || bound_p) {
            // top_k: at least top_k logits are >= the top_k-th largest of the threads' maxima;
            // top_p: the logits >= the lowest of the largest maxima that together hold top_p
            // of the mass hold it too (0, no bound, where all the maxima hold less)
            part[threadIdx.x] = best;
            __syncthreads();
            if (warp == 0) {
                // the mass's search over blockDim.x entries, not the constant: unrolled, ptxas
                // chose 32 registers for the kernel and spilled (sm_90)
                const u32 t = use_k ? warp_threshold(part, SAMPLE_THREADS, mx, 0, 0, (float)top_k)
                                    : warp_threshold(part, blockDim.x, mx, 0, 1, top_p * z_all);
                if (lane == 0) low_key = t;
            }
        } else if (threadIdx.x == 0) {
            low_key = 0;
        }
        __syncthreads();
        u32 low = low_key;
        if (!use_k && min_p > 0.0f) low = max(low, order_key(mx + logf(min_p)));  // min_p's own
        low = min(low, order_key(mx));
        if (low != 0) {
            int cnt = 0;  // the same on every lane of the warp
            // SAMPLE_BATCH loads of 32 logits in flight before the first ballot (one at a time,
            // each load waited for the ballot before it: L2's latency per 32 logits; v40b)
            for (int base = wc.lo; base < wc.hi; base += 32 * SAMPLE_BATCH) {
                float vs[SAMPLE_BATCH];
#pragma unroll
                for (int b = 0; b < SAMPLE_BATCH; ++b) {
                    const int i = base + b * 32 + lane;
                    vs[b] = i < wc.hi ? lg[i] : -OJ_INF;
                }
#pragma unroll
                for (int b = 0; b < SAMPLE_BATCH; ++b) {
                    const int i = base + b * 32 + lane;
                    const bool keep = i < wc.hi && order_key(vs[b]) >= low;
                    const u32 m = __ballot_sync(0xffffffffu, keep);
                    const int at = cnt + __popc(m & ((1u << lane) - 1u));
                    if (keep && at < SAMPLE_CAPW) {
                        cval[warp * SAMPLE_CAPW + at] = vs[b];
                        cidx[warp * SAMPLE_CAPW + at] = i;
                    }
                    cnt += __popc(m);
                }
            }
            if (lane == 0) ccount[warp] = cnt;
            __syncthreads();
            bool over = false;
            for (int w = 0; w < SAMPLE_WARPS; ++w) over |= ccount[w] > SAMPLE_CAPW;
            if (!over) {
                if (warp == 0) {
                    // pack the warps' lists to the front, in order (moving left: each chunk of
                    // 32 is read before it is written, and later chunks lie to the right)
                    int n = 0;
                    for (int w = 0; w < SAMPLE_WARPS; ++w) {
                        for (int e = 0; e < ccount[w]; e += 32) {
                            const bool has = e + lane < ccount[w];
                            const float v = has ? cval[w * SAMPLE_CAPW + e + lane] : 0.0f;
                            const int id = has ? cidx[w * SAMPLE_CAPW + e + lane] : 0;
                            __syncwarp();
                            if (has) cval[n + e + lane] = v, cidx[n + e + lane] = id;
                            __syncwarp();
                        }
                        n += ccount[w];
                    }
                    const int pick = draw_compacted(cval, cidx, n, mx, fp, ip, z_all, use_k);
                    if (lane == 0) out[row] = pick >= 0 ? pick : lowest(sidx);
                }
                return;
            }
        }
        __syncthreads();  // `part` is written again below
    }

    u32 floor_key = 0;
    if (use_k) floor_key = search_threshold(lg, r, 0, mx, 0, (float)top_k, scratch);
    if (top_p < 1.0f) {
        float z = 0.0f;
        for (int i = r.lo; i < r.hi; ++i)
            if (order_key(lg[i]) >= floor_key) z += __expf(lg[i] - mx);
        const float zt = block_sum(z, scratch);
        const u32 kp = search_threshold(lg, r, floor_key, mx, 1, top_p * zt, scratch);
        floor_key = max(floor_key, kp);
    }
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

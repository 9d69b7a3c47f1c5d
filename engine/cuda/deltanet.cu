// Gated DeltaNet (spec section 4.4): causal depthwise conv + SiLU + L2 norm, the delta-rule
// recurrence with the gated RMSNorm output and the commit of the recurrent and conv state.
//
// Compile-time dims: DN_DK (key head dim), DN_DV (value head dim), DN_HK (key heads).
// A step's rows are grouped in segments, one per slot: rows seg_start[s] .. + seg_rows[s] - 1
// are consecutive positions of state slot seg_slot[s].
// Rollback without copies: the recurrence keeps the state in registers and writes it back only
// for segments with seg_commit[s] = 1 (no drafts). Segments with drafts are replayed after the
// verification over the accepted rows only (dn_recur with y = nullptr), from the untouched state.
//
// Buffers (per DeltaNet layer; a launch may cover several layers through blockIdx.z and the
// *_lstride arguments, in elements):
//   mix      f32 [T][ldm]        first C = 2*DN_HK*DN_DK + HV*DN_DV columns: pre-conv q|k|v
//   u        f32 [T][C]          after conv + SiLU (+ L2 norm on q and k)
//   conv_w   f32 [C][4]          tap 3 multiplies the current row
//   conv_st  f32 [slots][3][C]   the last three pre-conv rows, oldest first
//   z        f32 [T][ldz]        output gate (HV*DN_DV used)
//   beta,alpha f32 [T][ldg]      projections (HV used)
//   ssm_a, dt_bias f32 [HV];  ssm_norm f32 [DN_DV]
//   state    f32 [slots][HV][DN_DK][DN_DV]   S[i][c], c contiguous
//   y        f32 [T][HV*DN_DV]   gated-norm output (nullptr: replay, no output)
#include "common.cuh"

#ifndef DN_DK
#define DN_DK 128
#endif
#ifndef DN_DV
#define DN_DV 128
#endif
#ifndef DN_HK
#define DN_HK 16
#endif
#ifndef DN_CB
#define DN_CB 32  // state columns per dn_recur_split CTA (a divisor of DN_DV)
#endif

// One channel of one row: conv over (state, earlier rows of the segment, this row), then SiLU.
OJ_DEV float dn_conv_channel(const float* mix, int ldm, const float* conv_w, const float* conv_st,
                             int C, int t, int i_in_seg, int c) {
    float acc = conv_w[4 * c + 3] * mix[(size_t)t * ldm + c];
#pragma unroll
    for (int k = 1; k <= 3; ++k) {
        const int j = i_in_seg - k;
        const float x = j >= 0 ? mix[(size_t)(t - k) * ldm + c] : conv_st[(size_t)(3 + j) * C + c];
        acc += conv_w[4 * c + 3 - k] * x;
    }
    return silu_f(acc);
}

// grid (C / DN_DK, T), block DN_DK.  row_slot/row_first: i32 [T]; mix rows ldm apart.
extern "C" __global__ void dn_conv(const float* mix, int ldm, const float* conv_w,
                                   const float* conv_st, float* u, const int* row_slot,
                                   const int* row_first, int C) {
    oj_grid_dep_early();
    __shared__ float scratch[32];
    const int t = blockIdx.y, c = blockIdx.x * DN_DK + threadIdx.x;
    conv_st += (size_t)row_slot[t] * 3 * C;
    float v = dn_conv_channel(mix, ldm, conv_w, conv_st, C, t, t - row_first[t], c);
    if (blockIdx.x < 2 * DN_HK) {  // q and k heads: L2 norm, eps inside the square root
        const float ss = block_sum(v * v, scratch);
        v *= rsqrtf(ss + OJ_EPS);
    }
    u[(size_t)t * C + c] = v;
}

// New conv state of channel c after keeping the first `keep` rows of a segment: the last three
// of [state rows, segment rows 0..keep-1]. mix: the segment's first row; st: the slot's state.
OJ_DEV void conv_commit_channel(const float* mix, int ldm, float* st, int C, int keep, int c) {
    float nv[3];
#pragma unroll
    for (int j = 0; j < 3; ++j) {
        const int idx = keep + j;  // index into [st0, st1, st2, row0, row1, ...]
        nv[j] = idx < 3 ? st[(size_t)idx * C + c] : mix[(size_t)(idx - 3) * ldm + c];
    }
#pragma unroll
    for (int j = 0; j < 3; ++j) st[(size_t)j * C + c] = nv[j];
}

// The gated RMSNorm of one value head's DN_DV outputs in each of a segment's rows, one warp per
// row: y = y / rms(y) * ssm_norm * silu(z), in place; yh (may be null): the same values packed
// for the output product (`store_packed_half`, rows in groups of 2^lg, HV * DN_DV per row).
OJ_DEV void dn_gate_norm_rows(float* y, const float* z, int ldz, const float* ssm_norm, int HV,
                              int j, int t0, int nrows, u16* yh, int lg) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    constexpr int PER_LANE = DN_DV / 32;
    for (int r = warp; r < nrows; r += blockDim.x >> 5) {
        const size_t t = (size_t)(t0 + r);
        float* yr = y + t * HV * DN_DV + j * DN_DV;
        float ov[PER_LANE], ss = 0.0f;
#pragma unroll
        for (int e = 0; e < PER_LANE; ++e) {
            ov[e] = yr[lane + 32 * e];
            ss += ov[e] * ov[e];
        }
        const float inv = rsqrtf(warp_sum(ss) / (float)DN_DV + OJ_EPS);
#pragma unroll
        for (int e = 0; e < PER_LANE; ++e) {
            const int col = lane + 32 * e;
            const float v = ov[e] * inv * ssm_norm[col] * silu_f(z[t * ldz + j * DN_DV + col]);
            yr[col] = v;
            if (yh) store_packed_half(yh, (int)t, j * DN_DV + col, HV * DN_DV, lg, v);
        }
    }
}

// The delta rule for one value head over the rows of one segment, CB of its state columns per
// CTA. Two threads per state column: thread 2c + h owns column c's rows h*DN_DK/2 .. +DN_DK/2
// of the state (64 registers, where one thread per column held all 128 and spilled), and the
// pair adds its two partial dot products with one shuffle. A column's update reads only that
// column (and the row's q, k), so the arithmetic of a column is the same at any CB (same
// bits). Two kernels:
//   dn_recur        CB = DN_DV: a CTA per head, the gated RMSNorm of the outputs after the
//                   recurrence in the same CTA (decode: one row per segment, fewest launches)
//   dn_recur_split  CB = DN_CB: DN_DV / DN_CB CTAs per head, so a prompt's rows, which run one
//                   after another here, keep 4x the SMs busy (48 heads x 4 CTAs on the H200's
//                   132 SMs where 48 CTAs left most idle: a 512-row chunk 242 -> 231 ms); the
//                   norm needs a head's whole row and runs after it (dn_gate_norm)
// grid (HV * DN_DV / CB [+ ceil(C / (2*CB))], segments, layers), block 2*CB.
// With mix != nullptr the extra blocks of grid x commit the conv state after seg_keep[s] rows,
// 2*CB channels each (this kernel runs after dn_conv, the state's only reader): no launch of
// its own, one graph node less per DeltaNet layer.
static_assert(DN_DK == DN_DV, "dn_recur: one thread pair per key and value element");
static_assert(DN_DK % 4 == 0, "dn_recur: each thread's half in two FMA chains");
static_assert(DN_DV % 32 == 0, "dn_recur: the output norm takes DN_DV / 32 columns per lane");
static_assert(DN_DV % DN_CB == 0, "dn_recur_split: DN_CB divides the value head");
#define DN_KH (DN_DK / 2)
#define DN_RECUR_PARAMS                                                                          \
    const float *u, const float *z, int ldz, const float *beta, const float *alpha, int ldg,    \
        const float *ssm_a, const float *dt_bias, const float *ssm_norm, float *state, float *y, \
        const int *seg_slot, const int *seg_start, const int *seg_rows, const int *seg_commit,   \
        int HV, long long u_lstride, long long g_lstride, long long p_lstride,                   \
        long long st_lstride, const float *mix, int ldm, float *conv_st, const int *seg_keep,    \
        long long mix_lstride, long long cst_lstride, u16 *yh, int lg
#define DN_RECUR_ARGS                                                                           \
    u, z, ldz, beta, alpha, ldg, ssm_a, dt_bias, ssm_norm, state, y, seg_slot, seg_start,       \
        seg_rows, seg_commit, HV, u_lstride, g_lstride, p_lstride, st_lstride, mix, ldm, conv_st, \
        seg_keep, mix_lstride, cst_lstride, yh, lg
template <int CB>
OJ_DEV void dn_recur_cols(DN_RECUR_PARAMS) {
    constexpr int NCB = DN_DV / CB;
    constexpr int QKR = (DN_DK + 2 * CB - 1) / (2 * CB);  // q and k elements a thread stages
    __shared__ float qs[2][DN_DK], ks[2][DN_DK];  // double-buffered: one barrier per row
    const int j = blockIdx.x / NCB, s = blockIdx.y, g = j % DN_HK;
    const int c = (blockIdx.x % NCB) * CB + (threadIdx.x >> 1), hf = threadIdx.x & 1;
    const int k0 = hf * DN_KH, C = 2 * DN_HK * DN_DK + HV * DN_DV;
    // The product after this kernel may be scheduled at once (oj_grid_dep_early's order). A
    // pass with outputs reads its state BEFORE waiting for the kernel before it, so that read
    // overlaps that kernel (dn_conv) and the tail of the product before it: no kernel of a step
    // writes a DeltaNet state ahead of its own layer's recurrence, and every kernel from the
    // layer's input product on starts only after that product's wait, which orders everything
    // before it (checkpoint restores and resets run before the step, outside its graph). The
    // replay (y == nullptr) follows other work and waits first. seg_slot is the pass's metadata,
    // copied before the step's first kernel.
    oj_grid_release();
    const bool head = j < HV, early = y != nullptr;
    float* S = state + blockIdx.z * st_lstride + (((size_t)seg_slot[s] * HV + j) * DN_DK) * DN_DV;
    float st[DN_KH];
    auto load_state = [&] {
#pragma unroll
        for (int i = 0; i < DN_KH; ++i) st[i] = S[(size_t)(k0 + i) * DN_DV + c];
    };
    if (head && early) load_state();
    oj_grid_dep();
    if (head && !early) load_state();
    if (!head) {
        const int channel = (blockIdx.x - HV * NCB) * blockDim.x + threadIdx.x;
        if (seg_keep[s] > 0 && channel < C) {
            const float* m = mix + blockIdx.z * mix_lstride + (size_t)seg_start[s] * ldm;
            float* cs = conv_st + blockIdx.z * cst_lstride + (size_t)seg_slot[s] * 3 * C;
            conv_commit_channel(m, ldm, cs, C, seg_keep[s], channel);
        }
        return;
    }
    u += blockIdx.z * u_lstride;
    beta += blockIdx.z * g_lstride;
    alpha += blockIdx.z * g_lstride;
    ssm_a += blockIdx.z * p_lstride;
    dt_bias += blockIdx.z * p_lstride;
    ssm_norm += blockIdx.z * (long long)DN_DV;

    const float qscale = rsqrtf((float)DN_DK);
    const int t0 = seg_start[s], nrows = seg_rows[s];
    // The next row's inputs are loaded into registers while this row is computed: prefill runs
    // hundreds of rows one after another here, and each row's loads would otherwise stall it.
    // Thread i stages elements i, i + 2*CB, ... of q and k.
    float qn[QKR], kn[QKR], vn = 0.0f, bn = 0.0f, an = 0.0f;
    auto load_row = [&](int t) {
        const float* ut = u + (size_t)t * C;
#pragma unroll
        for (int e = 0; e < QKR; ++e) {
            const int i = threadIdx.x + 2 * CB * e;
            if (i < DN_DK) {
                qn[e] = ut[g * DN_DK + i];
                kn[e] = ut[DN_HK * DN_DK + g * DN_DK + i];
            }
        }
        vn = ut[2 * DN_HK * DN_DK + j * DN_DV + c];
        bn = beta[(size_t)t * ldg + j];
        an = alpha[(size_t)t * ldg + j];
    };
    if (nrows > 0) load_row(t0);
    for (int r = 0; r < nrows; ++r) {
        const int t = t0 + r, buf = r & 1;
        // buffer `buf` was last read in row r - 2, which every thread finished before the
        // barrier of row r - 1
#pragma unroll
        for (int e = 0; e < QKR; ++e) {
            const int i = threadIdx.x + 2 * CB * e;
            if (i < DN_DK) {
                qs[buf][i] = qn[e] * qscale;
                ks[buf][i] = kn[e];
            }
        }
        const float v = vn;
        const float b = sigmoid_f(bn);
        const float decay = __expf(ssm_a[j] * softplus_f(an + dt_bias[j]));
        __syncthreads();
        if (r + 1 < nrows) load_row(t + 1);
        const float* kr = ks[buf] + k0;
        const float* qr = qs[buf] + k0;
        // two partial sums per thread, then the pair's halves (a + b == b + a: both threads
        // of the pair get the same bits)
        float rk2[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < DN_KH; ++i) {
            st[i] *= decay;
            rk2[i & 1] += st[i] * kr[i];
        }
        float rk = rk2[0] + rk2[1];
        rk += __shfl_xor_sync(0xffffffffu, rk, 1);
        const float delta = b * (v - rk);
        float o2[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < DN_KH; ++i) {
            st[i] += kr[i] * delta;
            o2[i & 1] += st[i] * qr[i];
        }
        float o = o2[0] + o2[1];
        o += __shfl_xor_sync(0xffffffffu, o, 1);
        if (y != nullptr && hf == 0) y[(size_t)t * HV * DN_DV + j * DN_DV + c] = o;
    }
    if (NCB == 1 && y != nullptr && nrows > 0) {
        // the gated RMSNorm over each row's DN_DV outputs, after the recurrence: off the
        // row-to-row critical path (a block-wide sum per row inside the loop cost two more
        // barriers per row), reading the raw outputs back (same block)
        __syncthreads();
        dn_gate_norm_rows(y, z, ldz, ssm_norm, HV, j, t0, nrows, yh, lg);
    }
    if (seg_commit[s]) {
#pragma unroll
        for (int i = 0; i < DN_KH; ++i) S[(size_t)(k0 + i) * DN_DV + c] = st[i];
    }
}

// (dn_recur_cols waits for the kernel before it itself, after its state loads.) Two CTAs per
// SM at most 128 registers a thread: at 130 (ptxas' choice with the packed output's stores) one
// 256-thread CTA filled an SM's registers, and four slots' 192 heads would take two waves.
extern "C" __global__ void __launch_bounds__(2 * DN_DV, 2) dn_recur(DN_RECUR_PARAMS) {
    dn_recur_cols<DN_DV>(DN_RECUR_ARGS);
}
extern "C" __global__ void __launch_bounds__(2 * DN_CB) dn_recur_split(DN_RECUR_PARAMS) {
    dn_recur_cols<DN_CB>(DN_RECUR_ARGS);
}

// dn_recur_split's gated RMSNorm (dn_recur's arithmetic, in place). grid (HV, segments),
// block 256.
extern "C" __global__ void dn_gate_norm(float* y, const float* z, int ldz, const float* ssm_norm,
                                        const int* seg_start, const int* seg_rows, int HV,
                                        u16* yh, int lg) {
    oj_grid_dep_early();
    const int s = blockIdx.y;
    dn_gate_norm_rows(y, z, ldz, ssm_norm, HV, blockIdx.x, seg_start[s], seg_rows[s], yh, lg);
}

// Row-wise element kernels of the qwen35 forward pass: RMSNorm, SwiGLU, row gather.
// Each op is a device function plus a thin __global__ wrapper (so a fused kernel can call it).
#include "common.cuh"

// y[n] = x[n] / sqrt(mean(x^2) + eps) * w[n]; one CTA per row. n % 4 == 0, 16-byte aligned rows.
// yh (may be null): the same values packed for the products (`pack_b`: f16, x0 x2 x1 x3), row
// `row` of a buffer of ldyh halves per row laid out as `packed_at` says (groups of 2^lg).
// float4 loads, unrolled, so the row's loads are in flight together (a single row is
// latency-bound otherwise: ~8 us per norm instead of ~3).
OJ_DEV void rmsnorm_row(const float* x, const float* w, float* y, u16* yh, int ldyh, int lg,
                        int row, int n, float eps, float* scratch) {
    const float4* x4 = (const float4*)x;
    const float4* w4 = (const float4*)w;
    float4* y4 = (float4*)y;
    const int n4 = n >> 2;
    float ss = 0.0f;
#pragma unroll 8
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = x4[i];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float inv = rsqrtf(block_sum(ss, scratch) / (float)n + eps);
#pragma unroll 8
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = x4[i], g = w4[i];
        const float4 r = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
        y4[i] = r;
        if (yh) *(uint2*)(yh + packed_at(row, 4 * i, ldyh, lg)) = pack_b(r);
    }
}

// ldyh: row stride of yh in halves (yh null: no packed copy). Launched with up to 1,024 threads
// (kernels.RMSNORM_THREADS): the bound keeps its registers within that.
extern "C" __global__ void __launch_bounds__(1024) rmsnorm_rows(const float* x, int ldx, const float* w, float* y, int ldy,
                                        u16* yh, int ldyh, int lg, int n, float eps) {
    oj_grid_dep_early();
    __shared__ float scratch[32];
    rmsnorm_row(x + (size_t)blockIdx.x * ldx, w, y + (size_t)blockIdx.x * ldy, yh, ldyh, lg,
                blockIdx.x, n, eps, scratch);
}

// h[t][i] = silu(g) * u, gate g and up u of feature i: gu[t][i] and gu[t][F + i], or with `il`
// (a gate|up weight whose rows alternate in groups of 8: weights.interleave_halves)
// gu[t][16 (i / 8) + i % 8] and the element 8 after it
//   gu: f32 [T][2F], h: f32 [T][F], hh (may be null): h packed for the products (`pack_b`,
//   f16, ldh halves per row, rows in groups of 2^lg as `packed_at` says); F % 4 == 0 (F % 8
//   with il), four elements per thread
extern "C" __global__ void swiglu_rows(const float* gu, float* h, u16* hh, int ldh, int lg, int F,
                                       int T, int il) {
    oj_grid_dep_early();
    const int F4 = F >> 2;
    const size_t n = (size_t)T * F4;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t t = idx / F4, i = idx % F4;
        const float* row = gu + t * 2 * F;
        const size_t gate = il ? 16 * (i >> 1) + 4 * (i & 1) : 4 * i;  // four features 4i..
        const float4 g = *(const float4*)(row + gate);
        const float4 u = *(const float4*)(row + gate + (il ? 8 : F));
        const float4 r = make_float4(silu_f(g.x) * u.x, silu_f(g.y) * u.y, silu_f(g.z) * u.z,
                                     silu_f(g.w) * u.w);
        ((float4*)h)[idx] = r;
        if (hh) *(uint2*)(hh + packed_at((int)t, 4 * (int)i, ldh, lg)) = pack_b(r);
    }
}

// dst[i][:] = src[idx[i]][:]   src, dst: f32 [.][n]
extern "C" __global__ void gather_rows(const float* src, const int* idx, float* dst, int n) {
    oj_grid_dep_early();
    const float* s = src + (size_t)idx[blockIdx.x] * n;
    float* d = dst + (size_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

// dst row i = src row idx[i], both packed activations (`packed_at`) of ld halves per row, in
// groups of 2^src_lg and 2^dst_lg rows
extern "C" __global__ void gather_packed(const u16* src, int src_lg, const int* idx, u16* dst,
                                         int dst_lg, int ld) {
    oj_grid_dep_early();
    const int r = idx[blockIdx.x];
    for (int q = threadIdx.x; q < (ld >> 2); q += blockDim.x)
        *(uint2*)(dst + packed_at(blockIdx.x, 4 * q, ld, dst_lg)) =
            *(const uint2*)(src + packed_at(r, 4 * q, ld, src_lg));
}

// y = x + a  (residual add; used where a product could not accumulate in place)
extern "C" __global__ void add_rows(float* y, const float* a, size_t n) {
    oj_grid_dep_early();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += a[i];
}

// Shared helpers for every OpenJet kernel: fixed-width types, half-precision conversions and
// arithmetic through inline PTX (so NVRTC needs no CUDA headers), warp/block reductions.
// Everything here is portable to sm_80 and later; the one Hopper instruction (griddepcontrol)
// is compiled only for sm_90 and later.
#pragma once

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;

#ifndef OJ_EPS
#define OJ_EPS 1e-6f
#endif

#define OJ_DEV __device__ __forceinline__
// also callable from host code: the packed activations' layout, which a CPU test compiles
#define OJ_HD __host__ __device__ __forceinline__
#define OJ_INF __int_as_float(0x7f800000)

// ---- programmatic dependent launch (sm_90+; on older GPUs these compile to nothing) --------
// engine/cuda/launch.py may launch a kernel with the programmatic-serialization attribute: its
// CTAs can then start while the kernel before it in the stream is still running. Every
// __global__ calls oj_grid_dep() or oj_grid_dep_early() before its first read of anything an
// earlier kernel of the step may still be writing (the products' weights and the DeltaNet
// recurrence's state are read before: deltanet.cu says why that state is safe), before its
// first write and before any return: griddepcontrol.wait
// blocks until the earlier kernel has finished and its writes are visible (a grid that ended
// without waiting could end before its predecessor, and the next kernel would then read
// unfinished results). launch_dependents lets the next kernel's CTAs be scheduled once every
// CTA of this one has issued it (or exited); it orders nothing in memory.
// oj_grid_dep (the weight products): release after the wait, so a product's successor is
// scheduled only once the product runs, and at most one product runs ahead.
// oj_grid_dep_early (the small kernels between products): release first, so the product after
// a norm or a recurrence is scheduled while the product before it drains, and starts its weight
// loads then. Without the attribute the wait returns at once, so a fused kernel may call these.
OJ_DEV void oj_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
OJ_DEV void oj_grid_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
OJ_DEV void oj_grid_dep() {
    oj_grid_wait();
    oj_grid_release();
}
OJ_DEV void oj_grid_dep_early() {
    oj_grid_release();
    oj_grid_wait();
}

// ---- half <-> float (bit patterns held in u16 / u32 so no header type is needed) ----------
OJ_DEV float h2f(u16 h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}
OJ_DEV u16 f2h(float f) {
    u16 h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}
// Two floats -> one f16x2 register; `lo` goes to the low 16 bits (the lower k index in mma).
OJ_DEV u32 pack_h2(float lo, float hi) {
    return (u32)f2h(lo) | ((u32)f2h(hi) << 16);
}
// Four consecutive activations as the products' B fragment: f16 pairs (x0, x2), (x1, x3).
// Producers of packed f16 activations (for the `mmh_*` products) store exactly these bits.
OJ_DEV uint2 pack_b(float4 x) { return make_uint2(pack_h2(x.x, x.z), pack_h2(x.y, x.w)); }
// Where the products' packed activations keep the quad of row r that starts at element e (e % 4
// == 0; elements e..e+3 as `pack_b` orders them), in halves from the buffer's start: rows go in
// groups of 2^lg, and a group stores quad by quad its rows' 8 bytes side by side (ld: halves
// per row, % 4 == 0; a buffer of R rows spans ceil(R / 2^lg) groups). lg depends on the pass's
// row count alone (kernels.packed_group: a single row alone, 2-4 rows in a group of 4, more in
// groups of 8), so producers and products agree. With rows one after another, L1TEX was 91 %
// busy serving the activation loads of the 8-row products; a single row keeps its quads
// together, as a group of 8 would spread them over 8 times the cache lines (bench/NOTES.md
// v19). Within each group of 8 quads (32 elements) the quads are stored with bits 0 and 2 of
// their index swapped (`packed_quad_slot`): an mma chunk's 4 lane quads (matmul.cu, the
// formats' e0) then lie two by two side by side for Q4_K/Q5_K and all four for Q6_K, so the B
// fragments of an n-tile's 8 rows are 2 cache lines where they were 4 (half the L1 wavefronts
// at 2-16 rows; Q8_0 and F16 unchanged, one row the same). So ld must be at least K rounded up
// to 32 (kernels._packed checks it). With lg 0 and no swap this would be r * ld + e.
OJ_HD int packed_quad_slot(int q) { return (q & ~5) | ((q & 1) << 2) | ((q >> 2) & 1); }
// e (% 4 == 0) moved to its quad's slot: a bit permutation, so of a sum of parts with disjoint
// bits it is the sum of the parts' (matmul.cu b_pair keeps a lane's part in a register and
// makes a chunk's a constant offset).
OJ_HD int packed_elem(int e) { return packed_quad_slot(e >> 2) << 2; }
// packed_at with e already moved (packed_elem)
OJ_HD size_t packed_at_slot(int r, int e_slot, int ld, int lg) {
    return ((size_t)(r >> lg) * ld << lg) + ((size_t)e_slot << lg) + (size_t)(r & ((1 << lg) - 1)) * 4;
}
OJ_HD size_t packed_at(int r, int e, int ld, int lg) { return packed_at_slot(r, packed_elem(e), ld, lg); }
// lg of a pass of `rows` rows (kernels.packed_group): for kernels that find it from the row count.
OJ_DEV int packed_group(int rows) { return rows <= 1 ? 0 : rows <= 4 ? 2 : 3; }
// One element e of row r into a packed buffer, where `pack_b` would put it (its quad's x0 x2 x1
// x3 order) with the same rounding: for producers whose threads hold single elements.
OJ_DEV void store_packed_half(u16* yh, int r, int e, int ld, int lg, float v) {
    yh[packed_at(r, e & ~3, ld, lg) + (((e & 1) << 1) | ((e >> 1) & 1))] = f2h(v);
}
OJ_DEV u32 hadd2(u32 a, u32 b) {
    u32 d;
    asm("{ add.rn.f16x2 %0, %1, %2; }" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
// -a (the sign bits flipped, as XOR 0x80008000 would, but as a PTX neg that ptxas folds into
// the f16x2 instruction reading it: no LOP3)
OJ_DEV u32 hneg2(u32 a) {
    u32 d;
    asm("{ neg.f16x2 %0, %1; }" : "=r"(d) : "r"(a));
    return d;
}
OJ_DEV u32 hsub2(u32 a, u32 b) {
    u32 d;
    asm("{ sub.rn.f16x2 %0, %1, %2; }" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
OJ_DEV u32 hmul2(u32 a, u32 b) {
    u32 d;
    asm("{ mul.rn.f16x2 %0, %1, %2; }" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
OJ_DEV u32 hfma2(u32 a, u32 b, u32 c) {
    u32 d;
    asm("{ fma.rn.f16x2 %0, %1, %2, %3; }" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
OJ_DEV float bf2f(u16 b) { return __uint_as_float(((u32)b) << 16); }
OJ_DEV u32 word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// ---- tensor cores: d += A B, m16n8k16, f16 operands, f32 accumulators (sm_80+) -------------
OJ_DEV void mma_16816(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// m16n8k32 on u8 A (weight codes) and s8 B (activation parts), s32 sums added to d (sm_80+);
// mma_16832_u8s8: the sums from zero. Used by the integer-product probes (bench/tma_probe.cu,
// bench/int_dot_probe.cu), not by the engine.
OJ_DEV void mma_16832_u8s8_acc(int (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
OJ_DEV void mma_16832_u8s8(int (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    d[0] = d[1] = d[2] = d[3] = 0;
    mma_16832_u8s8_acc(d, a0, a1, a2, a3, b0, b1);
}

// ---- math ---------------------------------------------------------------------------------
OJ_DEV float silu_f(float x) { return x / (1.0f + __expf(-x)); }
OJ_DEV float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }
OJ_DEV float softplus_f(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

// ---- reductions (fixed order: results do not depend on anything but the inputs) ----------
OJ_DEV float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
OJ_DEV float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Block-wide sum; `scratch` holds >= 32 floats. All threads get the result.
OJ_DEV float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = 0.0f;
    for (int w = 0; w < nw; ++w) t += scratch[w];
    return t;
}
OJ_DEV float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = -OJ_INF;
    for (int w = 0; w < nw; ++w) t = fmaxf(t, scratch[w]);
    return t;
}

// ---- ggml type ids ------------------------------------------------------------------------
#define GGML_F32 0
#define GGML_F16 1
#define GGML_Q8_0 8
#define GGML_Q4_K 12
#define GGML_Q5_K 13
#define GGML_Q6_K 14
#define GGML_BF16 30

// kpr_cuda_act.cuh -- activation quantization to q8_1 on the device, into a planar layout that every
// CUDA provider reads: for activation vector v (v < nvec, each `cols` long, cols % 32 == 0)
//   q[v * cols + k]        int8 quant of x[v][k]                     (16-byte aligned plane)
//   d[v * (cols/32) + b]   the block's scale, already rounded to f16 and widened back to float
//   s[v * (cols/32) + b]   d * sum(q of the block): the block sum of the dequantized activations
// Numerically this is q8_1 as the ecosystem defines it: amax over 32 values, d = amax / 127,
// q = round(x / d) (ties away from zero, IEEE division with the unrounded float d), d stored as f16.
#pragma once

#include "kpr_cuda_util.cuh"

#include <cstddef>
#include <cstdint>

namespace kpr::cuda {

struct ActQ8 {
    const int8_t *q;
    const float *d;
    const float *s;
    uint32_t cols;
};

// Bytes of scratch for nvec vectors of cols values: the int8 plane, then the d and s planes.
inline size_t act_q8_bytes(size_t nvec, size_t cols) {
    const size_t qb = (nvec * cols + 255) / 256 * 256;
    const size_t fb = nvec * (cols / 32) * sizeof(float);
    return qb + 2 * ((fb + 255) / 256 * 256);
}

inline ActQ8 act_q8_view(void *scratch, size_t nvec, size_t cols) {
    const size_t qb = (nvec * cols + 255) / 256 * 256;
    const size_t fb = nvec * (cols / 32) * sizeof(float);
    uint8_t *base = static_cast<uint8_t *>(scratch);
    ActQ8 a;
    a.q = reinterpret_cast<const int8_t *>(base);
    a.d = reinterpret_cast<const float *>(base + qb);
    a.s = reinterpret_cast<const float *>(base + qb + (fb + 255) / 256 * 256);
    a.cols = static_cast<uint32_t>(cols);
    return a;
}

// One 32-value block, one value per lane: this lane's quant, and the block's scale (rounded to f16) and
// the sum of its quants (every lane gets both).
__device__ __forceinline__ int q8_1_quantize_lane(float xi, float &dh, int &sum) {
    const float amax = warp_max(fabsf(xi));
    const float dd = __fdiv_rn(amax, 127.0f);
    int qi = 0;
    if (amax != 0.0f) qi = static_cast<int>(roundf(__fdiv_rn(xi, dd)));
    sum = warp_sum_int(qi);
    dh = __half2float(__float2half_rn(dd));
    return qi;
}

// The hardware's reciprocal approximation (what __fdiv_rn starts from).
__device__ __forceinline__ float rcp_approx(float d) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return r;
}
// __fdiv_rn's fast path in two parts, so that a block's values share the first: the refined reciprocal of d,
// and round(x / d) from it (a product and one correction). Exact quotients where d is in [2^-100, 2^100] and
// |x| <= 127 d (see q8_1_quantize_quad).
__device__ __forceinline__ float rcp_refined(float d) {
    const float r = rcp_approx(d);
    return __fmaf_rn(r, __fmaf_rn(-d, r, 1.0f), r);
}
__device__ __forceinline__ int quant_by_rcp(float x, float d, float r) {
    const float q0 = __fmul_rn(x, r);
    return static_cast<int>(roundf(__fmaf_rn(r, __fmaf_rn(-q0, d, x), q0)));
}

// One 32-value block held by four consecutive lanes (a group of lanes 4g..4g+3), 8 values per lane in fa
// and fb (as float bits): the same quants, scale and sum as q8_1_quantize_lane. The lane's quants (qa, qb),
// the block's scale rounded to f16 (dh) and the lane's share of the quant sum (qs; the group's sum is
// the sum over its four lanes). The division x / d is __fdiv_rn's own fast path (a refined reciprocal, a
// product, one correction) with the reciprocal computed once per block where d is in [2^-100, 2^100]:
// there, for |x| <= 127 d, __fdiv_rn's range check can fail only for quotients under 2^-26, which round
// to 0 either way, so the integers are the same. Other blocks (zero, tiny, huge, inf) divide.
// BRANCH_FREE (the tile kernel's BRANCH_FREE_QUANT: Q4_0 only): the same integers and scale without a
// branch, so that the compiler may schedule the block among other work: d = amax / 127 as a product by
// RN(1/127) and one fused correction (equal to the IEEE division for every non-negative float: all 2^31
// checked on the CPU by the test program in docs/measurements/h200-branch-free-quantization-experiment.patch,
// a sample and the edge ranges by tests/providers/test_q8_1_branch_free.cpp); where d lies outside
// [2^-100, 2^100], x and d are first scaled by 2^64 or 2^-64 (exact, or, for huge d, inexact only where
// |x / d| < 2^-162, which rounds to 0 either way); d = 0 and d = inf give 0 by a select,
// as the division does (x / inf = 0; inf / inf is NaN, which the conversion turns into 0).
template <bool BRANCH_FREE = false>
__device__ __forceinline__ void q8_1_quantize_quad(const uint32_t (&fa)[4], const uint32_t (&fb)[4], int (&qa)[4],
                                                   int (&qb)[4], float &dh, int &qs) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fmaxf(fabsf(__uint_as_float(fa[i])), fabsf(__uint_as_float(fb[i]))));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    float dd;
    if constexpr (BRANCH_FREE) {
        constexpr float k127 = 0x1.020408p-7f; // RN(1/127)
        constexpr float inf = __builtin_huge_valf();
        const float e0 = __fmul_rn(amax, k127);
        dd = e0 == inf ? e0 : __fmaf_rn(__fmaf_rn(-e0, 127.0f, amax), k127, e0);
        const float sc = dd < 0x1p-100f ? 0x1p64f : dd > 0x1p100f ? 0x1p-64f : 1.0f;
        const float ds = __fmul_rn(dd, sc), r = rcp_refined(ds);
        const bool zero = !(amax > 0.0f) || e0 == inf;
        auto quant = [&](uint32_t w) {
            const int q = quant_by_rcp(__fmul_rn(__uint_as_float(w), sc), ds, r);
            return zero ? 0 : q;
        };
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            qa[i] = quant(fa[i]);
            qb[i] = quant(fb[i]);
        }
    } else {
        dd = __fdiv_rn(amax, 127.0f);
        if (dd >= 0x1p-100f && dd <= 0x1p100f) {
            const float r = rcp_refined(dd);
            auto quant = [&](uint32_t w) { return quant_by_rcp(__uint_as_float(w), dd, r); };
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                qa[i] = quant(fa[i]);
                qb[i] = quant(fb[i]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                qa[i] = qb[i] = 0;
                if (amax != 0.0f) {
                    qa[i] = static_cast<int>(roundf(__fdiv_rn(__uint_as_float(fa[i]), dd)));
                    qb[i] = static_cast<int>(roundf(__fdiv_rn(__uint_as_float(fb[i]), dd)));
                }
            }
        }
    }
    qs = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) qs += qa[i] + qb[i];
    dh = __half2float(__float2half_rn(dd));
}

// The position of value i (0..31) of a 32-value block in the permuted tile layout: lane t's words of the
// tile kernel's B fragment (positions 4t..4t+3 and 16+4t..16+4t+3) hold the values whose weights the
// nibbles of the weight word qs[4t..4t+3] give in order (low, high nibble of byte 4t, of byte 4t+1; then of
// 4t+2, 4t+3): i = 4t, 16+4t, 4t+1, 17+4t | 4t+2, 18+4t, 4t+3, 19+4t. So the weights need no regrouping
// (IQ4_NL, whose byte-permute lookups take four nibbles in that order).
__host__ __device__ constexpr uint32_t tile_perm_pos(uint32_t i) {
    const uint32_t lo = i % 16, t = lo / 4, r = lo % 4;
    return 4 * t + 16 * (r >> 1) + 2 * (r & 1) + (i >= 16 ? 1 : 0);
}

// One thread per value, a warp per 32-value block. n = nvec * cols (a multiple of 32). PERM: each block's
// values at tile_perm_pos in the int8 plane (the nibble order of IQ4_NL's one- and two-column row kernel,
// act_nibble_order), so the kernel needs no byte permutes to pair them with its lookups.
template <bool PERM = false>
static __global__ void __launch_bounds__(256) quantize_act_q8_1(const float *__restrict__ x, size_t n,
                                                        int8_t *__restrict__ q, float *__restrict__ d,
                                                        float *__restrict__ s) {
    // Let the GEMV launch (and start streaming its weights) before waiting: it reads the scratch and
    // writes y only after its own pdl_wait, which waits for this grid to complete, and this grid writes
    // only after the wait below, so both stay ordered after the kernel before us. Measured on the H200
    // against waiting first (4096 x 14336, one column, alternating twice in one lease): 0.3-1.0 us
    // faster for every quantized type (Q8_0 19.3 -> 18.7, IQ4_NL 12.9 -> 11.9).
    pdl_launch_dependents();
    pdl_wait(); // launched early (PDL): the previous kernel may still read the scratch
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i - (threadIdx.x & 31u) >= n) return; // whole warp out of range (n % 32 == 0)
    float dh;
    int sum;
    const int qi = q8_1_quantize_lane(x[i], dh, sum);
    q[PERM ? i / 32 * 32 + tile_perm_pos(static_cast<uint32_t>(i % 32)) : i] = static_cast<int8_t>(qi);
    if ((threadIdx.x & 31u) == 0) {
        d[i / 32] = dh;
        s[i / 32] = __fmul_rn(dh, static_cast<float>(sum));
    }
}

// The tile layout (the tensor-core tile kernel, kpr_cuda_mma.cuh): for every run of 256 columns c, the
// activations of all nvec vectors in the order a stage of the kernel's ring holds them, so that one bulk
// copy brings them in: nvec int8 runs of 256 (stride 272), then nvec runs of 8 block scales (stride 48).
// The strides spread a warp's reads of 8 vectors over the banks. The same bytes per value as the planes
// (320 per 256 values against 256 + 2 x 32).
struct ActTiles {
    static constexpr uint32_t QS = 272, FS = 48;
    // bytes of one run of 256 columns; with sums, the block sums s follow the scales (nvec runs of 8)
    __host__ __device__ static constexpr uint32_t run_bytes(uint32_t nvec, bool sums = false) {
        return nvec * (QS + FS * (sums ? 2 : 1));
    }
};

// Bytes of the tile layout for nvec vectors of cols values (0 where cols % 256 != 0: no tile layout).
// Without sums as many as the planes take (act_q8_bytes); with them 15% more.
inline size_t act_tiles_bytes(size_t nvec, size_t cols, bool sums) {
    return cols % 256 == 0 ? cols / 256 * ActTiles::run_bytes(static_cast<uint32_t>(nvec), sums) : 0;
}

// Quantizes nvec vectors of cols values (cols % 256 == 0) into the tile layout at t (the same values as
// quantize_act_q8_1; the block sums only with SUMS; PERM: each block's values at tile_perm_pos). One
// thread per value. x holds nreal <= nvec vectors; the vectors past them are zeros (kpr_cuda_mma.cuh
// tile_vectors).
template <bool SUMS, bool PERM = false>
static __global__ void __launch_bounds__(256) quantize_act_q8_1_tiles(const float *__restrict__ x, uint32_t nvec,
                                                              uint32_t nreal, uint32_t cols, uint8_t *__restrict__ t) {
    pdl_launch_dependents(); // as quantize_act_q8_1
    pdl_wait();
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i - (threadIdx.x & 31u) >= size_t(nvec) * cols) return;
    float dh;
    int sum;
    const uint32_t v = static_cast<uint32_t>(i / cols), k = static_cast<uint32_t>(i % cols);
    const int qi = q8_1_quantize_lane(v < nreal ? x[i] : 0.0f, dh, sum); // (a warp's 32 values are one vector's)
    uint8_t *run = t + size_t(k / 256) * ActTiles::run_bytes(nvec, SUMS);
    const uint32_t pos = PERM ? (k % 256) / 32 * 32 + tile_perm_pos(k % 32) : k % 256;
    run[v * ActTiles::QS + pos] = static_cast<uint8_t>(static_cast<int8_t>(qi));
    if ((threadIdx.x & 31u) == 0) {
        reinterpret_cast<float *>(run + nvec * ActTiles::QS + v * ActTiles::FS)[(k % 256) / 32] = dh;
        if constexpr (SUMS)
            reinterpret_cast<float *>(run + nvec * (ActTiles::QS + ActTiles::FS) + v * ActTiles::FS)[(k % 256) / 32] =
                __fmul_rn(dh, static_cast<float>(sum));
    }
}

// Quantizes n values of x into the planes of v (n a multiple of 32), launched with PDL where asked; with
// nibble_order each block's values at tile_perm_pos (quantize_act_q8_1<true>, act_nibble_order).
inline cudaError_t launch_quantize_act_q8_1(const float *x, size_t n, const ActQ8 &v, bool pdl, cudaStream_t s,
                                            bool nibble_order = false) {
    return launch_pdl(nibble_order ? quantize_act_q8_1<true> : quantize_act_q8_1<false>,
                      dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0, pdl, s, x, n,
                      const_cast<int8_t *>(v.q), const_cast<float *>(v.d), const_cast<float *>(v.s));
}

} // namespace kpr::cuda

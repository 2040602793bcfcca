// planar_probe_kernels.cuh -- the device building blocks of kpr_planar_probe (not used by any provider): a
// one-column GEMV of the 4-bit 32-weight types (Q4_0, IQ4_NL) on compute capability 9.0 on a planar copy of
// the weights, each thread owning one block position of every row (fourteenth and fifteenth sessions;
// docs/benchmarks.md, "The planar probe" and "Where a one-kernel call's time goes").
//
// The planar layout keeps GGUF's bytes per row (18 per 32 weights) but splits each row into its 16-byte
// nibble blocks, then its f16 scales: row r = [nb x 16 bytes][nb x 2 bytes]. Every weight word is then a
// 16-byte aligned load, and a thread can own one block position of every row: it quantizes its own 32
// activations once per call (q8_1, the integers of quantize_act_q8_1) and keeps them in registers, so no
// activation is read per row. The kernel itself (planar_ldg) is in kpr_planar_probe.cu. The fourteenth
// session's cp.async ring kernels were removed after its measurements (commit b04e350 has them).
#pragma once

#include "kpr_cuda_act.cuh"
#include "kpr_cuda_blocks.cuh"
#include "kpr_cuda_util.cuh"

#include <cstdint>

namespace kpr::cuda {

// GGUF Q4_0 / IQ4_NL rows (18-byte blocks) -> planar rows of the same bytes. One thread per block;
// n = rows of all experts.
static __global__ void planar_repack_q4(const uint8_t *__restrict__ src, uint8_t *__restrict__ dst, uint64_t rb,
                                        uint64_t n_rows, uint32_t nb) {
    const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
    if (i >= n_rows * nb) return;
    const uint64_t r = i / nb, b = i % nb;
    const uint16_t *s = reinterpret_cast<const uint16_t *>(src + r * rb + 18 * b);
    uint32_t q[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) q[k] = uint32_t(s[1 + 2 * k]) | (uint32_t(s[2 + 2 * k]) << 16);
    *reinterpret_cast<uint4 *>(dst + r * rb + 16 * b) = make_uint4(q[0], q[1], q[2], q[3]);
    reinterpret_cast<uint16_t *>(dst + r * rb + 16 * uint64_t(nb))[b] = s[0];
}

struct PlanarArgs {
    const uint8_t *w;  // planar rows
    uint64_t rb;       // row bytes (18 nb, a multiple of 16)
    uint32_t rows, nb; // rows, 32-weight blocks per row
    uint32_t T;        // threads per team (a multiple of 32; T * BPT >= nb)
    uint32_t cap;      // rows per team, rounded up to R (the partial sums' rows)
    const float *x;    // float activations (16-byte aligned)
    float *y;
};

// dp4a of unsigned weight bytes with signed activation bytes.
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 610
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    for (int i = 0; i < 4; ++i) c += int((a >> (8 * i)) & 0xFFu) * int(int8_t(uint32_t(b) >> (8 * i)));
    return c;
#endif
}

// 32 floats quantized by one thread: the quants packed in xw (values 4i..4i+3 in word i), the scale
// rounded to f16 (dh) and the quant sum (sum): the same integers and scale as quantize_act_q8_1
// (q8_1_quantize_quad's arithmetic over one thread's 32 values).
__device__ __forceinline__ void quantize32_regs(const float (&v)[32], int (&xw)[8], float &dh, int &sum) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float dd = __fdiv_rn(amax, 127.0f);
    sum = 0;
    auto pack = [&](int i, int q0, int q1, int q2, int q3) {
        xw[i] = static_cast<int>((uint32_t(q0) & 0xFFu) | ((uint32_t(q1) & 0xFFu) << 8) | ((uint32_t(q2) & 0xFFu) << 16) |
                                 (uint32_t(q3) << 24));
        sum += q0 + q1 + q2 + q3;
    };
    if (dd >= 0x1p-100f && dd <= 0x1p100f) {
        float r = rcp_approx(dd);
        r = __fmaf_rn(r, __fmaf_rn(-dd, r, 1.0f), r);
        auto quant = [&](float xv) {
            const float q0 = __fmul_rn(xv, r);
            return static_cast<int>(roundf(__fmaf_rn(r, __fmaf_rn(-q0, dd, xv), q0)));
        };
#pragma unroll
        for (int i = 0; i < 8; ++i) pack(i, quant(v[4 * i]), quant(v[4 * i + 1]), quant(v[4 * i + 2]), quant(v[4 * i + 3]));
    } else {
        auto quant = [&](float xv) { return amax != 0.0f ? static_cast<int>(roundf(__fdiv_rn(xv, dd))) : 0; };
#pragma unroll
        for (int i = 0; i < 8; ++i) pack(i, quant(v[4 * i]), quant(v[4 * i + 1]), quant(v[4 * i + 2]), quant(v[4 * i + 3]));
    }
    dh = __half2float(__float2half_rn(dd));
}
// The same from memory.
__device__ __forceinline__ void quantize32(const float *xb, int (&xw)[8], float &dh, int &sum) {
    float v[32];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float4 f = __ldg(reinterpret_cast<const float4 *>(xb) + i);
        v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
    quantize32_regs(v, xw, dh, sum);
}
// The 32 floats requested in program order (volatile: issued before the weight loads that follow).
__device__ __forceinline__ void load_x32(const float *xb, float (&v)[32]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
        asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v[4 * i]), "=f"(v[4 * i + 1]), "=f"(v[4 * i + 2]), "=f"(v[4 * i + 3])
                     : "l"(xb + 4 * i));
}

// One row's 32-weight block (q: its 16 nibble bytes) against this thread's quantized activations: the
// integer dot product. Q4_0: the low nibbles as bytes with the -8 offset in the accumulator (c0 = -8 sum(q)),
// the high nibbles kept in place (16 n, unsigned dp4a) and shifted out of the sum. IQ4_NL: xw holds the
// activations in the order of a weight halfword's nibbles, xn the same negated; indices 8..15 give +value
// through the flipped selector, 0..7 give -value, the prmt zeroing the other half. MODE 1: a byte of the
// words instead (the structure's own cost; wrong results).
template <bool NL, int MODE>
__device__ __forceinline__ int dot_q4_block(const uint32_t (&q)[4], const int (&xw)[8], const int (&xn)[8], int c0) {
    if constexpr (MODE == 1) {
        return static_cast<int>((q[0] ^ q[1] ^ q[2] ^ q[3]) & 0xFFu);
    } else if constexpr (NL) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t qx = q[i] ^ 0x88888888u;
            s = __dp4a(static_cast<int>(prmt(kIq4Hi0, kIq4Hi1, qx)), xw[2 * i], s);
            s = __dp4a(static_cast<int>(prmt(kIq4Hi0, kIq4Hi1, qx >> 16)), xw[2 * i + 1], s);
            s = __dp4a(static_cast<int>(prmt(kIq4NegLo0, kIq4NegLo1, q[i])), xn[2 * i], s);
            s = __dp4a(static_cast<int>(prmt(kIq4NegLo0, kIq4NegLo1, q[i] >> 16)), xn[2 * i + 1], s);
        }
        return s;
    } else {
        int lo = c0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            lo = __dp4a(static_cast<int>(q[i] & 0x0F0F0F0Fu), xw[i], lo);
            hi = dp4a_us(q[i] & 0xF0F0F0F0u, xw[4 + i], hi);
        }
        return lo + (hi >> 4);
    }
}

// Reduce-scatters R rows' partial sums across the warp: lane l ends with the warp's sum of row
// (l >> (5 - log2 R)) & (R - 1), complete in the lanes with (l & (32 / R - 1)) == 0.
template <int R>
__device__ __forceinline__ float reduce_scatter_rows(float (&acc)[R], uint32_t lane) {
    constexpr int LR = R == 8 ? 3 : R == 4 ? 2 : R == 2 ? 1 : 0;
    static_assert(R == (1 << LR), "R: 1, 2, 4 or 8");
    uint32_t off = 16;
#pragma unroll
    for (int step = 0, h = R / 2; step < LR; ++step, h /= 2, off /= 2) {
        const bool up = lane & off;
#pragma unroll
        for (int i = 0; i < h; ++i) {
            const float send = up ? acc[i] : acc[i + h];
            const float keep = up ? acc[i + h] : acc[i];
            acc[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
    }
#pragma unroll
    for (uint32_t o = 16u >> LR; o >= 1; o /= 2) acc[0] += __shfl_xor_sync(0xffffffffu, acc[0], o);
    return acc[0];
}

// After the block's barrier: y of every row of the block's teams, its warps' partial sums (part0: [tpb][cap][wpt])
// added in a fixed order.
__device__ __forceinline__ void store_row_sums(const float *part0, const PlanarArgs &a, uint32_t tpb, uint32_t wpt,
                                               uint32_t teams) {
    for (uint32_t idx = threadIdx.x; idx < tpb * a.cap; idx += blockDim.x) {
        const uint32_t t2 = idx / a.cap, i = idx % a.cap, row = blockIdx.x * tpb + t2 + i * teams;
        if (row >= a.rows) continue;
        const float *p = part0 + size_t(idx) * wpt;
        float s = 0.0f;
        for (uint32_t j = 0; j < wpt; ++j) s += p[j];
        a.y[row] = s;
    }
}

} // namespace kpr::cuda

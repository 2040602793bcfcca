// kpr_cuda_planar.cuh -- the lanes kernel: a GEMV of one or two columns in which each thread owns one
// 32-weight block position of every row, for compute capability 9.0. Q4_0 and IQ4_NL on a planar copy of
// the weights (generic_cuda's `planar_weights` option), Q4_K on its own GGUF rows; generic_cuda's
// `block_lanes` option says where it runs. Measured in docs/cuda-tuning-log.md, "The planar probe", "Planar
// weights in generic_cuda" and "Q4_K with a thread per block position".
//
// Planar layout (Q4_0, IQ4_NL): GGUF's bytes per row (18 per 32 weights) with each row split into its
// 16-byte nibble blocks, then its f16 scales: row r = [nb x 16 bytes][nb x 2 bytes]. Every weight word is
// a 16-byte aligned load, and a thread can own one 32-weight block position of every row. Q4_K's 144-byte
// super-blocks are 16-byte aligned already: thread 8 s + 2 g + h owns bytes 16 h .. 16 h + 15 of the
// super-block's 32-byte group g (the low nibbles: 16 weights of sub-block 2 g, the high ones: 16 of
// sub-block 2 g + 1) and reads the block's 16-byte head (d, dmin, the 12 scale bytes) beside them.
//
// The kernel: a team of ceil(nb / 32) warps covers a row (nb: 32-weight blocks per row); each thread's 32
// activations are quantized once per call (the integers of quantize_act_q8_1) and kept in registers, so no
// activation is read per row. Rows go to teams round-robin (the grid streams one window of the matrix),
// two batches of four rows in flight per thread, the first two requested before the dependency wait. Four
// rows' sums (of each column) are reduce-scattered across the warp, the warps' sums added in a fixed order
// at the end.
// One kernel per call (each thread quantizes its own activations), or after generic_cuda's quantizer
// (reading its q8_1 planes: two kernels, faster on small matrices).
#pragma once

#include "kpr_cuda_act.cuh"
#include "kpr_cuda_blocks.cuh"
#include "kpr_cuda_util.cuh"

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace kpr::cuda {

// GGUF Q4_0 / IQ4_NL rows (18-byte blocks) -> planar rows of the same bytes. One thread per block;
// n_rows = rows of all experts.
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
    const uint8_t *w;  // planar rows (Q4_0, IQ4_NL) or GGUF rows (Q4_K)
    uint64_t rb;       // row bytes (a multiple of 16)
    uint32_t rows, nb; // rows, 32-weight blocks per row (Q4_K too)
    uint32_t T;        // threads per team (a multiple of 32, >= nb)
    uint32_t cap;      // rows per team, rounded up to a batch pair (the partial sums' rows)
    const float *x;    // float activations [ncols][nb * 32] (16-byte aligned; unused after the quantizer)
    float *y;          // [ncols][rows]
};

// A call's launch geometry: one 512-thread block per multiprocessor, tpb teams of T threads per block.
struct PlanarPlan {
    uint32_t T = 0, tpb = 0, cap = 0;
    uint32_t smem = 0; // the partial sums: [tpb][cap][ncols][T / 32] floats
};
constexpr uint32_t kPlanarRowsPerBatch = 4;
constexpr uint32_t kPlanarThreads = 512;

// False where the kernel cannot take the shape: rows wider than 16384 weights (a team is at most one
// block), or partial sums beyond the shared memory a block may have. ncols: 1 or 2.
inline bool planar_plan(uint32_t rows, uint32_t nb, uint32_t sms, uint32_t smem_optin, PlanarPlan *out,
                        uint32_t ncols = 1) {
    if (nb == 0 || sms == 0) return false;
    const uint32_t T = (nb + 31) / 32 * 32;
    if (T > kPlanarThreads) return false;
    const uint32_t tpb = kPlanarThreads / T, teams = sms * tpb, pair = 2 * kPlanarRowsPerBatch;
    const uint64_t cap = ((uint64_t(rows) + teams - 1) / teams + pair - 1) / pair * pair;
    const uint64_t smem = uint64_t(tpb) * cap * (T / 32) * ncols * sizeof(float);
    if (smem > smem_optin || smem > (1u << 30)) return false;
    *out = PlanarPlan{T, tpb, static_cast<uint32_t>(cap), static_cast<uint32_t>(smem)};
    return true;
}

__device__ __forceinline__ uint4 ldg_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ldg_u16(const void *p) {
    unsigned short v;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

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

// N floats (a multiple of 4) of one q8_1 block whose absolute maximum is amax, quantized: the quants packed
// in xw (values 4i..4i+3 in word i), the block's scale rounded to f16 (dh) and these values' quant sum
// (sum): the same integers and scale as quantize_act_q8_1 (q8_1_quantize_quad's arithmetic).
template <int N>
__device__ __forceinline__ void quantize_regs(const float (&v)[N], float amax, int (&xw)[N / 4], float &dh, int &sum) {
    const float dd = __fdiv_rn(amax, 127.0f);
    sum = 0;
    auto pack = [&](int i, int q0, int q1, int q2, int q3) {
        xw[i] = static_cast<int>((uint32_t(q0) & 0xFFu) | ((uint32_t(q1) & 0xFFu) << 8) | ((uint32_t(q2) & 0xFFu) << 16) |
                                 (uint32_t(q3) << 24));
        sum += q0 + q1 + q2 + q3;
    };
    if (dd >= 0x1p-100f && dd <= 0x1p100f) {
        const float r = rcp_refined(dd);
        auto quant = [&](float xv) { return quant_by_rcp(xv, dd, r); };
#pragma unroll
        for (int i = 0; i < N / 4; ++i) pack(i, quant(v[4 * i]), quant(v[4 * i + 1]), quant(v[4 * i + 2]), quant(v[4 * i + 3]));
    } else {
        auto quant = [&](float xv) { return amax != 0.0f ? static_cast<int>(roundf(__fdiv_rn(xv, dd))) : 0; };
#pragma unroll
        for (int i = 0; i < N / 4; ++i) pack(i, quant(v[4 * i]), quant(v[4 * i + 1]), quant(v[4 * i + 2]), quant(v[4 * i + 3]));
    }
    dh = __half2float(__float2half_rn(dd));
}
template <int N>
__device__ __forceinline__ float abs_max(const float (&v)[N]) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) amax = fmaxf(amax, fabsf(v[i]));
    return amax;
}
// A whole 32-value block held by one thread.
__device__ __forceinline__ void quantize32_regs(const float (&v)[32], int (&xw)[8], float &dh, int &sum) {
    quantize_regs<32>(v, abs_max(v), xw, dh, sum);
}
template <int N>
__device__ __forceinline__ void load_floats(const float *p, float (&v)[N]) { // 16-byte aligned
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
        const float4 f = __ldg(reinterpret_cast<const float4 *>(p) + i);
        v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
}
// The same from memory (16-byte aligned).
__device__ __forceinline__ void quantize32(const float *xb, int (&xw)[8], float &dh, int &sum) {
    float v[32];
    load_floats(xb, v);
    quantize32_regs(v, xw, dh, sum);
}

// One row's 32-weight block (q: its 16 nibble bytes) against this thread's quantized activations: the
// integer dot product. Q4_0: the low nibbles as bytes with the -8 offset in the accumulator (c0 = -8 sum(q)),
// the high nibbles kept in place (16 n, unsigned dp4a) and shifted out of the sum. IQ4_NL: xw holds the
// activations in the order of a weight halfword's nibbles, xn the same negated; indices 8..15 give +value
// through the flipped selector, 0..7 give -value, the prmt zeroing the other half.
template <bool NL>
__device__ __forceinline__ int dot_q4_block(const uint32_t (&q)[4], const int (&xw)[8], const int (&xn)[8], int c0) {
    if constexpr (NL) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t qx = q[i] ^ 0x88888888u;
            s = dp4a(static_cast<int>(prmt(kIq4Hi0, kIq4Hi1, qx)), xw[2 * i], s);
            s = dp4a(static_cast<int>(prmt(kIq4Hi0, kIq4Hi1, qx >> 16)), xw[2 * i + 1], s);
            s = dp4a(static_cast<int>(prmt(kIq4NegLo0, kIq4NegLo1, q[i])), xn[2 * i], s);
            s = dp4a(static_cast<int>(prmt(kIq4NegLo0, kIq4NegLo1, q[i] >> 16)), xn[2 * i + 1], s);
        }
        return s;
    } else {
        int lo = c0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            lo = dp4a(static_cast<int>(q[i] & 0x0F0F0F0Fu), xw[i], lo);
            hi = dp4a_us(q[i] & 0xF0F0F0F0u, xw[4 + i], hi);
        }
        return lo + (hi >> 4);
    }
}

// IQ4_NL: the activations reordered to a weight halfword's nibble order (xw), and negated (xn).
__device__ __forceinline__ void planar_nl_order(int (&xw)[8], int (&xn)[8]) {
    int xp[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        xp[2 * i] = static_cast<int>(prmt(xw[i], xw[4 + i], 0x5140u));
        xp[2 * i + 1] = static_cast<int>(prmt(xw[i], xw[4 + i], 0x7362u));
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        xw[i] = xp[i];
        xn[i] = static_cast<int>(__vneg4(static_cast<uint32_t>(xp[i])));
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

// After the block's barrier: y of every row and column of the block's teams, its warps' partial sums
// (part0: [tpb][cap][NC][wpt]) added in a fixed order.
template <int NC>
__device__ __forceinline__ void store_row_sums(const float *part0, const PlanarArgs &a, uint32_t tpb, uint32_t wpt,
                                               uint32_t teams) {
    for (uint32_t idx = threadIdx.x; idx < tpb * a.cap * NC; idx += blockDim.x) {
        const uint32_t j = idx % NC, ri = idx / NC, t2 = ri / a.cap, i = ri % a.cap;
        const uint32_t row = blockIdx.x * tpb + t2 + i * teams;
        if (row >= a.rows) continue;
        const float *p = part0 + size_t(idx) * wpt;
        float s = 0.0f;
        for (uint32_t w = 0; w < wpt; ++w) s += p[w];
        a.y[size_t(j) * a.rows + row] = s;
    }
}

// The formats the kernel reads.
enum PlanarFormat : int {
    kPlanarQ4_0 = 0,   // planar copy of Q4_0 rows
    kPlanarIQ4_NL = 1, // planar copy of IQ4_NL rows
    kLanesQ4_K = 2,    // Q4_K's own GGUF rows
};

// Q4_K: one row's contribution of this thread's 16 + 16 weights. q: the 16 nibble bytes; h: the
// super-block's head (d | dmin << 16, then the 12 scale bytes); xw: the activations of the low nibbles in
// words 0..3 and of the high ones in 4..7; dh / sh: their blocks' scales and dh times this thread's quant
// sum; hi_group: the thread's group is 2 or 3 (sub-blocks 4..7); shift: 16 * (group & 1).
__device__ __forceinline__ float q4k_lane_row(const uint32_t (&q)[4], const uint4 &h, const int (&xw)[8],
                                              const float (&dh)[2], const float (&sh)[2], bool hi_group,
                                              uint32_t shift) {
    int lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        lo = dp4a(static_cast<int>(q[i] & 0x0F0F0F0Fu), xw[i], lo);
        hi = dp4a_us(q[i] & 0xF0F0F0F0u, xw[4 + i], hi);
    }
    hi >>= 4;
    // k4_scale_min's bytes for sub-blocks 2 g and 2 g + 1, four at a time
    const uint32_t scw = hi_group ? (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u) : h.y & 0x3F3F3F3Fu;
    const uint32_t mw = hi_group ? ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u) : h.z & 0x3F3F3F3Fu;
    const uint32_t sc = scw >> shift, m = mw >> shift;
    const float d = f16_to_float(static_cast<uint16_t>(h.x)), dmin = f16_to_float(static_cast<uint16_t>(h.x >> 16));
    const float t = __fmaf_rn(static_cast<float>(static_cast<int>((sc >> 8) & 0xFFu) * hi), dh[1],
                              __fmul_rn(static_cast<float>(static_cast<int>(sc & 0xFFu) * lo), dh[0]));
    const float u = __fmaf_rn(static_cast<float>((m >> 8) & 0xFFu), sh[1], __fmul_rn(static_cast<float>(m & 0xFFu), sh[0]));
    return __fmaf_rn(d, t, -__fmul_rn(dmin, u));
}

// The kernel (compute capability 9.0: the dependency wait; elsewhere an empty body, never launched). F: a
// PlanarFormat. XQ: the activations from the q8_1 planes of generic_cuda's quantizer, else each thread
// quantizes its own from a.x. NC: columns (1 or 2; x [NC][cols], y [NC][rows]), each row's weights decoded
// once for them.
template <int F, bool XQ, int NC>
__global__ void __launch_bounds__(kPlanarThreads, 1) planar_gemv(const PlanarArgs a, const ActQ8 xq) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 900
    constexpr bool NL = F == kPlanarIQ4_NL, K4 = F == kLanesQ4_K;
    constexpr uint32_t R = kPlanarRowsPerBatch;
    using Aux = std::conditional_t<K4, uint4, uint32_t>; // per row beside the 16 weight bytes: the scale / the head
    extern __shared__ __align__(16) float part0[];
    const uint32_t T = a.T, tid = threadIdx.x, lane = tid & 31u;
    const uint32_t tpb = blockDim.x / T, tm = tid / T, tt = tid % T, wpt = T / 32, wt = tt / 32;
    const uint32_t teams = gridDim.x * tpb, g = blockIdx.x * tpb + tm;
    const uint32_t n_rows = g < a.rows ? (a.rows - g + teams - 1) / teams : 0;
    const uint32_t nbat = (n_rows + R - 1) / R;
    float *part = part0 + size_t(tm) * a.cap * NC * wpt;
    const bool has = tt < a.nb;
    const uint32_t cols = a.nb * 32;
    const uint64_t rstride = uint64_t(teams) * a.rb;
    // this thread's 16 weight bytes in row g, and (from them) its scale or its super-block's head
    const uint64_t woff = K4 ? 144 * uint64_t(tt >> 3) + 16 + 16 * (tt & 7u) : 16 * uint64_t(tt);
    const int64_t adelta = K4 ? -16 - 16 * int64_t(tt & 7u) : int64_t(16) * a.nb - 14 * int64_t(tt);
    const uint8_t *src = a.w + uint64_t(g) * a.rb + woff;
    uint32_t next_row = g;
    uint4 qa[R], qb[R];
    Aux da[R], db[R];
    auto load = [&](uint4 (&q)[R], Aux (&d)[R]) {
#pragma unroll
        for (uint32_t r = 0; r < R; ++r) {
            if (has && next_row < a.rows) {
                q[r] = ldg_stream(src);
                if constexpr (K4) d[r] = ldg_stream(src + adelta);
                else d[r] = ldg_u16(src + adelta);
            } else {
                q[r] = make_uint4(0, 0, 0, 0);
                if constexpr (K4) d[r] = make_uint4(0, 0, 0, 0);
                else d[r] = 0;
            }
            src += rstride;
            next_row += teams;
        }
    };
    load(qa, da); // the weights do not depend on the kernel before: requested before the wait
    load(qb, db);
    pdl_launch_dependents();
    pdl_wait();
    int xw[NC][8], xn[NC][8];
    float dx[NC], dh2[NC][2], sh2[NC][2];
    int c0[NC];
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        const float *xj = a.x + size_t(j) * cols;
        const int8_t *qj = xq.q + size_t(j) * cols;
        const float *dj = xq.d + size_t(j) * (cols / 32);
        dx[j] = 0.0f, c0[j] = 0;
        dh2[j][0] = dh2[j][1] = sh2[j][0] = sh2[j][1] = 0.0f;
        if constexpr (K4) {
            // the thread's 16 + 16 activations: the low nibbles' from sub-block 2 g, the high ones' 32
            // further; each q8_1 block is shared with the partner thread (tt ^ 1)
            const uint32_t xo = 256 * (tt >> 3) + 64 * ((tt >> 1) & 3u) + 16 * (tt & 1u);
            int sum[2] = {0, 0};
            if constexpr (XQ) {
                if (has) {
                    const int4 q0 = __ldg(reinterpret_cast<const int4 *>(qj + xo));
                    const int4 q1 = __ldg(reinterpret_cast<const int4 *>(qj + xo + 32));
                    xw[j][0] = q0.x, xw[j][1] = q0.y, xw[j][2] = q0.z, xw[j][3] = q0.w;
                    xw[j][4] = q1.x, xw[j][5] = q1.y, xw[j][6] = q1.z, xw[j][7] = q1.w;
                    dh2[j][0] = __ldg(dj + xo / 32);
                    dh2[j][1] = __ldg(dj + xo / 32 + 1);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        sum[0] = dp4a(xw[j][i], 0x01010101, sum[0]);
                        sum[1] = dp4a(xw[j][4 + i], 0x01010101, sum[1]);
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < 8; ++i) xw[j][i] = 0;
                }
            } else {
                float v0[16], v1[16];
                if (has) {
                    load_floats(xj + xo, v0);
                    load_floats(xj + xo + 32, v1);
                } else {
#pragma unroll
                    for (int i = 0; i < 16; ++i) v0[i] = v1[i] = 0.0f;
                }
                float m0 = abs_max(v0), m1 = abs_max(v1);
                m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 1));
                m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 1));
                int w0[4], w1[4];
                quantize_regs<16>(v0, m0, w0, dh2[j][0], sum[0]);
                quantize_regs<16>(v1, m1, w1, dh2[j][1], sum[1]);
#pragma unroll
                for (int i = 0; i < 4; ++i) xw[j][i] = w0[i], xw[j][4 + i] = w1[i];
            }
            sh2[j][0] = __fmul_rn(dh2[j][0], static_cast<float>(sum[0]));
            sh2[j][1] = __fmul_rn(dh2[j][1], static_cast<float>(sum[1]));
        } else {
            int sum = 0;
            if (!has) {
#pragma unroll
                for (int i = 0; i < 8; ++i) xw[j][i] = 0;
            } else if constexpr (XQ) { // the quant sum from the quants themselves
                const int4 q0 = __ldg(reinterpret_cast<const int4 *>(qj + 32 * uint64_t(tt)));
                const int4 q1 = __ldg(reinterpret_cast<const int4 *>(qj + 32 * uint64_t(tt)) + 1);
                xw[j][0] = q0.x, xw[j][1] = q0.y, xw[j][2] = q0.z, xw[j][3] = q0.w;
                xw[j][4] = q1.x, xw[j][5] = q1.y, xw[j][6] = q1.z, xw[j][7] = q1.w;
                dx[j] = __ldg(dj + tt);
#pragma unroll
                for (int i = 0; i < 8; ++i) sum = dp4a(xw[j][i], 0x01010101, sum);
            } else {
                quantize32(xj + 32 * uint64_t(tt), xw[j], dx[j], sum);
            }
            c0[j] = -8 * sum;
            if constexpr (NL) planar_nl_order(xw[j], xn[j]);
        }
    }
    const bool hi_group = (tt >> 1) & 2u;
    const uint32_t shift = 16 * ((tt >> 1) & 1u);
    // each batch's R x NC sums reduce-scattered across the warp: value r * NC + j ends in the lanes whose
    // index has its low (5 - LV) bits clear, at lane >> (5 - LV)
    constexpr uint32_t V = R * NC, LV = V == 8 ? 3 : V == 4 ? 2 : V == 2 ? 1 : 0;
    auto compute = [&](uint32_t k, const uint4 (&q4)[R], const Aux (&dd)[R]) {
        float acc[V];
#pragma unroll
        for (uint32_t r = 0; r < R; ++r) {
            const uint32_t q[4] = {q4[r].x, q4[r].y, q4[r].z, q4[r].w};
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                if constexpr (K4) {
                    acc[r * NC + j] = q4k_lane_row(q, dd[r], xw[j], dh2[j], sh2[j], hi_group, shift);
                } else {
                    const float d = f16_to_float(static_cast<uint16_t>(dd[r]));
                    const int s = dot_q4_block<NL>(q, xw[j], xn[j], c0[j]);
                    acc[r * NC + j] = __fmul_rn(static_cast<float>(s), __fmul_rn(d, dx[j]));
                }
            }
        }
        const float v = reduce_scatter_rows<V>(acc, lane);
        if ((lane & ((32u >> LV) - 1)) == 0) part[(k * V + (lane >> (5 - LV))) * wpt + wt] = v;
    };
    for (uint32_t k = 0; k < nbat; k += 2) {
        compute(k, qa, da);
        load(qa, da);
        if (k + 1 >= nbat) break;
        compute(k + 1, qb, db);
        load(qb, db);
    }
    __syncthreads();
    store_row_sums<NC>(part0, a, tpb, wpt, teams);
#endif
}

// Raises kernel k's dynamic shared memory limit to smem where a call needs more than it was set to (raised: k's own
// record of that limit, 48 KiB to start with).
template <class Kernel>
inline cudaError_t raise_dyn_smem(Kernel k, std::atomic<uint32_t> &raised, uint32_t smem) {
    if (smem <= raised.load()) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e == cudaSuccess) raised.store(smem);
    return e;
}

template <int F, bool XQ, int NC>
inline cudaError_t launch_planar_kernel(const PlanarArgs &a, uint32_t blocks, uint32_t threads, uint32_t smem, bool pdl,
                                        cudaStream_t s, const ActQ8 &xq) {
    auto k = planar_gemv<F, XQ, NC>;
    static std::atomic<uint32_t> raised{48 * 1024}; // the dynamic shared memory limit set on this instance
    const cudaError_t e = raise_dyn_smem(k, raised, smem);
    if (e != cudaSuccess) return e;
    return launch_pdl(k, dim3(blocks), dim3(threads), smem, pdl, s, a, xq);
}

// One call of NC columns on `sms` blocks (plan made for NC): the kernel alone (each thread quantizing its
// activations; a.x 16-byte aligned), or (two_kernels) generic_cuda's quantizer into xq, then the kernel on
// its planes. pdl: the launches may overlap the kernel before them (9.0).
template <int F, int NC>
inline cudaError_t launch_planar(PlanarArgs a, const PlanarPlan &plan, uint32_t sms, bool two_kernels, const ActQ8 &xq,
                                 bool pdl, cudaStream_t s) {
    a.T = plan.T;
    a.cap = plan.cap;
    const uint32_t threads = plan.tpb * plan.T;
    if (!two_kernels) return launch_planar_kernel<F, false, NC>(a, sms, threads, plan.smem, pdl, s, xq);
    const cudaError_t e = launch_quantize_act_q8_1(a.x, size_t(NC) * a.nb * 32, xq, pdl, s);
    if (e != cudaSuccess) return e;
    return launch_planar_kernel<F, true, NC>(a, sms, threads, plan.smem, pdl, s, xq);
}

} // namespace kpr::cuda

// planar_probe_kernels.cuh -- kpr_planar_probe's ring kernels (not used by any provider): a one-column GEMV of
// the 4-bit 32-weight types (Q4_0, IQ4_NL) on compute capability 9.0, measured in the fourteenth session
// (docs/benchmarks.md, "The planar probe").
//
// The planar layout keeps GGUF's bytes per row (18 per 32 weights) but splits each row into its 16-byte
// nibble blocks, then its f16 scales: row r = [nb x 16 bytes][nb x 2 bytes]. Every weight word is then a
// 16-byte aligned load, and a thread can own one block position of every row.
//
// The kernel: a team of T threads covers a row (thread t owns blocks t, t + T, ... < nb, BPT of them), so
// each thread quantizes its own BPT x 32 activations once (q8_1, the integers of quantize_act_q8_1) and
// keeps them in registers for the whole call; no activation is read per row. Rows go to teams round-robin
// (team g: rows g, g + teams, ...), so the whole grid streams one window of the matrix at a time. Each
// thread copies its words of a row into a shared-memory slot with cp.async; a ring of NB batches of R
// rows per team, all NB requested before the dependency wait. A batch's R partial sums are
// reduce-scattered across the warp; the warps' sums meet in shared memory and are added in a fixed order
// at the end, so results are deterministic. One kernel per call.
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
__device__ __forceinline__ void quantize32_regs(const float (&v)[32], int (&xw)[8], float &dh, int &sum);
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

// A row slot holds the image of the row (the same byte offsets as in global memory) and 16 bytes of
// padding (the native layout's 2-byte-aligned word reads run up to 2 bytes past a row's last block).
__host__ __device__ constexpr uint32_t planar_slot_bytes(uint64_t rb) { return static_cast<uint32_t>(rb) + 16; }

// Shared memory of a block: the partial sums [tpb][cap][T / 32] floats, then each team's ring of NB * R
// row slots.
template <int R, int NB>
__host__ __device__ constexpr size_t planar_smem_bytes(uint32_t T, uint32_t tpb, uint32_t cap, uint64_t rb) {
    return size_t(tpb) * cap * (T / 32) * 4 + size_t(tpb) * NB * R * planar_slot_bytes(rb);
}

// NATIVE: the weights in GGUF's own layout (18-byte blocks): a warp's 32 blocks are 576 contiguous,
// 16-byte aligned bytes (36 words), which its lanes copy (lanes 0..3 two words), so a lane reads its block
// after the warp's __syncwarp; otherwise the planar layout (each thread copies its own 16-byte word, lanes
// 0..3 the warp's 64 bytes of scales).
// MODE 0: the GEMV. MODE 1: the copies, waits and reduction with the dot products replaced by a byte of
// each word (a probe of the structure's own cost; wrong results).
template <bool NL, int BPT, int R, int NB, int MODE = 0, bool NATIVE = false>
__global__ void __launch_bounds__(BPT == 1 ? 512 : 256, BPT == 1 ? 2 : 3) planar_gemv_q4(const PlanarArgs a) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int LR = R == 8 ? 3 : R == 4 ? 2 : R == 2 ? 1 : 0;
    const uint32_t T = a.T, tid = threadIdx.x, lane = tid & 31u;
    const uint32_t tpb = blockDim.x / T, tm = tid / T, tt = tid % T, wpt = T / 32, wt = tt / 32;
    const uint32_t teams = gridDim.x * tpb, g = blockIdx.x * tpb + tm;
    const uint32_t n_rows = g < a.rows ? (a.rows - g + teams - 1) / teams : 0;
    const uint32_t nbat = (n_rows + R - 1) / R;
    const uint32_t slot_bytes = planar_slot_bytes(a.rb);
    float *part = reinterpret_cast<float *>(smem) + size_t(tm) * a.cap * wpt;
    uint8_t *ring = smem + size_t(tpb) * a.cap * wpt * 4 + size_t(tm) * NB * R * slot_bytes;
    const uint64_t rstride = uint64_t(teams) * a.rb;
    bool has[BPT];
#pragma unroll
    for (int j = 0; j < BPT; ++j) has[j] = j * T + tt < a.nb;
    // this thread's copies of a row: BPT + 1 runs of 16 bytes at these offsets (row = slot image)
    uint32_t coff[BPT + 1];
    bool cval[BPT + 1];
    if constexpr (NATIVE) {
        // word `lane` of each of the thread's warp segments; lanes 4j..4j+3 also word 32 + lane % 4 of segment j
#pragma unroll
        for (int j = 0; j < BPT; ++j) {
            const uint32_t b0 = j * T + 32 * wt, seg = b0 < a.nb ? 18 * min(32u, a.nb - b0) : 0;
            coff[j] = 18 * b0 + 16 * lane;
            cval[j] = 16 * lane < seg;
        }
        const uint32_t pj = lane / 4, b0 = pj * T + 32 * wt;
        const uint32_t seg = pj < uint32_t(BPT) && b0 < a.nb ? 18 * min(32u, a.nb - b0) : 0;
        coff[BPT] = 18 * b0 + 16 * (32 + lane % 4);
        cval[BPT] = 16 * (32 + lane % 4) < seg;
    } else {
        // the thread's own words; lanes 4j..4j+3 the 64 bytes of scales of the warp's blocks j*T + 32 wt ..
#pragma unroll
        for (int j = 0; j < BPT; ++j) {
            coff[j] = 16 * (j * T + tt);
            cval[j] = has[j];
        }
        const uint32_t pj = lane / 4, poff = 2 * (pj * T + 32 * wt) + 16 * (lane % 4);
        coff[BPT] = 16 * a.nb + poff;
        cval[BPT] = pj < uint32_t(BPT) && poff < 2 * a.nb;
    }
    // the copies' addresses: shared (32-bit) of slot 0 of the ring, and the global row of the next copy
    const uint32_t ring_s = smem_addr(ring), ring_end = ring_s + NB * R * slot_bytes;
    uint32_t issue_s = ring_s;
    const uint8_t *src = a.w + uint64_t(g) * a.rb;
    uint32_t next_row = g;
    auto cp16 = [](uint32_t dst, const uint8_t *from) {
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(dst), "l"(from) : "memory");
    };
    auto issue = [&]() { // the next batch of R rows into the next ring position
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (next_row < a.rows) { // (rows past the end: nothing; their sums are not stored)
                const uint32_t d = issue_s + r * slot_bytes;
#pragma unroll
                for (int c = 0; c <= BPT; ++c)
                    if (cval[c]) cp16(d + coff[c], src + coff[c]);
            }
            src += rstride;
            next_row += teams;
        }
        issue_s += R * slot_bytes;
        if (issue_s == ring_end) issue_s = ring_s;
        cp_async_commit();
    };
#pragma unroll
    for (int k = 0; k < NB; ++k) issue();
    pdl_launch_dependents();
    pdl_wait(); // x is written by the kernel before
    int xw[BPT][8], xn[BPT][8];
    float dx[BPT];
    int c0[BPT];
#pragma unroll
    for (int j = 0; j < BPT; ++j) {
        int sum = 0;
        dx[j] = 0.0f;
        if (j * T + tt < a.nb) {
            quantize32(a.x + 32 * uint64_t(j * T + tt), xw[j], dx[j], sum);
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) xw[j][i] = 0;
        }
        c0[j] = -8 * sum; // Q4_0: sum((n - 8) q) = dot(n, q) - 8 sum(q)
        if constexpr (NL) { // the quants in the order of the nibbles of a weight halfword, and negated
            int xp[8];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                xp[2 * i] = static_cast<int>(prmt(xw[j][i], xw[j][4 + i], 0x5140u));
                xp[2 * i + 1] = static_cast<int>(prmt(xw[j][i], xw[j][4 + i], 0x7362u));
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                xw[j][i] = xp[i];
                xn[j][i] = static_cast<int>(__vneg4(static_cast<uint32_t>(xp[i])));
            }
        }
    }
    uint32_t read_s = ring_s;
    for (uint32_t k = 0; k < nbat; ++k) {
        cp_async_wait<NB - 1>();
        __syncwarp();
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            acc[r] = 0.0f;
            const uint32_t slot = read_s + r * slot_bytes;
#pragma unroll
            for (int j = 0; j < BPT; ++j) {
                if (!has[j]) continue;
                uint32_t q[4];
                float d;
                if constexpr (NATIVE) { // d at 18 b, the nibbles at 18 b + 2 (2-byte aligned: word reads and funnel shifts)
                    const uint32_t p = slot + 18 * (j * T + tt);
                    d = f16_to_float(static_cast<uint16_t>(lds_u16(p)));
                    const uint32_t a4 = (p + 2) & ~3u, sh = ((p + 2) & 3u) * 8u;
                    uint32_t w5[5];
#pragma unroll
                    for (int i = 0; i < 5; ++i) w5[i] = lds_u32(a4 + 4 * i);
#pragma unroll
                    for (int i = 0; i < 4; ++i) q[i] = __funnelshift_r(w5[i], w5[i + 1], sh);
                } else {
                    lds_words_v4<4>(slot + 16 * (j * T + tt), q);
                    d = f16_to_float(static_cast<uint16_t>(lds_u16(slot + 16 * a.nb + 2 * (j * T + tt))));
                }
                const int s = dot_q4_block<NL, MODE>(q, xw[j], xn[j], c0[j]);
                acc[r] = __fmaf_rn(static_cast<float>(s), __fmul_rn(d, dx[j]), acc[r]);
            }
        }
        const float v = reduce_scatter_rows<R>(acc, lane);
        if ((lane & ((16u >> LR) * 2 - 1)) == 0) part[(k * R + ((lane >> (5 - LR)) & (R - 1))) * wpt + wt] = v;
        __syncwarp(); // every lane has read the warp's scales before lanes 0..3 refill the slot
        read_s += R * slot_bytes;
        if (read_s == ring_end) read_s = ring_s;
        issue();
    }
    cp_async_wait<0>();
    __syncthreads();
    store_row_sums(reinterpret_cast<const float *>(smem), a, tpb, wpt, teams);
#endif
}

} // namespace kpr::cuda

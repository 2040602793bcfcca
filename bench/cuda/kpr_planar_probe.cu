// kpr_planar_probe -- one-column GEMV kernels for the 4-bit 32-weight types (Q4_0, IQ4_NL) on a planar copy
// of the weights (per row: the 16-byte nibble blocks, then the f16 scales; the same bytes as GGUF), each
// thread owning one 32-weight block position of every row with its quantized activations in registers,
// measured against generic_cuda's call (launch_gemv_nc: the q8_1 quantizer and the row kernel, or the tile
// kernel where its rules take it) in the same process, with the results compared. No provider uses these
// kernels (fourteenth and fifteenth sessions; docs/cuda-tuning-log.md, "The planar probe" and "Where a
// one-kernel call's time goes"). The variants (planar_ldg's template knobs):
//   ldg            the weights loaded into registers (two batches of 4 rows in flight, the first two before
//                  the dependency wait), the activations quantized by every thread itself: one kernel per call
//   q + ldg        generic_cuda's q8_1 quantizer launched first, the kernel reading its planes (two kernels)
//   ldg sKS        the team's first KS rows bulk-copied into shared memory before the wait (one mbarrier
//                  per batch), the rest as "ldg"
//   late pfN       no weights requested before the wait; N batches prefetched into L2 before it instead
//   x first        no weights before the wait; after it the activations are requested first, then the
//                  weights ("1 + x first": one batch before the wait, the second after the activations)
//   clN            thread-block clusters of N: each block bulk-copies 1/N of the activation vector into the
//                  shared memory of every block of its cluster (multicast), so the L2 serves it grid / N
//                  times; the grid is the clusters that fit at once
//   ldg x16        the activations read from 16 copies made beforehand (block b: copy b % 16)
//   ldg syncN      the team's warps kept in step by a named barrier every N batch pairs
//   ldg no q       the quantization replaced by the floats' bits (its arithmetic's cost; wrong results)
//   no dot         the dot products replaced by a byte of each word (the structure's own cost; wrong results)
// Graph-replayed calls (200, median of 5 replays), weight copies rotated over >= 1 GiB, fractions of a
// 2 GiB streaming read measured in the same run.
//
//   kpr_planar_probe             (needs a GPU of compute capability 9.0)
//   kpr_planar_probe --timeline  Q4_0 4096 x 14336 only: thread 0 of every block records the global timer
//                                at its start, after the dependency wait, when its activations arrived, after
//                                their quantization, after its rows and at its end; printed as means over
//                                11 calls of one replay, from each call's first return from the wait
#include "bench_timing.cuh"
#include "kpr_cuda_gemv.cuh"
#include "planar_probe_kernels.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace kpr::cuda;

namespace {

// The planar GEMV with the weights loaded into registers (two batches of R rows in flight), no ring. XQ: the
// activations read from the q8_1 planes xq (generic_cuda's quantizer ran before), else quantized here.
__device__ __forceinline__ uint4 lds128(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t a) {
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(a));
    return v;
}
// Thread-block clusters (CL > 0): the cluster's blocks fetch the activation vector once between them, each
// block a 1/CL piece that the copy engine writes into every block of the cluster (multicast), so the L2
// serves the vector grid / CL times instead of once per block.
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void bulk_multicast_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar,
                                                   uint16_t mask) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, "
                 "[%3], %4;" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "h"(mask)
                 : "memory");
}
constexpr int kMaxTeams = 16; // teams per block (512 threads, 32 per team at least)

// Bytes of a block's dynamic shared memory: the partial sums, then (KS > 0) KS row images per team.
__host__ __device__ inline size_t ldg_smem_bytes(uint32_t tpb, uint32_t cap, uint32_t T, uint64_t rb, int ks, uint32_t x_bytes = 0) {
    return (size_t(tpb) * cap * (T / 32) * 4 + 127) / 128 * 128 + size_t(tpb) * ks * rb + x_bytes;
}

// The timeline (--timeline): thread 0 of every block records the global timer at the kernel's start,
// after the dependency wait, after its activations are quantized, after its rows, after the block's
// barrier and at the end; blocks numbered in the order they start (one block per SM, so call c's blocks
// are c * grid .. c * grid + grid - 1).
constexpr uint32_t kTlSlots = 132 * 32;
__device__ unsigned long long g_tl[kTlSlots][8];
__device__ unsigned int g_tl_seq;
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// QM 0: quantize32_regs (the exact q8_1 integers). Timing probes, wrong results: QM 1 an approximate
// reciprocal and round-to-nearest conversions (no exactness fix-ups), QM 2 no arithmetic (the float bits).
template <int QM>
__device__ __forceinline__ void quantize32_q(const float (&v)[32], int (&xw)[8], float &dh, int &sum) {
    if constexpr (QM == 0) {
        quantize32_regs(v, xw, dh, sum);
    } else if constexpr (QM == 1) {
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
        const float dd = amax * (1.0f / 127.0f), r = amax > 0.0f ? 127.0f / amax : 0.0f;
        sum = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int q0 = __float2int_rn(v[4 * i] * r), q1 = __float2int_rn(v[4 * i + 1] * r);
            const int q2 = __float2int_rn(v[4 * i + 2] * r), q3 = __float2int_rn(v[4 * i + 3] * r);
            xw[i] = static_cast<int>(prmt(prmt(uint32_t(q0), uint32_t(q1), 0x0040u), prmt(uint32_t(q2), uint32_t(q3), 0x0040u), 0x5410u));
            sum = __dp4a(xw[i], 0x01010101, sum);
        }
        dh = __half2float(__float2half_rn(dd));
    } else {
        sum = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            xw[i] = static_cast<int>(__float_as_uint(v[4 * i]) ^ __float_as_uint(v[4 * i + 1]) ^ __float_as_uint(v[4 * i + 2]) ^
                                     __float_as_uint(v[4 * i + 3]));
            sum += xw[i] & 0xFF;
        }
        dh = 1.0f;
    }
}

// KS > 0: the team's first KS rows are bulk-copied into shared memory before the dependency wait (one
// copy per row, one mbarrier per batch of R rows), so that far more of the matrix is on its way while the
// call waits for x and quantizes it than two batches of registers hold; the rest as without.
template <bool NL, int R, int MODE, int PF = 0, bool XQ = false, int KS = 0, bool TL = false, int PRE = 2, int CL = 0, int QM = 0, int XR = 0, int SY = 0>
__global__ void __launch_bounds__(512, 1) planar_ldg(const PlanarArgs a, const ActQ8 xq) {
    extern __shared__ __align__(128) float part0[];
    unsigned long long tl[6], tlx = 0;
    if (TL && threadIdx.x == 0) tl[0] = gtimer();
    constexpr int LR = R == 8 ? 3 : R == 4 ? 2 : R == 2 ? 1 : 0;
    const uint32_t T = a.T, tid = threadIdx.x, lane = tid & 31u;
    const uint32_t tpb = blockDim.x / T, tm = tid / T, tt = tid % T, wpt = T / 32, wt = tt / 32;
    const uint32_t teams = gridDim.x * tpb, g = blockIdx.x * tpb + tm;
    const uint32_t n_rows = g < a.rows ? (a.rows - g + teams - 1) / teams : 0;
    const uint32_t nbat = (n_rows + R - 1) / R;
    float *part = part0 + size_t(tm) * a.cap * wpt;
    const bool has = tt < a.nb;
    const uint64_t rstride = uint64_t(teams) * a.rb;
    static_assert(KS % (2 * R) == 0, "whole batch pairs in shared memory");
    constexpr int KB = KS / R > 0 ? KS / R : 1;
    __shared__ alignas(8) uint64_t sbar[kMaxTeams][KB];
    const uint32_t ks = KS < n_rows ? KS : n_rows;
    uint32_t rows_smem = 0;
    if constexpr (KS > 0) {
        rows_smem = static_cast<uint32_t>(__cvta_generic_to_shared(part0)) +
                    static_cast<uint32_t>((size_t(tpb) * a.cap * wpt * 4 + 127) / 128 * 128) +
                    static_cast<uint32_t>(tm * KS * a.rb);
        if (tt == 0) {
            for (int b = 0; b < KB; ++b) mbar_init(static_cast<uint32_t>(__cvta_generic_to_shared(&sbar[tm][b])), 1);
            mbar_init_fence();
        }
        __syncthreads();
        if (tt == 0) {
            for (uint32_t b = 0; b * R < ks; ++b) {
                const uint32_t nr = ks - b * R < R ? ks - b * R : R;
                const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&sbar[tm][b]));
                mbar_arrive_expect(bar, static_cast<uint32_t>(nr * a.rb));
                for (uint32_t r = 0; r < nr; ++r)
                    bulk_copy_g2s(rows_smem + static_cast<uint32_t>((b * R + r) * a.rb),
                                  a.w + uint64_t(g + (b * R + r) * teams) * a.rb, static_cast<uint32_t>(a.rb), bar);
            }
        }
    }
    __shared__ alignas(8) uint64_t xbar;
    uint32_t xs = 0; // the activation vector in shared memory (CL > 0)
    if constexpr (CL > 0) {
        xs = static_cast<uint32_t>(__cvta_generic_to_shared(part0)) +
             static_cast<uint32_t>(ldg_smem_bytes(tpb, a.cap, T, a.rb, KS));
        if (tid == 0) {
            mbar_init(static_cast<uint32_t>(__cvta_generic_to_shared(&xbar)), 1);
            mbar_init_fence();
        }
        cluster_sync_all(); // every block's barrier initialised before any multicast lands on it
    }
    const uint8_t *src = a.w + uint64_t(g + KS * teams) * a.rb + 16 * tt;
    const int64_t sdelta = int64_t(16) * a.nb - 14 * int64_t(tt); // this thread's scale, from its word
    uint32_t next_row = g + KS * teams;
    uint4 qa[R], qb[R];
    uint32_t da[R], db[R];
    auto load = [&](uint4 (&q)[R], uint32_t (&d)[R]) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (has && next_row < a.rows) {
                q[r] = ldg_stream(src);
                d[r] = ldg_u16(src + sdelta);
            } else {
                q[r] = make_uint4(0, 0, 0, 0);
                d[r] = 0;
            }
            src += rstride;
            next_row += teams;
        }
    };
    if constexpr (PRE >= 1) load(qa, da);
    if constexpr (PRE >= 2) load(qb, db);
    if constexpr (PF > 0) { // the team's next PF batches of rows into L2 while this call waits for x
        if (tt == 0) {
            const uint8_t *p = src;
            uint32_t row = next_row;
            for (int i = 0; i < PF * R && row < a.rows; ++i, p += rstride, row += teams)
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(static_cast<uint32_t>(a.rb)) : "memory");
        }
    }
    pdl_launch_dependents();
    pdl_wait();
    if (TL && tid == 0) tl[1] = gtimer();
    // PRE < 2: the activations requested first, then the batches not requested before the wait
    float xv[32];
    if constexpr (PRE < 2 && !XQ) {
        if (has) load_x32(a.x + 32 * uint64_t(tt), xv);
    }
    if constexpr (PRE < 1) load(qa, da);
    if constexpr (PRE < 2) load(qb, db);
    int xw[8], xn[8];
    float dx = 0.0f;
    int c0 = 0;
    {
        int sum = 0;
        if (XQ && has) { // q8_1 from the quantizer's planes; the quant sum from the quants themselves
            const int4 q0 = __ldg(reinterpret_cast<const int4 *>(xq.q + 32 * uint64_t(tt)));
            const int4 q1 = __ldg(reinterpret_cast<const int4 *>(xq.q + 32 * uint64_t(tt)) + 1);
            xw[0] = q0.x, xw[1] = q0.y, xw[2] = q0.z, xw[3] = q0.w, xw[4] = q1.x, xw[5] = q1.y, xw[6] = q1.z, xw[7] = q1.w;
            dx = __ldg(xq.d + tt);
#pragma unroll
            for (int i = 0; i < 8; ++i) sum = __dp4a(xw[i], 0x01010101, sum);
        } else if (CL > 0) {
            const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&xbar));
            if (tid == 0) {
                const uint32_t bytes = a.nb * 128, piece = (bytes / (CL > 0 ? CL : 1) + 15) & ~15u, off = cluster_rank() * piece;
                mbar_arrive_expect(bar, bytes);
                if (off < bytes)
                    bulk_multicast_g2s(xs + off, reinterpret_cast<const uint8_t *>(a.x) + off,
                                       bytes - off < piece ? bytes - off : piece, bar, uint16_t((1u << CL) - 1));
            }
            mbar_wait(bar, 0);
            cluster_arrive(); // this block reads no other block's memory after this
            if (has) {
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const uint4 f = lds128(xs + 128 * tt + 16 * i);
                    xv[4 * i] = __uint_as_float(f.x), xv[4 * i + 1] = __uint_as_float(f.y);
                    xv[4 * i + 2] = __uint_as_float(f.z), xv[4 * i + 3] = __uint_as_float(f.w);
                }
                quantize32_q<QM>(xv, xw, dx, sum);
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) xw[i] = 0;
            }
        } else if (has) {
            if constexpr (PRE < 2) {
                if constexpr (TL) {
                    uint32_t o = 0;
#pragma unroll
                    for (int i = 0; i < 32; ++i) o |= __float_as_uint(xv[i]);
                    if (tid == 0) tlx = gtimer() + (o == 0x7fffffffu);
                }
                quantize32_q<QM>(xv, xw, dx, sum);
            }
            else if constexpr (TL) { // the time the activations arrived, then the quantization
                load_x32(a.x + uint64_t(XR > 0 ? blockIdx.x % XR : 0) * a.nb * 32 + 32 * uint64_t(tt), xv);
                uint32_t o = 0;
#pragma unroll
                for (int i = 0; i < 32; ++i) o |= __float_as_uint(xv[i]);
                if (tid == 0) tlx = gtimer() + (o == 0x7fffffffu);
                quantize32_q<QM>(xv, xw, dx, sum);
            } else if constexpr (XR > 0) { // copy blockIdx % XR of the activations (replicas made beforehand)
                load_x32(a.x + uint64_t(blockIdx.x % XR) * a.nb * 32 + 32 * uint64_t(tt), xv);
                quantize32_q<QM>(xv, xw, dx, sum);
            } else if constexpr (QM != 0) {
                load_x32(a.x + 32 * uint64_t(tt), xv);
                quantize32_q<QM>(xv, xw, dx, sum);
            } else
                quantize32(a.x + 32 * uint64_t(tt), xw, dx, sum);
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) xw[i] = 0;
        }
        c0 = -8 * sum;
        if constexpr (NL) planar_nl_order(xw, xn);
    }
    if (TL && tid == 0) tl[2] = gtimer() + (xw[0] == 0x7fffffff); // after the quantization (a use of it)
    auto compute = [&](uint32_t k, const uint4 (&q4)[R], const uint32_t (&dd)[R]) {
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint32_t q[4] = {q4[r].x, q4[r].y, q4[r].z, q4[r].w};
            const float d = f16_to_float(static_cast<uint16_t>(dd[r]));
            const int s = probe_dot_q4_block<NL, MODE>(q, xw, xn, c0);
            acc[r] = __fmul_rn(static_cast<float>(s), __fmul_rn(d, dx));
        }
        const float v = reduce_scatter_rows<R>(acc, lane);
        if ((lane & ((16u >> LR) * 2 - 1)) == 0) part[(k * R + ((lane >> (5 - LR)) & (R - 1))) * wpt + wt] = v;
    };
    if constexpr (KS > 0) {
        for (uint32_t b = 0; b * R < ks; ++b) {
            mbar_wait(static_cast<uint32_t>(__cvta_generic_to_shared(&sbar[tm][b])), 0);
            uint4 q[R];
            uint32_t d[R];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint32_t row = rows_smem + static_cast<uint32_t>((b * R + r) * a.rb);
                if (has && b * R + r < ks) {
                    q[r] = lds128(row + 16 * tt);
                    d[r] = lds_u16(row + 16 * a.nb + 2 * tt);
                } else {
                    q[r] = make_uint4(0, 0, 0, 0);
                    d[r] = 0;
                }
            }
            compute(b, q, d);
        }
    }
    for (uint32_t k = KS / R; k < nbat; k += 2) {
        compute(k, qa, da);
        load(qa, da);
        if (k + 1 >= nbat) break;
        compute(k + 1, qb, db);
        load(qb, db);
        if constexpr (SY > 0) { // the team's warps kept within SY batch pairs of each other (a named barrier)
            if ((k - KS / R) / 2 % SY == SY - 1) asm volatile("bar.sync %0, %1;" ::"r"(1 + tm), "r"(T) : "memory");
        }
    }
    if (TL && tid == 0) tl[3] = gtimer();
    if constexpr (CL > 0) cluster_wait(); // no block leaves while its multicasts may still be landing elsewhere
    __syncthreads();
    if (TL && tid == 0) tl[4] = gtimer();
    store_row_sums<1>(part0, a, tpb, wpt, teams);
    if (TL && tid == 0) {
        __syncwarp(1u);
        tl[5] = gtimer();
        const uint32_t seq = atomicAdd(&g_tl_seq, 1u) % kTlSlots;
        for (int i = 0; i < 6; ++i) g_tl[seq][i] = tl[i];
        g_tl[seq][6] = gridDim.x;
        g_tl[seq][7] = tlx ? tlx : tl[2];
    }
}

const float *g_xrep = nullptr; // 16 copies of the current shape's activations (the XR variants)
ActQ8 g_v{}; // the q8_1 planes of the current shape's activations (the XQ variants)
template <bool NL, int R, int MODE, int PF = 0, bool XQ = false, int KS = 0, bool TL = false, int PRE = 2, int CL = 0, int QM = 0, int XR = 0, int SY = 0>
cudaError_t launch_ldg(const uint8_t *w, uint64_t rb, uint32_t rows, uint32_t nb, const float *x, float *y, uint32_t sms,
                       uint32_t optin, cudaStream_t s) {
    if (XQ) {
        const cudaError_t e = launch_quantize_act_q8_1(x, size_t(nb) * 32, g_v, true, s);
        if (e != cudaSuccess) return e;
    }
    const uint32_t T = (nb + 31) / 32 * 32;
    if (T > 512) return cudaErrorNotSupported;
    const uint32_t tpb = 512 / T, teams = sms * tpb;
    const uint32_t cap = ((rows + teams - 1) / teams + 2 * R - 1) / (2 * R) * (2 * R);
    const size_t smem = ldg_smem_bytes(tpb, cap, T, rb, KS, CL > 0 ? nb * 128 : 0);
    if (tpb > kMaxTeams || (SY > 0 && tpb > 15) || smem > optin) return cudaErrorNotSupported; // barrier ids 1..15
    auto k = planar_ldg<NL, R, MODE, PF, XQ, KS, TL, PRE, CL, QM, XR, SY>;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    if constexpr (CL > 0) {
        cudaLaunchConfig_t cfg = {};
        cfg.blockDim = dim3(tpb * T);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s;
        cudaLaunchAttribute at[2];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = CL;
        at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
        at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[1].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = 2;
        cfg.gridDim = dim3(sms / CL * CL);
        int ncl = 0;
        e = cudaOccupancyMaxActiveClusters(&ncl, k, &cfg);
        if (e != cudaSuccess) return e;
        if (ncl < 1) return cudaErrorNotSupported;
        const uint32_t grid = std::min<uint32_t>(uint32_t(ncl), sms / CL) * CL;
        static uint32_t shown = 0;
        if (shown != grid) std::printf("  [cluster of %d: %d clusters resident, grid %u]\n", CL, ncl, grid), shown = grid;
        cfg.gridDim = dim3(grid);
        const uint32_t teams2 = grid * tpb;
        const uint32_t cap2 = ((rows + teams2 - 1) / teams2 + 2 * R - 1) / (2 * R) * (2 * R);
        if (cap2 != cap) { // fewer blocks: more rows per team
            const size_t smem2 = ldg_smem_bytes(tpb, cap2, T, rb, KS, nb * 128);
            if (smem2 > optin) return cudaErrorNotSupported;
            cfg.dynamicSmemBytes = smem2;
            e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem2));
            if (e != cudaSuccess) return e;
        }
        PlanarArgs a{w, rb, rows, nb, T, cap2, x, y};
        return cudaLaunchKernelEx(&cfg, k, a, g_v);
    }
    PlanarArgs a{w, rb, rows, nb, T, cap, XR > 0 ? g_xrep : x, y};
    return launch_pdl(k, dim3(sms), dim3(tpb * T), smem, true, s, a, g_v);
}

cudaStream_t g_s;

// A probe variant: its name in the output and its launcher (launch_ldg's signature).
struct Variant {
    const char *name;
    cudaError_t (*fn)(const uint8_t *, uint64_t, uint32_t, uint32_t, const float *, float *, uint32_t, uint32_t,
                      cudaStream_t);
};

// The device buffers of one shape: the activations (and 16 copies of them for the XR variants), the q8_1
// planes generic_cuda's quantizer writes, and the planar copies of the GGUF weight copies in buf. Sets
// g_xrep and g_v, which the launchers read.
struct ShapeBuffers {
    float *xf = nullptr, *xrep = nullptr;
    void *scr = nullptr;
    size_t scr_bytes = 0;
    ActQ8 v{};
    ShapeBuffers(uint32_t rows, uint32_t cols, const uint8_t *buf, uint8_t *pbuf, uint64_t rb, uint64_t ws,
                 size_t copies) {
        const uint32_t nb = cols / 32;
        PROBE_CK(cudaMalloc(&xf, cols * 4));
        scr_bytes = std::max(act_q8_bytes(1, cols), act_tiles_bytes(1, cols, true));
        PROBE_CK(cudaMalloc(&scr, scr_bytes));
        kpr::bench::fill_finite_halves<<<64, 256, 0, g_s>>>(reinterpret_cast<uint32_t *>(xf), cols, 3);
        PROBE_CK(cudaMalloc(&xrep, size_t(cols) * 4 * 16));
        for (int c = 0; c < 16; ++c)
            PROBE_CK(cudaMemcpyAsync(xrep + size_t(c) * cols, xf, cols * 4, cudaMemcpyDeviceToDevice, g_s));
        for (size_t c = 0; c < copies; ++c)
            planar_repack_q4<<<(rows * nb + 255) / 256, 256, 0, g_s>>>(buf + c * ws, pbuf + c * ws, rb, rows, nb);
        PROBE_CK(cudaStreamSynchronize(g_s));
        v = act_q8_view(scr, 1, cols);
        g_xrep = xrep;
        g_v = v;
    }
    ~ShapeBuffers() {
        cudaFree(xf);
        cudaFree(xrep);
        cudaFree(scr);
    }
    ShapeBuffers(const ShapeBuffers &) = delete;
    ShapeBuffers &operator=(const ShapeBuffers &) = delete;
};

// Replays fn as the benchmark does and prints where the last calls' time went (thread 0 of each block, ns,
// from the moment the call's first block returned from its dependency wait: about when the previous call
// completed).
template <class F>
void timeline(const char *name, uint32_t sms, F &&fn) {
    const unsigned zero = 0;
    PROBE_CK(cudaMemcpyToSymbol(g_tl_seq, &zero, sizeof(zero)));
    const double us = kpr::bench::replay_us(g_s, 200, fn);
    unsigned total = 0;
    PROBE_CK(cudaMemcpyFromSymbol(&total, g_tl_seq, sizeof(total)));
    std::vector<unsigned long long> tl(size_t(kTlSlots) * 8);
    PROBE_CK(cudaMemcpyFromSymbol(tl.data(), g_tl, tl.size() * 8));
    sms = uint32_t(tl[size_t((total - 1) % kTlSlots) * 8 + 6]); // blocks per call
    const uint32_t calls = total / sms, n = 12;
    std::printf("timeline %-16s %.2f us per call; %u blocks recorded; means over %u calls (ns from the call's first "
                "return from the wait):\n", name, us, total, n - 1);
    auto at = [&](uint32_t c, uint32_t j, int i) { return (long long)tl[((size_t(c) * sms + j) % kTlSlots) * 8 + i]; };
    double acc[10] = {}, xacc[2] = {};
    long long gran = 1LL << 62;
    for (uint32_t c = calls - n; c + 1 < calls; ++c) {
        long long w0 = LLONG_MAX, w0n = LLONG_MAX, smin = LLONG_MAX, smax = LLONG_MIN, wmax = LLONG_MIN, emax = LLONG_MIN;
        std::vector<long long> q, r, b, xa;
        for (uint32_t j = 0; j < sms; ++j) {
            w0 = std::min(w0, at(c, j, 1));
            w0n = std::min(w0n, at(c + 1, j, 1));
        }
        for (uint32_t j = 0; j < sms; ++j) {
            smin = std::min(smin, at(c, j, 0) - w0);
            smax = std::max(smax, at(c, j, 0) - w0);
            wmax = std::max(wmax, at(c, j, 1) - w0);
            emax = std::max(emax, at(c, j, 5) - w0);
            q.push_back(at(c, j, 2) - at(c, j, 1));
            xa.push_back(at(c, j, 7) - at(c, j, 1));
            r.push_back(at(c, j, 3) - at(c, j, 2));
            b.push_back(at(c, j, 5) - at(c, j, 3));
            for (int i = 1; i < 6; ++i) {
                const long long d = at(c, j, i) - at(c, j, i - 1);
                if (d > 0) gran = std::min(gran, d);
            }
        }
        std::sort(q.begin(), q.end());
        std::sort(xa.begin(), xa.end());
        xacc[0] += double(xa[sms / 2]) / (n - 1), xacc[1] += double(xa.back()) / (n - 1);
        std::sort(r.begin(), r.end());
        std::sort(b.begin(), b.end());
        const double v[10] = {double(smin), double(smax), double(wmax), double(q[sms / 2]), double(q.back()),
                              double(r[sms / 2]), double(r.back()), double(b.back()), double(emax), double(w0n - w0)};
        for (int i = 0; i < 10; ++i) acc[i] += v[i] / (n - 1);
    }
    std::printf("  activations arrived after the wait: median %.0f, max %.0f\n", xacc[0], xacc[1]);
    std::printf("  block starts %.0f..%.0f | waits return by %.0f | quantized after the wait: median %.0f, max %.0f | "
                "rows: median %.0f, max %.0f | barrier + store max %.0f | last block ends %.0f | next call's first "
                "wait returns %.0f | smallest step seen %lld\n",
                acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7], acc[8], acc[9], gran);
}

} // namespace

int main(int argc, char **argv) {
    kpr::bench::ProbeDevice pd;
    if (!kpr::bench::probe_device_cc9(pd, "PDL, cp.async.bulk prefetches")) return 2;
    const int sms = pd.sms, optin = pd.smem_optin, per_sm = pd.smem_per_sm;
    PROBE_CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
    const size_t big = size_t(1) << 31;
    uint8_t *buf, *pbuf;
    uint32_t *out;
    PROBE_CK(cudaMalloc(&buf, big));
    PROBE_CK(cudaMalloc(&pbuf, big));
    PROBE_CK(cudaMalloc(&out, 4));
    kpr::bench::fill_finite_halves<<<4096, 256, 0, g_s>>>(reinterpret_cast<uint32_t *>(buf), big / 4, 7);
    const double bw = kpr::bench::measure_read_bandwidth(g_s, buf, big, sms, out);
    std::printf("read bandwidth (2 GiB): %.0f GB/s\n", bw);
    if (argc > 1 && std::strcmp(argv[1], "--timeline") == 0) { // Q4_0 4096 x 14336 only
        const uint32_t rows = 4096, cols = 14336, nb = cols / 32;
        const uint64_t rb = uint64_t(nb) * 18, ws = rb * rows;
        const size_t copies = (size_t(1) << 30) / ws + 1;
        ShapeBuffers sb(rows, cols, buf, pbuf, rb, ws, copies);
        float *y1;
        PROBE_CK(cudaMalloc(&y1, rows * 4));
        const Variant vs[] = {{"ldg", launch_ldg<false, 4, 0, 0, false, 0, true>},
                        {"ldg sync1", launch_ldg<false, 4, 0, 0, false, 0, true, 2, 0, 0, 0, 1>},
                        {"ldg sync4", launch_ldg<false, 4, 0, 0, false, 0, true, 2, 0, 0, 0, 4>},
                        {"q + ldg", launch_ldg<false, 4, 0, 0, true, 0, true>},
                        {"ldg s16", launch_ldg<false, 4, 0, 0, false, 16, true>},
                        {"x first", launch_ldg<false, 4, 0, 0, false, 0, true, 0>},
                        {"cl2", launch_ldg<false, 4, 0, 0, false, 0, true, 2, 2>},
                        {"ldg x16", launch_ldg<false, 4, 0, 0, false, 0, true, 2, 0, 0, 16>},
                        {"ldg no q", launch_ldg<false, 4, 0, 0, false, 0, true, 2, 0, 2>},
                        {"ldg no dot", launch_ldg<false, 4, 1, 0, false, 0, true>}};
        for (int rep = 0; rep < 2; ++rep)
            for (const Variant &v : vs)
                timeline(v.name, sms, [&](int i) { v.fn(pbuf + (i % copies) * ws, rb, rows, nb, sb.xf, y1, sms, optin, g_s); });
        cudaFree(y1);
        return 0;
    }

    struct Shape { uint32_t rows, cols; };
    for (Shape sh : {Shape{4096, 14336}, Shape{14336, 4096}, Shape{4096, 4096}, Shape{5120, 13824}, Shape{2048, 8192}}) {
        const uint32_t rows = sh.rows, cols = sh.cols, nb = cols / 32;
        const uint64_t rb = uint64_t(nb) * 18, ws = rb * rows;
        const size_t copies = (size_t(1) << 30) / ws + 1;
        ShapeBuffers sb(rows, cols, buf, pbuf, rb, ws, copies);
        const float *xf = sb.xf;
        const ActQ8 &v = sb.v;
        float *y0, *y1;
        PROBE_CK(cudaMalloc(&y0, rows * 4));
        PROBE_CK(cudaMalloc(&y1, rows * 4));
        auto frac = [&](double us) { return ws / (us * 1e-6) / 1e9 / bw; };
        auto base = [&](auto tag, int i, float *y) {
            using T = decltype(tag);
            GemvArgs a{};
            a.w = buf + (i % copies) * ws;
            a.row_bytes = rb;
            a.expert_bytes = ws;
            a.rows = rows;
            a.nb = nb;
            a.n_used = a.x_slots = a.n_experts = 1;
            a.aligned = 1;
            a.x.q = v.q;
            a.x.d = v.d;
            a.x.s = v.s;
            a.x.cols = cols;
            a.y = y;
            a.sms = sms;
            a.smem_optin = optin;
            a.smem_sm = per_sm;
            a.sm80 = 1;
            a.sm90 = 1;
            a.mma_mode = kMmaAuto;
            a.xf = xf;
            a.xq_n = cols;
            a.xq_bytes = sb.scr_bytes;
            return launch_gemv_nc<T, TabGlobal>(a, 1, 1, true, g_s);
        };
        auto check = [&](const char *what, cudaError_t e) {
            PROBE_CK(e);
            PROBE_CK(cudaStreamSynchronize(g_s));
            std::vector<float> a(rows), b(rows);
            PROBE_CK(cudaMemcpy(a.data(), y0, rows * 4, cudaMemcpyDeviceToHost));
            PROBE_CK(cudaMemcpy(b.data(), y1, rows * 4, cudaMemcpyDeviceToHost));
            double m = 0, d = 0;
            for (uint32_t r = 0; r < rows; ++r) {
                m = std::max(m, double(std::fabs(a[r])));
                d = std::max(d, double(std::fabs(a[r] - b[r])));
            }
            std::printf("  %-28s max |diff| / max |y| against the committed call: %.2e\n", what, d / m);
        };
        for (int nl = 0; nl < 2; ++nl) {
            const char *tn = nl ? "iq4_nl" : "q4_0";
            const Variant vq[] = {
                {"ldg", launch_ldg<false, 4, 0>},
                {"q + ldg", launch_ldg<false, 4, 0, 0, true>},
                {"ldg s16", launch_ldg<false, 4, 0, 0, false, 16>},
                {"late pf2", launch_ldg<false, 4, 0, 2, false, 0, false, 0>},
                {"x first", launch_ldg<false, 4, 0, 0, false, 0, false, 0>},
                {"1 + x first", launch_ldg<false, 4, 0, 0, false, 0, false, 1>},
                {"cl2", launch_ldg<false, 4, 0, 0, false, 0, false, 2, 2>},
                {"ldg x16", launch_ldg<false, 4, 0, 0, false, 0, false, 2, 0, 0, 16>},
                {"ldg no q", launch_ldg<false, 4, 0, 0, false, 0, false, 2, 0, 2>},
                {"ldg sync1", launch_ldg<false, 4, 0, 0, false, 0, false, 2, 0, 0, 0, 1>},
                {"ldg sync2", launch_ldg<false, 4, 0, 0, false, 0, false, 2, 0, 0, 0, 2>},
                {"ldg sync4", launch_ldg<false, 4, 0, 0, false, 0, false, 2, 0, 0, 0, 4>},
                {"ldg no dot", launch_ldg<false, 4, 1>},
            };
            const Variant vn[] = {
                {"ldg", launch_ldg<true, 4, 0>},
                {"ldg sync1", launch_ldg<true, 4, 0, 0, false, 0, false, 2, 0, 0, 0, 1>},
                {"ldg sync4", launch_ldg<true, 4, 0, 0, false, 0, false, 2, 0, 0, 0, 4>},
                {"q + ldg", launch_ldg<true, 4, 0, 0, true>},
            };
            const Variant *vs = nl ? vn : vq;
            const int nv = nl ? int(sizeof(vn) / sizeof(vn[0])) : int(sizeof(vq) / sizeof(vq[0]));
            for (int rep = 0; rep < 2; ++rep) {
                const double tb = nl ? kpr::bench::replay_us(g_s, 200, [&](int i) { base(TIQ4_NL{}, i, y0); })
                                     : kpr::bench::replay_us(g_s, 200, [&](int i) { base(TQ4_0{}, i, y0); });
                std::printf("%-6s %5u x %5u: committed %.2f us (%.3f)", tn, rows, cols, tb, frac(tb));
                for (int k = 0; k < nv; ++k) {
                    const Variant &vv = vs[k];
                    if (vv.fn(pbuf, rb, rows, nb, xf, y1, sms, optin, g_s) != cudaSuccess) {
                        cudaGetLastError();
                        std::printf(" | %s n/a", vv.name);
                        continue;
                    }
                    const double t = kpr::bench::replay_us(g_s, 200, [&](int i) { vv.fn(pbuf + (i % copies) * ws, rb, rows, nb, xf, y1, sms, optin, g_s); });
                    std::printf(" | %s %.2f (%.3f)", vv.name, t, frac(t));
                }
                std::printf("\n");
            }
            PROBE_CK(nl ? base(TIQ4_NL{}, 0, y0) : base(TQ4_0{}, 0, y0));
            for (int k = 0; k < nv; ++k) {
                if (std::strstr(vs[k].name, "no dot") || std::strstr(vs[k].name, "no q")) continue; // wrong by design
                cudaMemset(y1, 0xff, rows * 4);
                const cudaError_t e = vs[k].fn(pbuf, rb, rows, nb, xf, y1, sms, optin, g_s);
                if (e == cudaErrorNotSupported) continue;
                char what[64];
                std::snprintf(what, sizeof(what), "%s %s", tn, vs[k].name);
                check(what, e);
            }
        }
        cudaFree(y0);
        cudaFree(y1);
    }
    return 0;
}

// kpr_stream_probe -- how close can a GEMV-sized kernel get to the device's read bandwidth on Hopper
// (compute capability 9.0), before any block decoding? The ceilings behind issue #4's targets.
//
// All figures are graph-replayed (200 calls, median of 5 replays), weight copies rotated over >= 1 GiB,
// and printed as a fraction of a streaming read of 4 GiB measured in the same run:
//   flat     a grid-stride 16-byte-load read of a 62.4 MB (Q8_0 4096x14336) or 33.0 MB (Q4_0) range,
//            launched back to back, without and with programmatic dependent launch (PDL: the next
//            call's blocks start as this call's blocks retire)
//   tma      each block streams its contiguous range of 15232-byte rows through a ring of S row stages
//            with bulk copies (cp.async.bulk + mbarrier), with PDL; then the same with what a GEMV adds:
//            staging 18 KiB of activations after the dependency wait, one warp per row, and the q8_1
//            activation quantizer launched before every call (as generic_cuda does)
//   bytes    the targets' byte counts (Q8_0 62.4 MB, the 4.5-bit types 33.0 MB, IQ3_S 25.2 MB, IQ3_XXS
//            22.5 MB at 4096 x 14336) streamed by dependent calls: a grid-stride read that waits for the
//            previous call before its first load, and the warp-per-row ring with 18 KiB of activations
//            staged after the wait (its first S rows requested before it); what any one-column call that
//            needs its activations before its first dot product can reach at that size, before decoding
//   row      generic_cuda's row kernel (launch_gemv_nc, what a call runs on 9.0) with a block type that
//            decodes nothing (Q8_0's geometry), with and without the quantizer; then with Q8_0 itself
//
//   kpr_stream_probe        (needs a GPU of compute capability 9.0)
#include "bench_timing.cuh"
#include "kpr_cuda_gemv.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace kpr::cuda;

namespace {

// ---- Hopper bulk copies (local to the probe) ----
__device__ __forceinline__ uint32_t su32(const void *p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t *b, uint32_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su32(b)), "r"(n) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(su32(b)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(su32(b)), "r"(parity)
                     : "memory");
    } while (!done);
#endif
}
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(su32(dst)),
                 "l"(src), "r"(bytes), "r"(su32(b))
                 : "memory");
#endif
}

// A block streams rows [r0, r1) through S whole-row stages (pieces of <= 8 KiB on one barrier).
// XSTAGE: copy `xbytes` of activations into shared memory after the dependency wait. TEAMS: warp w
// takes rows w, w + 8, ... and refills its own stage (else the block takes each row together).
template <bool XSTAGE, bool TEAMS>
__global__ void __launch_bounds__(256, 1) tma_stream(const uint8_t *w, uint32_t rows, uint32_t rb, uint32_t S,
                                                     const int8_t *xg, uint32_t xbytes, float *y) {
    extern __shared__ __align__(16) uint8_t dsm[];
    __shared__ uint64_t full[32];
    const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint32_t stage = (rb + 16 + 15) / 16 * 16;
    uint8_t *ring = dsm + (XSTAGE ? xbytes : 0);
    const uint32_t r0 = uint64_t(rows) * blockIdx.x / gridDim.x, r1 = uint64_t(rows) * (blockIdx.x + 1) / gridDim.x;
    const uint32_t n = r1 - r0;
    if (tid == 0)
        for (uint32_t i = 0; i < S; ++i) mbar_init(&full[i], 1);
    __syncthreads();
    auto produce = [&](uint32_t i) {
        uint64_t *bar = &full[i % S];
        uint8_t *dst = ring + (i % S) * stage;
        const uint8_t *src = w + uint64_t(r0 + i) * rb;
        mbar_expect(bar, rb);
        for (uint32_t o = 0; o < rb; o += 8192) bulk_g2s(dst + o, src + o, min(8192u, rb - o), bar);
    };
    if (tid == 0)
        for (uint32_t i = 0; i < min(S, n); ++i) produce(i);
    pdl_wait();
    pdl_launch_dependents();
    if (XSTAGE) {
        for (uint32_t v = tid; v < xbytes / 16; v += 256)
            reinterpret_cast<int4 *>(dsm)[v] = __ldg(reinterpret_cast<const int4 *>(xg) + v);
        __syncthreads();
    }
    uint32_t acc = 0;
    if (TEAMS) {
        for (uint32_t i = warp; i < n; i += 8) {
            mbar_wait(&full[i % S], (i / S) & 1u);
            acc += (ring + (i % S) * stage)[lane];
            __syncwarp();
            if (lane == 0 && i + S < n) produce(i + S);
            if (lane == 0) y[r0 + i] = static_cast<float>(acc);
        }
    } else {
        for (uint32_t i = 0; i < n; ++i) {
            mbar_wait(&full[i % S], (i / S) & 1u);
            acc ^= reinterpret_cast<const uint32_t *>(ring + (i % S) * stage)[tid];
            __syncthreads();
            if (tid == 0 && i + S < n) produce(i + S);
            if (tid == 0) y[r0 + i] = static_cast<float>(acc);
        }
    }
}

// Not a quantizer: the quantizer's grid and memory traffic (a float in, a byte out per value, a float
// per 32), triggering its dependents before it waits for the kernel before it.
__global__ void early_standin(const float *x, int8_t *q, float *d) {
    pdl_launch_dependents();
    pdl_wait();
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const float xi = x[i];
    q[i] = static_cast<int8_t>(xi);
    if ((threadIdx.x & 31u) == 0) d[i / 32] = xi;
}

// Q8_0's geometry for the row kernel, with no decoding: one shared byte per item.
struct TNoDecode {
    static constexpr uint32_t TYPE = KPR_TYPE_Q8_0; // takes Q8_0's launch choices
    static constexpr uint32_t QK = 32, BS = 34, CB = 64, PARTS = 1;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t, const X &, uint32_t, const Tab &,
                                                float (&acc)[R][NC]) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][0] += static_cast<float>(w[r][0]);
    }
};

cudaStream_t g_s;

template <class F>
double time_graph(F body) {
    return kpr::bench::replay_us(g_s, 200, body);
}

} // namespace

int main() {
    kpr::bench::ProbeDevice pd;
    if (!kpr::bench::probe_device_cc9(pd, "bulk copies, PDL")) return 2;
    const int sms = pd.sms, optin = pd.smem_optin, per_sm = pd.smem_per_sm;
    PROBE_CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
    const size_t big = size_t(4) << 30;
    uint8_t *buf;
    uint32_t *out;
    PROBE_CK(cudaMalloc(&buf, big));
    PROBE_CK(cudaMalloc(&out, 4));
    kpr::bench::fill_finite_halves<<<4096, 256, 0, g_s>>>(reinterpret_cast<uint32_t *>(buf), big / 4, 7);
    const double bw = kpr::bench::measure_read_bandwidth(g_s, buf, big, sms, out);
    std::printf("read bandwidth (flat, 4 GiB): %.0f GB/s\n", bw);
    auto frac = [&](size_t bytes, double us) { return bytes / (us * 1e-6) / 1e9 / bw; };

    for (size_t ws : {size_t(62390272), size_t(33030144)}) {
        const size_t copies = (size_t(1) << 30) / ws + 1;
        for (int k : {8, 16}) {
            const double t0 = time_graph([&](int i) {
                kpr::bench::stream_read_kernel<false><<<sms * k, 256, 0, g_s>>>(reinterpret_cast<const uint4 *>(buf + (i % copies) * ws), ws / 16, out);
            });
            const double t1 = time_graph([&](int i) {
                launch_pdl(kpr::bench::stream_read_kernel<true>, dim3(sms * k), dim3(256), 0, true, g_s,
                           reinterpret_cast<const uint4 *>(buf + (i % copies) * ws), ws / 16, out);
            });
            std::printf("flat %5.1f MB, %2d blocks/SM: %.2f us (%.3f); with PDL %.2f us (%.3f)\n", ws / 1e6, k, t0,
                        frac(ws, t0), t1, frac(ws, t1));
        }
    }

    const uint32_t rb = 15232, rows = 4096, cols = 14336;
    const size_t ws = size_t(rb) * rows, copies = (size_t(1) << 30) / ws + 1;
    int8_t *xg;
    float *yy, *xf;
    void *scr;
    PROBE_CK(cudaMalloc(&xg, 18432));
    PROBE_CK(cudaMalloc(&yy, 8 * rows * 4));
    PROBE_CK(cudaMalloc(&xf, cols * 4));
    PROBE_CK(cudaMalloc(&scr, act_q8_bytes(1, cols)));
    kpr::bench::fill_finite_halves<<<64, 256, 0, g_s>>>(reinterpret_cast<uint32_t *>(xf), cols, 3);
    const ActQ8 v = act_q8_view(scr, 1, cols);
    auto quantizer = [&] {
        launch_quantize_act_q8_1(xf, cols, v, true, g_s);
    };
    for (uint32_t S : {8u, 13u}) {
        const uint32_t stage = (rb + 16 + 15) / 16 * 16;
        // quant: 0 none, 1 generic_cuda's quantizer, 2 a stand-in with its grid and memory traffic that
        // lets the next kernel launch before it waits for the previous one
        auto run = [&](const char *what, auto kern, bool xs, int quant) {
            const size_t dyn = S * stage + (xs ? 18432 : 0);
            if (dyn > size_t(optin)) return;
            PROBE_CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn)));
            const double t = time_graph([&](int i) {
                if (quant == 1) quantizer();
                if (quant == 2)
                    launch_pdl(early_standin, dim3(cols / 256), dim3(256), 0, true, g_s, static_cast<const float *>(xf),
                               const_cast<int8_t *>(v.q), const_cast<float *>(v.d));
                launch_pdl(kern, dim3(sms), dim3(256), dyn, true, g_s, static_cast<const uint8_t *>(buf + (i % copies) * ws), rows,
                           rb, S, static_cast<const int8_t *>(xg), 18432u, yy);
            });
            std::printf("tma %2u row stages, %-46s %.2f us (%.3f)\n", S, what, t, frac(ws, t));
        };
        run("block per row", tma_stream<false, false>, false, false);
        run("block per row, x staged", tma_stream<true, false>, true, false);
        if (S % 8 == 0) { // a warp refills its own stages: S a multiple of the 8 warps
            run("warp per row", tma_stream<false, true>, false, false);
            run("warp per row, x staged", tma_stream<true, true>, true, false);
        }
        run("block per row, quantizer before each", tma_stream<false, false>, false, 1);
        run("block per row, early-trigger stand-in before", tma_stream<false, false>, false, 2);
        if (S % 8 == 0) {
            run("warp per row, x staged, quantizer before", tma_stream<true, true>, true, 1);
            run("warp per row, x staged, stand-in before", tma_stream<true, true>, true, 2);
        }
    }

    // the targets' byte counts at 4096 x 14336, streamed by dependent calls (no decoding)
    struct Size {
        const char *types;
        uint32_t rb; // bytes per row of 14336 weights
    };
    for (const Size &z : {Size{"Q8_0", 15232}, Size{"Q4_0 / Q4_K / IQ4_NL", 8064}, Size{"IQ3_S", 6160},
                          Size{"IQ3_XXS", 5488}}) {
        const size_t zs = size_t(z.rb) * rows, zc = (size_t(1) << 30) / zs + 1;
        for (int k : {8, 16}) {
            const double t = time_graph([&](int i) {
                launch_pdl(kpr::bench::stream_read_kernel<true, true>, dim3(sms * k), dim3(256), 0, true, g_s,
                           reinterpret_cast<const uint4 *>(buf + (i % zc) * zs), zs / 16, out);
            });
            std::printf("bytes %-20s %5.1f MB: dependent read, %2d blocks/SM           %.2f us (%.3f)\n", z.types,
                        zs / 1e6, k, t, frac(zs, t));
        }
        const uint32_t stage = (z.rb + 16 + 15) / 16 * 16;
        for (uint32_t S : {8u, 16u, 24u, 32u}) {
            const size_t dyn = S * stage + 18432;
            if (dyn > size_t(optin)) continue;
            auto kern = tma_stream<true, true>;
            PROBE_CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn)));
            const double t = time_graph([&](int i) {
                launch_pdl(kern, dim3(sms), dim3(256), dyn, true, g_s, static_cast<const uint8_t *>(buf + (i % zc) * zs),
                           rows, z.rb, S, static_cast<const int8_t *>(xg), 18432u, yy);
            });
            std::printf("bytes %-20s %5.1f MB: ring, warp per row, x staged, %2u stages %.2f us (%.3f)\n", z.types,
                        zs / 1e6, S, t, frac(zs, t));
        }
    }

    auto row_kernel = [&](auto tag, const char *name) {
        using T = decltype(tag);
        auto args = [&](int i, bool quant) {
            GemvArgs a{};
            a.w = buf + (i % copies) * ws;
            a.row_bytes = rb;
            a.expert_bytes = ws;
            a.rows = rows;
            a.nb = cols / 32;
            a.n_used = a.x_slots = a.n_experts = 1;
            a.aligned = 1;
            a.x.q = v.q;
            a.x.d = v.d;
            a.x.s = v.s;
            a.x.cols = cols;
            a.y = yy;
            a.sms = sms;
            a.smem_optin = optin;
            a.smem_sm = per_sm;
            a.sm80 = 1;
            if (quant) {
                a.xf = xf;
                a.xq_n = cols;
            }
            return a;
        };
        const double tq = time_graph([&](int i) { launch_gemv_nc<T, TabGlobal>(args(i, true), 1, 1, true, g_s); });
        const double tn = time_graph([&](int i) { launch_gemv_nc<T, TabGlobal>(args(i, false), 1, 1, true, g_s); });
        std::printf("row kernel, %-10s 1 column: with the quantizer (a generic_cuda call) %.2f us (%.3f); without %.2f us (%.3f)\n",
                    name, tq, frac(ws, tq), tn, frac(ws, tn));
    };
    row_kernel(TNoDecode{}, "no decode");
    row_kernel(TQ8_0{}, "Q8_0");
    return 0;
}

// kpr_planar_probe -- one-column GEMV kernels for the 4-bit 32-weight types (Q4_0, IQ4_NL) on a planar copy
// of the weights (per row: the 16-byte nibble blocks, then the f16 scales; the same bytes as GGUF), each
// thread owning one 32-weight block position of every row with its quantized activations in registers,
// measured against generic_cuda's call (launch_gemv_nc: the q8_1 quantizer and the row kernel, or the tile
// kernel where its rules take it) in the same process, with the results compared. No provider uses these
// kernels (fourteenth session; docs/benchmarks.md, "The planar probe"):
//   ldg         the weights loaded into registers (two batches of 4 rows in flight, the first two before
//               the dependency wait), the activations quantized by every thread itself: one kernel per call
//   ldg pf2     the same with bulk L2 prefetches of the next two batches before the dependency wait
//   q + ldg     generic_cuda's q8_1 quantizer launched first, the kernel reading its planes (two kernels)
//   ring        each thread copying its words into its own shared-memory slots (cp.async), a ring of
//               NB batches of R rows (planar_probe_kernels.cuh); "native": the same on GGUF's own layout
//   no dot      the dot products replaced by a byte of each word (the structure's own cost; wrong results)
// Graph-replayed calls (200, median of 5 replays), weight copies rotated over >= 1 GiB, fractions of a
// 2 GiB streaming read measured in the same run.
//
//   kpr_planar_probe        (needs a GPU of compute capability 9.0)
#include "bench_timing.cuh"
#include "kpr_cuda_gemv.cuh"
#include "planar_probe_kernels.cuh"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace kpr::cuda;

namespace {

template <bool NL, int BPT, int R, int NB, int MODE, bool NATIVE = false>
cudaError_t launch_v(const uint8_t *w, uint64_t rb, uint32_t rows, uint32_t nb, const float *x, float *y, uint32_t sms,
                     uint32_t optin, cudaStream_t s) {
    const uint32_t T = (nb + 32 * BPT - 1) / (32 * BPT) * 32;
    if (T > 512) return cudaErrorNotSupported;
    const uint32_t tpb = 512 / T, teams = sms * tpb;
    const uint32_t cap = ((rows + teams - 1) / teams + R - 1) / R * R;
    const size_t smem = planar_smem_bytes<R, NB>(T, tpb, cap, rb);
    if (smem > optin) return cudaErrorNotSupported;
    auto k = planar_gemv_q4<NL, BPT, R, NB, MODE, NATIVE>;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    PlanarArgs a{w, rb, rows, nb, T, cap, x, y};
    return launch_pdl(k, dim3(sms), dim3(tpb * T), smem, true, s, a);
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

// The planar GEMV with the weights loaded into registers (two batches of R rows in flight), no ring. XQ: the
// activations read from the q8_1 planes xq (generic_cuda's quantizer ran before), else quantized here.
template <bool NL, int R, int MODE, int PF = 0, bool XQ = false>
__global__ void __launch_bounds__(512, 1) planar_ldg(const PlanarArgs a, const ActQ8 xq) {
    extern __shared__ float part0[];
    constexpr int LR = R == 8 ? 3 : R == 4 ? 2 : R == 2 ? 1 : 0;
    const uint32_t T = a.T, tid = threadIdx.x, lane = tid & 31u;
    const uint32_t tpb = blockDim.x / T, tm = tid / T, tt = tid % T, wpt = T / 32, wt = tt / 32;
    const uint32_t teams = gridDim.x * tpb, g = blockIdx.x * tpb + tm;
    const uint32_t n_rows = g < a.rows ? (a.rows - g + teams - 1) / teams : 0;
    const uint32_t nbat = (n_rows + R - 1) / R;
    float *part = part0 + size_t(tm) * a.cap * wpt;
    const bool has = tt < a.nb;
    const uint64_t rstride = uint64_t(teams) * a.rb;
    const uint8_t *src = a.w + uint64_t(g) * a.rb + 16 * tt;
    const int64_t sdelta = int64_t(16) * a.nb - 14 * int64_t(tt); // this thread's scale, from its word
    uint32_t next_row = g;
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
    load(qa, da);
    load(qb, db);
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
        } else if (has) {
            quantize32(a.x + 32 * uint64_t(tt), xw, dx, sum);
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) xw[i] = 0;
        }
        c0 = -8 * sum;
        if constexpr (NL) {
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
    }
    auto compute = [&](uint32_t k, const uint4 (&q4)[R], const uint32_t (&dd)[R]) {
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint32_t q[4] = {q4[r].x, q4[r].y, q4[r].z, q4[r].w};
            const float d = f16_to_float(static_cast<uint16_t>(dd[r]));
            const int s = dot_q4_block<NL, MODE>(q, xw, xn, c0);
            acc[r] = __fmul_rn(static_cast<float>(s), __fmul_rn(d, dx));
        }
        const float v = reduce_scatter_rows<R>(acc, lane);
        if ((lane & ((16u >> LR) * 2 - 1)) == 0) part[(k * R + ((lane >> (5 - LR)) & (R - 1))) * wpt + wt] = v;
    };
    for (uint32_t k = 0; k < nbat; k += 2) {
        compute(k, qa, da);
        load(qa, da);
        if (k + 1 >= nbat) break;
        compute(k + 1, qb, db);
        load(qb, db);
    }
    __syncthreads();
    store_row_sums(part0, a, tpb, wpt, teams);
}

ActQ8 g_v{}; // the q8_1 planes of the current shape's activations (the XQ variants)
template <bool NL, int R, int MODE, int PF = 0, bool XQ = false>
cudaError_t launch_ldg(const uint8_t *w, uint64_t rb, uint32_t rows, uint32_t nb, const float *x, float *y, uint32_t sms,
                       uint32_t, cudaStream_t s) {
    if (XQ) {
        const cudaError_t e = launch_quantize_act_q8_1(x, size_t(nb) * 32, g_v, true, s);
        if (e != cudaSuccess) return e;
    }
    const uint32_t T = (nb + 31) / 32 * 32;
    if (T > 512) return cudaErrorNotSupported;
    const uint32_t tpb = 512 / T, teams = sms * tpb;
    const uint32_t cap = ((rows + teams - 1) / teams + 2 * R - 1) / (2 * R) * (2 * R);
    const size_t smem = size_t(tpb) * cap * (T / 32) * 4;
    auto k = planar_ldg<NL, R, MODE, PF, XQ>;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    PlanarArgs a{w, rb, rows, nb, T, cap, x, y};
    return launch_pdl(k, dim3(sms), dim3(tpb * T), smem, true, s, a, g_v);
}

cudaStream_t g_s;

} // namespace

int main() {
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

    struct Shape { uint32_t rows, cols; };
    for (Shape sh : {Shape{4096, 14336}, Shape{14336, 4096}, Shape{4096, 4096}, Shape{5120, 13824}, Shape{2048, 8192}}) {
        const uint32_t rows = sh.rows, cols = sh.cols, nb = cols / 32;
        const uint64_t rb = uint64_t(nb) * 18, ws = rb * rows;
        const size_t copies = (size_t(1) << 30) / ws + 1;
        float *xf, *y0, *y1;
        void *scr;
        PROBE_CK(cudaMalloc(&xf, cols * 4));
        PROBE_CK(cudaMalloc(&y0, rows * 4));
        PROBE_CK(cudaMalloc(&y1, rows * 4));
        const size_t scr_bytes = std::max(act_q8_bytes(1, cols), act_tiles_bytes(1, cols, true));
        PROBE_CK(cudaMalloc(&scr, scr_bytes));
        kpr::bench::fill_finite_halves<<<64, 256, 0, g_s>>>(reinterpret_cast<uint32_t *>(xf), cols, 3);
        for (size_t c = 0; c < copies; ++c)
            planar_repack_q4<<<(rows * nb + 255) / 256, 256, 0, g_s>>>(buf + c * ws, pbuf + c * ws, rb, rows, nb);
        PROBE_CK(cudaStreamSynchronize(g_s));
        const ActQ8 v = act_q8_view(scr, 1, cols);
        g_v = v;
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
            a.xq_bytes = scr_bytes;
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
            struct V {
                const char *name;
                cudaError_t (*fn)(const uint8_t *, uint64_t, uint32_t, uint32_t, const float *, float *, uint32_t,
                                  uint32_t, cudaStream_t);
                bool native = false;
            };
            const V vq[] = {
                {"ldg", launch_ldg<false, 4, 0>},
                {"ldg pf2", launch_ldg<false, 4, 0, 2>},
                {"q + ldg", launch_ldg<false, 4, 0, 0, true>},
                {"ldg no dot", launch_ldg<false, 4, 1>},
                {"ring R4x2", launch_v<false, 1, 4, 2, 0>},
                {"ring R4x3", launch_v<false, 1, 4, 3, 0>},
                {"native ring R4x2", launch_v<false, 1, 4, 2, 0, true>, true},
            };
            const V vn[] = {
                {"ldg", launch_ldg<true, 4, 0>},
                {"q + ldg", launch_ldg<true, 4, 0, 0, true>},
                {"ring R4x2", launch_v<true, 1, 4, 2, 0>},
                {"native ring R4x2", launch_v<true, 1, 4, 2, 0, true>, true},
            };
            const V *vs = nl ? vn : vq;
            const int nv = nl ? int(sizeof(vn) / sizeof(vn[0])) : int(sizeof(vq) / sizeof(vq[0]));
            for (int rep = 0; rep < 2; ++rep) {
                const double tb = nl ? kpr::bench::replay_us(g_s, 200, [&](int i) { base(TIQ4_NL{}, i, y0); })
                                     : kpr::bench::replay_us(g_s, 200, [&](int i) { base(TQ4_0{}, i, y0); });
                std::printf("%-6s %5u x %5u: committed %.2f us (%.3f)", tn, rows, cols, tb, frac(tb));
                for (int k = 0; k < nv; ++k) {
                    const V &vv = vs[k];
                    if (vv.fn(vv.native ? buf : pbuf, rb, rows, nb, xf, y1, sms, optin, g_s) != cudaSuccess) {
                        cudaGetLastError();
                        std::printf(" | %s n/a", vv.name);
                        continue;
                    }
                    const double t = kpr::bench::replay_us(g_s, 200, [&](int i) { vv.fn((vv.native ? buf : pbuf) + (i % copies) * ws, rb, rows, nb, xf, y1, sms, optin, g_s); });
                    std::printf(" | %s %.2f (%.3f)", vv.name, t, frac(t));
                }
                std::printf("\n");
            }
            PROBE_CK(nl ? base(TIQ4_NL{}, 0, y0) : base(TQ4_0{}, 0, y0));
            for (int k = 0; k < nv; ++k) {
                if (std::strstr(vs[k].name, "no dot")) continue;
                cudaMemset(y1, 0xff, rows * 4);
                const cudaError_t e = vs[k].fn(vs[k].native ? buf : pbuf, rb, rows, nb, xf, y1, sms, optin, g_s);
                if (e == cudaErrorNotSupported) continue;
                char what[64];
                std::snprintf(what, sizeof(what), "%s %s", tn, vs[k].name);
                check(what, e);
            }
        }
        cudaFree(xf);
        cudaFree(y0);
        cudaFree(y1);
        cudaFree(scr);
    }
    return 0;
}

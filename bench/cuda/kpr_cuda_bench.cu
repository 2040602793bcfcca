// kpr_cuda_bench -- GEMV bandwidth of the CUDA providers, as a fraction of the device's read bandwidth
// measured in the same run.
//
// Per provider, weight type and ncols: weight copies are rotated so that at least 1 GiB is in rotation
// (every call reads device memory, not L2), each copy prepared once; one timed call is a full
// provider run (activation quantization included), timed with CUDA events over many back-to-back
// calls; the median of 7 repetitions is reported. GB/s counts the weight bytes a call must read
// (grouped: the distinct experts the ids select). The read bandwidth is a streaming 16-byte-load
// reduction over 4 GiB, the median of 7.
//
//   kpr_cuda_bench [--providers generic_cuda,sm60_q8,iq_stage_tables] [--types q8_0,q4_0,...]
//                  [--ncols 1,2,4,8] [--shapes 4096x14336,14336x4096] [--no-moe] [--breakdown]
//                  [--tile-vs-row] [--planar] [--ab OPTION=A,B [--with OPTION=V]] [--copies N]
// Prints a markdown table. --tile-vs-row: for the types with a tensor-core tile kernel, it against the
// row kernels (whole calls, the --types / --shapes / --ncols given), and mma_serves's pick; a type without
// one gets a row that says so.
// --ab OPTION=A,B: generic_cuda with its option OPTION = A and = B (and --with's option in both),
// alternating twice per type, shape and ncols (the --types / --shapes / --ncols given), and what the offer
// says with B. --planar: --ab planar_weights=false,true.
// --copies N: N weight copies in rotation instead of enough for 1 GiB. With 1, a weight that fits in L2 stays
// there, so the time is the call's compute side (decode, issue, latency), not its bandwidth: an A/B of two
// builds' instruction cost on a card whose DRAM would hide it. The fraction column then reads above 1 or
// near it and means nothing; the header line says so. (--breakdown keeps its own 1 GiB rotation.)
#include "../../tests/gpu/harness.hpp"

#include "bench_timing.cuh"
#include "kpr_cuda_gemv.cuh" // --breakdown: the shared kernels, launched directly

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

using namespace kpr::gputest;

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        p[i] = x;
    }
}

// Access-pattern probes for the GEMV design: every warp streams whole rows of `row_bytes` (rows spread
// over the matrix, as a warp-per-row GEMV does) vs CTAs splitting each row among their warps.
__global__ void read_rows_kernel(const uint8_t *__restrict__ p, uint32_t rows, uint32_t row_bytes, uint32_t *out) {
    const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    const uint32_t nw = gridDim.x * blockDim.x / 32;
    uint32_t acc = 0;
    for (uint32_t r = warp; r < rows; r += nw) {
        const uint4 *q = reinterpret_cast<const uint4 *>(p + uint64_t(r) * row_bytes);
        const uint32_t n = row_bytes / 16;
#pragma unroll 4
        for (uint32_t i = lane; i < n; i += 32) {
            const uint4 v = __ldg(q + i);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    }
    if (acc == 0x12345678u) out[0] = acc;
}
__global__ void read_rows_split_kernel(const uint8_t *__restrict__ p, uint32_t rows, uint32_t row_bytes, uint32_t *out) {
    // a block per row at a time, its threads cover the row together; blocks walk rows in order
    uint32_t acc = 0;
    for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const uint4 *q = reinterpret_cast<const uint4 *>(p + uint64_t(r) * row_bytes);
        const uint32_t n = row_bytes / 16;
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
            const uint4 v = __ldg(q + i);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    }
    if (acc == 0x12345678u) out[0] = acc;
}

using kpr::bench::median;

static double measure_read_bw(cudaStream_t s) {
    const size_t bytes = size_t(4) << 30;
    uint4 *buf;
    uint32_t *out;
    KPR_CU(cudaMalloc(&buf, bytes));
    KPR_CU(cudaMalloc(&out, 4));
    fill_kernel<<<4096, 256, 0, s>>>(reinterpret_cast<uint32_t *>(buf), bytes / 4, 7);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const double gbs = kpr::bench::measure_read_bandwidth(s, reinterpret_cast<const uint8_t *>(buf), bytes, sms, out);
    cudaFree(buf);
    cudaFree(out);
    return gbs;
}

struct BenchCase {
    std::string provider;
    uint32_t type;
    uint64_t rows, cols;
    uint32_t ncols;
    bool grouped;
    uint32_t n_experts, n_used;
    std::vector<kpr_option_value> options;
};

static uint32_t g_copies = 0; // --copies N; 0: enough copies for 1 GiB

struct BenchResult {
    bool ok = false;
    std::string note;
    double us = 0, gbs = 0, stream_us = 0;
    uint64_t bytes = 0;
    uint32_t copies = 0;
    std::string reason; // the offer's reason
};

static kpr_op_desc bench_op(const BenchCase &bc) {
    kpr_op_desc op{};
    op.struct_size = sizeof(op);
    op.kind = bc.grouped ? KPR_OP_GEMV_GROUPED : KPR_OP_GEMV;
    op.weight_type = bc.type;
    op.ncols = bc.ncols;
    op.rows = bc.rows;
    op.cols = bc.cols;
    op.n_experts = bc.grouped ? bc.n_experts : 1;
    op.n_used = bc.grouped ? bc.n_used : 1;
    op.x_slots = 1;
    return op;
}

// One case through the provider (query, prepare, run). query_only: the offer alone (its reason in
// BenchResult::reason, or why it declined in note).
static BenchResult bench(Provider &p, const BenchCase &bc, const kpr_device_desc &dev, cudaStream_t s,
                         bool query_only = false) {
    BenchResult br;
    const TypeInfo *ti = tinfo(bc.type);
    const kpr_op_desc op = bench_op(bc);
    auto opts = p.options(bc.options.data(), static_cast<uint32_t>(bc.options.size()));
    kpr_option_set os{sizeof(os), static_cast<uint32_t>(opts.size()), opts.data()};
    kpr_offer off{};
    off.struct_size = sizeof(off);
    kpr_error err{sizeof(err), {0}};
    if (p.t->query(p.state, &op, &dev, &os, &off, &err) != KPR_OK || !off.accepted) {
        br.note = std::string("declined: ") + off.reason + err.message;
        return br;
    }
    br.reason = off.reason;
    if (query_only) {
        br.ok = true;
        return br;
    }
    const uint64_t rb = bc.cols / ti->qk * ti->bytes;
    const uint64_t wbytes = uint64_t(op.n_experts) * bc.rows * rb;
    const uint32_t copies = g_copies != 0 ? g_copies
                                          : static_cast<uint32_t>(
                                                std::max<uint64_t>(2, ((uint64_t(1) << 30) + wbytes - 1) / wbytes));
    std::vector<uint8_t> hw(wbytes);
    fill_blocks(bc.type, 42 + bc.type, hw.data(), uint64_t(op.n_experts) * bc.rows * bc.cols);
    const uint64_t stride = (wbytes + 255) / 256 * 256;
    uint8_t *dw;
    KPR_CU(cudaMalloc(&dw, stride * copies));
    KPR_CU(cudaMemcpy(dw, hw.data(), wbytes, cudaMemcpyHostToDevice));
    for (uint32_t c = 1; c < copies; ++c) KPR_CU(cudaMemcpy(dw + c * stride, dw, wbytes, cudaMemcpyDeviceToDevice));
    std::vector<float> hx(size_t(bc.ncols) * bc.cols);
    Rng r(5);
    for (auto &v : hx) v = r.sym();
    float *dx, *dy;
    int32_t *dids;
    KPR_CU(cudaMalloc(&dx, hx.size() * 4));
    KPR_CU(cudaMalloc(&dy, size_t(bc.ncols) * op.n_used * bc.rows * 4));
    KPR_CU(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int32_t> ids(size_t(bc.ncols) * op.n_used);
    std::vector<int> used(op.n_experts, 0);
    for (uint32_t j = 0; j < bc.ncols; ++j) { // distinct experts within a column, random across columns
        std::vector<int32_t> pick;
        while (pick.size() < op.n_used) {
            const int32_t e = static_cast<int32_t>(r.next() % op.n_experts);
            if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
        }
        for (uint32_t u = 0; u < op.n_used; ++u) ids[j * op.n_used + u] = pick[u];
    }
    uint64_t distinct = 0;
    for (auto e : ids)
        if (!used[e]++) ++distinct;
    KPR_CU(cudaMalloc(&dids, ids.size() * 4));
    KPR_CU(cudaMemcpy(dids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    br.bytes = bc.grouped ? distinct * bc.rows * rb : wbytes;
    br.copies = copies;

    std::vector<kpr_prepared *> preps(copies, nullptr);
    for (uint32_t c = 0; c < copies; ++c) {
        kpr_weights wt{sizeof(wt), 0, dw + c * stride, wbytes, 0xB000ull + c};
        if (p.t->prepare(p.state, &op, &dev, &os, &wt, &preps[c], &err) != KPR_OK) {
            br.note = std::string("prepare: ") + err.message;
            for (auto *pp : preps) p.t->release(p.state, pp);
            cudaFree(dw);
            return br;
        }
    }
    kpr_run_args ra{sizeof(ra), bc.ncols, dx, dy, bc.grouped ? dids : nullptr, s};
    for (uint32_t c = 0; c < copies; ++c) p.t->run(p.state, preps[c], &ra, &err); // warm up
    KPR_CU(cudaStreamSynchronize(s));
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    const uint32_t iters = std::max<uint32_t>(copies * 4, 200);
    std::vector<double> us, gus;
    bool fail = false;
    // (1) calls launched from the host one after another
    for (int rep = 0; rep < 7 && !fail; ++rep) {
        cudaEventRecord(a, s);
        for (uint32_t i = 0; i < iters; ++i)
            if (p.t->run(p.state, preps[i % copies], &ra, &err) != KPR_OK) {
                fail = true;
                break;
            }
        cudaEventRecord(b, s);
        KPR_CU(cudaEventSynchronize(b));
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        us.push_back(ms * 1e3 / iters);
    }
    // (2) the same calls captured once into a CUDA graph and replayed: device time without the host's
    // launch cost (the kernel time the targets are about)
    if (!fail) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        KPR_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (uint32_t i = 0; i < iters; ++i)
            if (p.t->run(p.state, preps[i % copies], &ra, &err) != KPR_OK) fail = true;
        KPR_CU(cudaStreamEndCapture(s, &g));
        if (!fail) {
            KPR_CU(cudaGraphInstantiate(&ge, g, 0));
            KPR_CU(cudaGraphLaunch(ge, s));
            for (int rep = 0; rep < 7; ++rep) {
                cudaEventRecord(a, s);
                KPR_CU(cudaGraphLaunch(ge, s));
                cudaEventRecord(b, s);
                KPR_CU(cudaEventSynchronize(b));
                float ms;
                cudaEventElapsedTime(&ms, a, b);
                gus.push_back(ms * 1e3 / iters);
            }
            cudaGraphExecDestroy(ge);
        }
        cudaGraphDestroy(g);
    }
    cudaError_t ce = cudaGetLastError();
    for (auto *pp : preps) p.t->release(p.state, pp);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dids);
    if (fail || ce != cudaSuccess) {
        br.note = std::string("run: ") + err.message + cudaGetErrorString(ce);
        return br;
    }
    br.stream_us = median(us);
    br.us = median(gus);
    br.gbs = br.bytes / (br.us * 1e-6) / 1e9;
    br.ok = true;
    return br;
}

// --breakdown: where the time of one generic_cuda call goes, for the 4096x14336 weight at 1 and 8
// columns: the activation quantizer alone, the GEMV kernel alone (activations already quantized), and
// both back to back (what a call does). Graph-replayed, 1 GiB of weights in rotation.
template <class T>
static void breakdown(const char *tname, double bw, cudaStream_t s) {
    const uint32_t type = T::TYPE;
    const TypeInfo *ti = tinfo(type);
    const uint64_t rows = 4096, cols = 14336, rb = cols / ti->qk * ti->bytes, wbytes = rows * rb;
    const uint32_t copies = static_cast<uint32_t>((uint64_t(1) << 30) / wbytes + 1);
    std::vector<uint8_t> hw(wbytes);
    fill_blocks(type, 3, hw.data(), rows * cols);
    uint8_t *dw;
    KPR_CU(cudaMalloc(&dw, wbytes * copies));
    for (uint32_t c = 0; c < copies; ++c) KPR_CU(cudaMemcpy(dw + c * wbytes, hw.data(), wbytes, cudaMemcpyHostToDevice));
    for (uint32_t nc : {1u, 8u}) {
        std::vector<float> hx(nc * cols);
        Rng r(9);
        for (auto &v : hx) v = r.sym();
        float *dx, *dy;
        void *scratch;
        KPR_CU(cudaMalloc(&dx, hx.size() * 4));
        KPR_CU(cudaMalloc(&dy, nc * rows * 4));
        KPR_CU(cudaMalloc(&scratch, kpr::cuda::act_q8_bytes(nc, cols)));
        KPR_CU(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        const kpr::cuda::ActQ8 v = kpr::cuda::act_q8_view(scratch, nc, cols);
        const size_t n = size_t(nc) * cols;
        auto quant = [&] {
            kpr::cuda::launch_quantize_act_q8_1(dx, n, v, false, s,
                                                kpr::cuda::act_nibble_order(T::TYPE, static_cast<int>(nc)));
        };
        int sms = 0, optin = 0, per_sm = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
        auto args = [&](uint32_t c) {
            kpr::cuda::GemvArgs a{};
            a.w = dw + uint64_t(c) * wbytes;
            a.row_bytes = rb;
            a.expert_bytes = wbytes;
            a.rows = rows;
            a.nb = static_cast<uint32_t>(cols / ti->qk);
            a.n_used = a.x_slots = a.n_experts = 1;
            a.aligned = 1;
            a.x.q = v.q;
            a.x.d = v.d;
            a.x.s = v.s;
            a.x.cols = static_cast<uint32_t>(cols);
            a.y = dy;
            a.sms = static_cast<uint32_t>(sms);
            a.smem_optin = static_cast<uint32_t>(optin);
            a.smem_sm = static_cast<uint32_t>(per_sm);
            return a;
        };
        auto gemv = [&](uint32_t c, bool pdl) { // the row kernel, x already quantized
            kpr::cuda::launch_gemv_nc<T, kpr::cuda::TabGlobal>(args(c), nc, 1, pdl, s);
        };
        auto dispatched = [&](uint32_t c, bool with_quantizer) { // what a generic_cuda call launches on 8.0+
            kpr::cuda::GemvArgs a = args(c);
            a.sm80 = 1;
            if (with_quantizer) {
                a.xf = dx;
                a.xq_n = n;
            }
            kpr::cuda::launch_gemv_nc<T, kpr::cuda::TabGlobal>(a, nc, 1, true, s);
        };
        auto time_graph = [&](auto body) { // 200 calls over the rotated copies, graph-replayed
            return kpr::bench::replay_us(s, 200, [&](uint32_t i) { body(i % copies); });
        };
        const double tq = time_graph([&](uint32_t) { quant(); });
        const double tg = time_graph([&](uint32_t c) { gemv(c, false); });
        const double tb = time_graph([&](uint32_t c) { quant(); gemv(c, false); });
        const double tp = time_graph([&](uint32_t c) { quant(); gemv(c, true); });
        std::printf("breakdown %s n%u: quantize %.1f us, gemv alone %.1f us (%.2f of bw), both %.1f us, both with PDL "
                    "%.1f us; floor at bw %.1f us\n",
                    tname, nc, tq, tg, wbytes / (tg * 1e-6) / 1e9 / bw, tb, tp, wbytes / bw / 1e3);
        if (nc == 1) { // the row kernel with two rows per warp at one column (the activation loads halve)
            const double t2 = time_graph([&](uint32_t c) { kpr::cuda::launch_gemv<T, 1, kpr::cuda::TabGlobal, 2>(args(c), 1, false, s); });
            const double t2p = time_graph([&](uint32_t c) {
                quant();
                kpr::cuda::launch_gemv<T, 1, kpr::cuda::TabGlobal, 2>(args(c), 1, true, s);
            });
            std::printf("2 rows    %s n1: gemv alone %.1f us (%.2f of bw), with the quantizer and PDL %.1f us (%.2f of bw)\n",
                        tname, t2, wbytes / (t2 * 1e-6) / 1e9 / bw, t2p, wbytes / (t2p * 1e-6) / 1e9 / bw);
        }
        if constexpr (T::QK == 256) {
            if (nc >= 3) {
                const double tfa = time_graph([&](uint32_t c) { dispatched(c, false); });
                const double tfc = time_graph([&](uint32_t c) { dispatched(c, true); });
                std::printf("4-row     %s n%u: kernel alone (x quantized before) %.1f us (%.2f of bw); with the quantizer %.1f "
                            "us (%.2f of bw)\n",
                            tname, nc, tfa, wbytes / (tfa * 1e-6) / 1e9 / bw, tfc, wbytes / (tfc * 1e-6) / 1e9 / bw);
                if constexpr (T::TYPE == KPR_TYPE_IQ3_XXS || T::TYPE == KPR_TYPE_IQ3_S) {
                    const double tt = time_graph([&](uint32_t c) {
                        kpr::cuda::GemvArgs a = args(c);
                        a.xf = dx;
                        a.xq_n = n;
                        kpr::cuda::launch_quad<T, 8, kpr::cuda::TabGlobal>(a, true, s);
                    });
                    std::printf("4-row     %s n8 through launch_quad directly (TabGlobal): with the quantizer %.1f us (%.2f of bw)\n",
                                tname, tt, wbytes / (tt * 1e-6) / 1e9 / bw);
                }
            }
        }
        std::fflush(stdout);
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(scratch);
    }
    cudaFree(dw);
}

static std::vector<std::string> split(const std::string &s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string t;
    while (std::getline(ss, t, ','))
        if (!t.empty()) v.push_back(t);
    return v;
}

// The weight type named n (kpr_cuda_bench's types), or 999.
static uint32_t type_id(const std::string &n) {
    for (uint32_t id : {0u, 1u, 2u, 3u, 6u, 7u, 8u, 10u, 11u, 12u, 13u, 14u, 18u, 20u, 21u, 23u, 30u})
        if (n == tinfo(id)->name) return id;
    return 999;
}

int main(int argc, char **argv) {
    std::vector<std::string> providers = {"generic_cuda", "sm60_q8", "iq_stage_tables"};
    std::vector<std::string> types = {"q8_0", "q4_0", "q4_K", "iq4_nl", "iq3_xxs", "iq3_s"};
    std::vector<uint32_t> ncols = {1, 2, 4, 8};
    std::vector<std::pair<uint32_t, uint32_t>> shapes = {{4096, 14336}}; // rows x cols
    bool moe = true, breakdown_only = false, tile_only = false;
    std::string ab, with; // --ab OPTION=A,B, --with OPTION=V
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--providers" && i + 1 < argc) providers = split(argv[++i]);
        else if (a == "--types" && i + 1 < argc) types = split(argv[++i]);
        else if (a == "--ncols" && i + 1 < argc) {
            ncols.clear();
            for (auto &t : split(argv[++i])) {
                unsigned n = 0;
                char extra = 0;
                if (std::sscanf(t.c_str(), "%u%c", &n, &extra) != 1 || n < 1 || n > 8) {
                    std::fprintf(stderr, "--ncols: '%s' is not a column count from 1 to 8\n", t.c_str());
                    return 2;
                }
                ncols.push_back(n);
            }
        } else if (a == "--shapes" && i + 1 < argc) {
            shapes.clear();
            for (auto &t : split(argv[++i])) {
                unsigned long r = 0, c = 0;
                char extra = 0;
                if (std::sscanf(t.c_str(), "%lux%lu%c", &r, &c, &extra) != 2 || r == 0 || c == 0 || c % 256 != 0) {
                    std::fprintf(stderr, "--shapes: '%s' is not ROWSxCOLS with COLS a multiple of 256\n", t.c_str());
                    return 2;
                }
                shapes.emplace_back(static_cast<uint32_t>(r), static_cast<uint32_t>(c));
            }
        } else if (a == "--copies" && i + 1 < argc) {
            const std::string t = argv[++i];
            char *end = nullptr;
            const unsigned long n = std::strtoul(t.c_str(), &end, 10);
            if (t.empty() || t[0] == '-' || *end != '\0' || n < 1 || n > 1024) {
                std::fprintf(stderr, "--copies: '%s' is not a copy count from 1 to 1024\n", t.c_str());
                return 2;
            }
            g_copies = static_cast<uint32_t>(n);
        } else if (a == "--no-moe") moe = false;
        else if (a == "--breakdown") breakdown_only = true;
        else if (a == "--tile-vs-row") tile_only = true;
        else if (a == "--planar") ab = "planar_weights=false,true";
        else if (a == "--ab" && i + 1 < argc) ab = argv[++i];
        else if (a == "--with" && i + 1 < argc) with = argv[++i];
        else {
            std::fprintf(stderr, "kpr_cuda_bench: unknown argument '%s' (or its value is missing); see the comment at the top "
                                 "of bench/cuda/kpr_cuda_bench.cu\n", a.c_str());
            return 2;
        }
    }
    // type names (as kpr names them: q4_K, not q4_k), --ab OPTION=A,B and --with OPTION=V, checked before any
    // GPU is needed
    for (const auto &tn : types)
        if (type_id(tn) == 999) {
            std::fprintf(stderr, "--types: unknown type '%s' (names as kpr writes them: q8_0, q4_K, iq3_xxs, ...)\n", tn.c_str());
            return 2;
        }
    std::string opt, va, vb, wn, wv;
    if (!ab.empty()) {
        const size_t eq = ab.find('='), comma = ab.find(',', eq == std::string::npos ? 0 : eq);
        if (eq == std::string::npos || eq == 0 || comma == std::string::npos) {
            std::fprintf(stderr, "--ab: '%s' is not OPTION=A,B\n", ab.c_str());
            return 2;
        }
        opt = ab.substr(0, eq), va = ab.substr(eq + 1, comma - eq - 1), vb = ab.substr(comma + 1);
    }
    if (!with.empty()) {
        const size_t weq = with.find('=');
        if (weq == std::string::npos || weq == 0) {
            std::fprintf(stderr, "--with: '%s' is not OPTION=V\n", with.c_str());
            return 2;
        }
        wn = with.substr(0, weq), wv = with.substr(weq + 1);
    }
    if (!gpu_present()) {
        std::fprintf(stderr, "no CUDA GPU\n");
        return 2;
    }
    const kpr_device_desc dev = real_device(0);
    cudaStream_t s;
    KPR_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const double bw = measure_read_bw(s);
    std::printf("device: %s (cc %d.%d, %u SMs); measured read bandwidth %.0f GB/s (streaming 16-byte loads, 4 GiB, "
                "median of 7)\n\n",
                dev.name, dev.cc_major, dev.cc_minor, dev.sm_count, bw);
    if (g_copies != 0)
        std::printf("--copies %u: %u weight copies in rotation, not 1 GiB; a weight that fits in L2 is read from there, "
                    "so the fractions below are not bandwidth figures\n\n",
                    g_copies, g_copies);
    if (!ab.empty()) {
        auto p = load_provider("generic_cuda");
        if (!p->ok()) {
            std::fprintf(stderr, "generic_cuda: %s\n", p->error.c_str());
            return 1;
        }
        std::printf("| type | shape | ncols | %s = %s (us) | = %s (us) | A / B | fraction of read bw (A, B) | offer with "
                    "B |\n",
                    opt.c_str(), va.c_str(), vb.c_str());
        std::printf("|---|---|---:|---:|---:|---:|---|---|\n");
        for (const auto &tn : types) {
            const uint32_t t = type_id(tn);
            for (const auto &shape : shapes)
                for (uint32_t nc : ncols) {
                    const auto rows = shape.first, cols = shape.second;
                    auto run = [&](const std::string &v, bool query_only = false) {
                        BenchCase bc{"generic_cuda", t, rows, cols, nc, false, 1, 1, {{opt.c_str(), v.c_str()}}};
                        if (!wn.empty()) bc.options.push_back({wn.c_str(), wv.c_str()});
                        return bench(*p, bc, dev, s, query_only);
                    };
                    const BenchResult a1 = run(va), b1 = run(vb), a2 = run(va), b2 = run(vb);
                    if (!a1.ok || !b1.ok || !a2.ok || !b2.ok) {
                        std::printf("| %s | %ux%u | %u | - | - | - | - | %s%s |\n", tn.c_str(), rows, cols, nc,
                                    a1.note.c_str(), b1.note.c_str());
                        continue;
                    }
                    const std::string reason = run(vb, true).reason;
                    const size_t at = reason.find("; ");
                    std::printf("| %s | %ux%u | %u | %.2f, %.2f | %.2f, %.2f | %.2f | %.2f, %.2f | %s |\n", tn.c_str(), rows,
                                cols, nc, a1.us, a2.us, b1.us, b2.us, (a1.us + a2.us) / (b1.us + b2.us),
                                (a1.gbs + a2.gbs) / 2 / bw, (b1.gbs + b2.gbs) / 2 / bw,
                                at == std::string::npos ? "-" : reason.substr(at + 2).c_str());
                    std::fflush(stdout);
                }
        }
        return 0;
    }
    if (tile_only) {
        // generic_cuda with tile_kernel = off (the row kernels) and = on (the tensor-core tile kernel wherever
        // it fits), whole provider calls, alternating twice; "auto" says what the default picks (the offer)
        auto p = load_provider("generic_cuda");
        if (!p->ok()) {
            std::fprintf(stderr, "generic_cuda: %s\n", p->error.c_str());
            return 1;
        }
        std::printf("| type | shape | ncols | tile_kernel = off (us) | = on (us) | off / on | auto takes |\n");
        std::printf("|---|---|---:|---:|---:|---:|---|\n");
        for (const auto &tn : types) {
            const uint32_t t = type_id(tn);
            if (!kpr::cuda::on_mma_type(t, [](auto) { return true; })) { // nothing to compare: said, not skipped silently
                std::printf("| %s | - | - | - | - | - | no tile kernel for this type |\n", tn.c_str());
                continue;
            }
            for (const auto &shape : shapes)
                for (uint32_t nc : ncols) {
                    const auto rows = shape.first, cols = shape.second;
                    auto run = [&](const char *mode) {
                        BenchCase bc{"generic_cuda", t, rows, cols, nc, false, 1, 1, {{"tile_kernel", mode}}};
                        return bench(*p, bc, dev, s);
                    };
                    const BenchResult off1 = run("off"), on1 = run("on"), off2 = run("off"), on2 = run("on");
                    if (!off1.ok || !on1.ok || !off2.ok || !on2.ok) {
                        std::printf("| %s | %ux%u | %u | - | - | - | %s%s |\n", tn.c_str(), rows, cols, nc, off1.note.c_str(),
                                    on1.note.c_str());
                        continue;
                    }
                    const BenchCase auto_case{"generic_cuda", t, rows, cols, nc, false, 1, 1, {}};
                    const bool tile = bench(*p, auto_case, dev, s, true).reason.find("tile kernel") != std::string::npos;
                    std::printf("| %s | %ux%u | %u | %.1f, %.1f | %.1f, %.1f | %.2f | %s |\n", tn.c_str(), rows, cols, nc,
                                off1.us, off2.us, on1.us, on2.us, (off1.us + off2.us) / (on1.us + on2.us),
                                tile ? "tile" : "row");
                    std::fflush(stdout);
                }
        }
        return 0;
    }
    if (breakdown_only) {
        // access-pattern probes over 1 GiB of 15232-byte rows (the Q8_0 4096x14336 row)
        {
            const uint32_t rb = 15232, rows = (1u << 30) / rb;
            uint8_t *buf;
            uint32_t *o;
            KPR_CU(cudaMalloc(&buf, uint64_t(rows) * rb));
            KPR_CU(cudaMalloc(&o, 4));
            fill_kernel<<<4096, 256, 0, s>>>(reinterpret_cast<uint32_t *>(buf), uint64_t(rows) * rb / 4, 3);
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            auto run = [&](const char *what, auto launch) {
                std::vector<double> t;
                for (int rep = 0; rep < 6; ++rep) {
                    cudaEventRecord(e0, s);
                    launch();
                    cudaEventRecord(e1, s);
                    KPR_CU(cudaEventSynchronize(e1));
                    float ms;
                    cudaEventElapsedTime(&ms, e0, e1);
                    if (rep) t.push_back(ms);
                }
                const double gb = uint64_t(rows) * rb / (median(t) * 1e-3) / 1e9;
                std::printf("probe %-48s %.0f GB/s (%.2f)\n", what, gb, gb / bw);
            };
            run("warp per row, 32 warps/SM", [&] { read_rows_kernel<<<132 * 8, 128, 0, s>>>(buf, rows, rb, o); });
            run("warp per row, 64 warps/SM", [&] { read_rows_kernel<<<132 * 16, 128, 0, s>>>(buf, rows, rb, o); });
            run("block of 256 per row, rows in order", [&] { read_rows_split_kernel<<<132 * 8, 256, 0, s>>>(buf, rows, rb, o); });
            run("block of 1024 per row, rows in order", [&] { read_rows_split_kernel<<<132 * 2, 1024, 0, s>>>(buf, rows, rb, o); });
            cudaFree(buf);
            cudaFree(o);
        }
        breakdown<kpr::cuda::TQ8_0>("q8_0", bw, s);
        breakdown<kpr::cuda::TQ4_0>("q4_0", bw, s);
        breakdown<kpr::cuda::TQ4_K>("q4_K", bw, s);
        breakdown<kpr::cuda::TIQ4_NL>("iq4_nl", bw, s);
        breakdown<kpr::cuda::TIQ3_XXS>("iq3_xxs", bw, s);
        breakdown<kpr::cuda::TIQ3_S>("iq3_s", bw, s);
        return 0;
    }
    std::printf("| provider | type | shape | ncols | time (us) | GB/s | fraction of read bw | host-launched (us) |\n");
    std::printf("|---|---|---|---:|---:|---:|---:|---:|\n");
    std::fflush(stdout);
    for (const auto &pn : providers) {
        auto p = load_provider(pn);
        if (!p->ok()) {
            std::printf("| %s | - | - | - | - | - | %s |\n", pn.c_str(), p->error.c_str());
            continue;
        }
        std::vector<kpr_option_value> opts;
        if (pn == "iq_stage_tables") opts.push_back({"mode", "on"});
        for (const auto &tn : types) {
            const uint32_t t = type_id(tn);
            if (pn == "sm60_q8" && t != KPR_TYPE_Q8_0) continue;
            if (pn == "iq_stage_tables" && t != KPR_TYPE_IQ3_XXS && t != KPR_TYPE_IQ3_S) continue;
            for (const auto &[rows, cols] : shapes)
                for (uint32_t nc : ncols) {
                    BenchCase bc{pn, t, rows, cols, nc, false, 1, 1, opts};
                    BenchResult r = bench(*p, bc, dev, s);
                    if (r.ok)
                        std::printf("| %s | %s | %ux%u | %u | %.1f | %.0f | %.2f | %.1f |\n", pn.c_str(), tn.c_str(), rows,
                                    cols, nc, r.us, r.gbs, r.gbs / bw, r.stream_us);
                    else
                        std::printf("| %s | %s | %ux%u | %u | - | - | %s |\n", pn.c_str(), tn.c_str(), rows, cols, nc,
                                    r.note.c_str());
                    std::fflush(stdout);
                }
            if (moe && pn != "sm60_q8") {
                for (uint32_t nc : {1u, 4u}) {
                    BenchCase bc{pn, t, 768, 2048, nc, true, 128, 8, opts};
                    BenchResult r = bench(*p, bc, dev, s);
                    if (r.ok)
                        std::printf("| %s | %s | moe 128x768x2048, 8 used | %u | %.1f | %.0f | %.2f | %.1f |\n", pn.c_str(),
                                    tn.c_str(), nc, r.us, r.gbs, r.gbs / bw, r.stream_us);
                    else
                        std::printf("| %s | %s | moe 128x768x2048, 8 used | %u | - | - | %s |\n", pn.c_str(), tn.c_str(),
                                    nc, r.note.c_str());
                    std::fflush(stdout);
                }
            }
        }
    }
    cudaStreamDestroy(s);
    return 0;
}

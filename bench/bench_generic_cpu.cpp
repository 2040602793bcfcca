// GEMV throughput of generic_cpu against the machine's own read bandwidth.
//
// The provider is loaded with dlopen + handshake (no core). Every benchmark rotates among copies of a
// 4096 x 14336 weight totalling >= 512 MiB, so each call streams its weight from DRAM, not from cache.
//
// The read bandwidth of a shared VM drifts (19-39 GB/s over minutes on the development machine), so each
// GEMV measurement is paired with read-bandwidth measurements taken in the same window: the timed GEMV
// calls run in rounds (one round = one pass over every weight copy, >= 512 MiB read), and a read pass
// (a streaming read-sum with 256-bit loads over a 512 MiB buffer, split over the same number of threads as
// the GEMV) runs before the first round, after every round, and after the last (possibly partial) round.
// Both figures are aggregated the same way: bytes read / seconds spent, over the whole benchmark.
// Counters:
//   GBps                weight bytes read per second by the GEMV calls (1e9 B/s; read passes not timed)
//   bw_GBps             read bandwidth of the interleaved read passes (same thread count, same window)
//   bw_fraction         GBps / bw_GBps: the "measured side by side" figure
//   bw_min/max_GBps     the slowest / fastest interleaved read pass (how much the machine drifted)
//   bw_start_GBps       the read bandwidth measured once at the start of the run (best of 5 passes)
//   bw_fraction_start   GBps / bw_start_GBps (the previous method's figure, kept for comparison)
//   ms_per_call         wall time of one GEMV call
//   cpu_GBps_per_thread weight bytes per CPU-second of the process during the GEMV calls (the speed of
//                       one thread while it has a core)
// Google Benchmark's Time column is the GEMV time only (manual timing: the read passes are excluded).
//
// ratio_n8_n1/<type>/threads:2 times ncols 8 against ncols 1 in the same window (alternating rounds of calls
// over every weight copy), for the ncols-8 / ncols-1 time target: counters ms_n1, ms_n8, n8_over_n1.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <sys/mman.h>
#include <time.h>

#include "provider_loader.h"
#include "read_bandwidth.hpp"
#include "ref_quant.h"

using namespace kpr_test;
using kpr_bench::Buffer;
using kpr_bench::read_pass;

namespace {

constexpr size_t kRows = 4096, kCols = 14336;
constexpr size_t kRotateBytes = 512ull << 20;

double process_cpu_seconds() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

LoadedProvider g_prov;
kpr_device_desc g_dev;
double g_bw[3] = {0, 0, 0}; // GB/s with 1 and 2 threads

void measure_bandwidth() {
    Buffer &b = kpr_bench::bandwidth_buffer();
    for (int t = 1; t <= 2; ++t) {
        double best = 0;
        for (int i = 0; i < 5; ++i) best = std::max(best, read_pass(b, t));
        g_bw[t] = best;
    }
}

void BM_read_bandwidth(benchmark::State &state) {
    const int threads = (int)state.range(0);
    const double gbps = kpr_bench::run_read_passes(state, threads);
    state.counters["GBps"] = gbps;
    state.counters["bw_fraction_start"] = gbps / g_bw[threads];
}

// ---- GEMV --------------------------------------------------------------------------------------------
struct Weights {
    uint32_t type = ~0u;
    size_t bytes = 0, copies = 0;
    std::unique_ptr<Buffer> buf;
};
Weights g_w;

const TypeDesc &desc(uint32_t type) {
    for (const TypeDesc &t : all_types())
        if (t.type == type) return t;
    std::abort();
}

Weights &weights_for(uint32_t type) {
    if (g_w.type == type) return g_w;
    g_w.buf.reset();
    const TypeDesc &t = desc(type);
    g_w.type = type;
    g_w.bytes = kRows * (kCols / t.block) * t.bytes;
    g_w.copies = (kRotateBytes + g_w.bytes - 1) / g_w.bytes + 1;
    g_w.buf = std::make_unique<Buffer>(g_w.bytes * g_w.copies);
    std::mt19937_64 rng(42 + type);
    const std::vector<uint8_t> one = random_weights(t, kRows * kCols / t.block, rng);
    for (size_t c = 0; c < g_w.copies; ++c) std::memcpy(g_w.buf->p + c * g_w.bytes, one.data(), g_w.bytes);
    return g_w;
}

// One prepared op per weight copy (empty, with the state's error set, on failure).
std::vector<kpr_prepared *> prepare_all(benchmark::State &state, Weights &w, uint32_t type, uint32_t ncols, int threads,
                                        const char *isa) {
    kpr_op_desc op{};
    op.struct_size = sizeof op;
    op.kind = KPR_OP_GEMV;
    op.weight_type = type;
    op.ncols = ncols;
    op.rows = kRows;
    op.cols = kCols;
    op.n_experts = op.n_used = op.x_slots = 1;
    const std::string thr = std::to_string(threads);
    kpr_option_value items[2] = {{"isa", isa}, {"threads", thr.c_str()}};
    kpr_option_set opts{sizeof opts, 2, items};
    std::vector<kpr_prepared *> prepared(w.copies);
    for (size_t c = 0; c < w.copies; ++c) {
        kpr_weights kw{sizeof kw, 0, w.buf->p + c * w.bytes, w.bytes, 0};
        kpr_error err{sizeof err, {0}};
        if (g_prov.table->prepare(g_prov.state, &op, &g_dev, &opts, &kw, &prepared[c], &err) != KPR_OK) {
            for (size_t i = 0; i < c; ++i) g_prov.table->release(g_prov.state, prepared[i]);
            state.SkipWithError(err.message);
            return {};
        }
    }
    return prepared;
}

void BM_gemv(benchmark::State &state) {
    const uint32_t type = (uint32_t)state.range(0);
    const uint32_t ncols = (uint32_t)state.range(1);
    const int threads = (int)state.range(2);
    const char *isa = state.range(3) == 0 ? "auto" : (state.range(3) == 1 ? "avx2" : "portable");
    Weights &w = weights_for(type);
    const std::vector<kpr_prepared *> prepared = prepare_all(state, w, type, ncols, threads, isa);
    if (prepared.empty()) return;
    std::mt19937_64 rng(7);
    std::normal_distribution<float> nd;
    std::vector<float> x(ncols * kCols), y(ncols * kRows);
    for (float &v : x) v = nd(rng);
    kpr_run_args args{sizeof args, ncols, x.data(), y.data(), nullptr, nullptr};
    kpr_error err{sizeof err, {0}};
    // Warm the thread pool and the page tables once.
    for (size_t c = 0; c < w.copies; ++c) g_prov.table->run(g_prov.state, prepared[c], &args, &err);
    // Read passes interleaved with the rounds of GEMV calls (see the header).
    Buffer &bwb = kpr_bench::bandwidth_buffer();
    double bw_bytes = 0, bw_secs = 0, bw_lo = 1e30, bw_hi = 0;
    auto bw_pass = [&] {
        const double g = read_pass(bwb, threads);
        bw_bytes += (double)(bwb.n / threads / 128 * 128 * threads);
        bw_secs += (double)(bwb.n / threads / 128 * 128 * threads) / (g * 1e9);
        bw_lo = std::min(bw_lo, g);
        bw_hi = std::max(bw_hi, g);
    };
    bw_pass();
    size_t c = 0;
    double secs = 0, cpu_secs = 0;
    double cpu0 = process_cpu_seconds();
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        g_prov.table->run(g_prov.state, prepared[c], &args, &err);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        secs += s;
        state.SetIterationTime(s);
        benchmark::DoNotOptimize(y.data());
        if (++c == w.copies) {
            c = 0;
            cpu_secs += process_cpu_seconds() - cpu0;
            bw_pass();
            cpu0 = process_cpu_seconds();
        }
    }
    if (c != 0) {
        cpu_secs += process_cpu_seconds() - cpu0;
        bw_pass();
    }
    for (kpr_prepared *p : prepared) g_prov.table->release(g_prov.state, p);
    const double gbps = (double)w.bytes * state.iterations() / secs / 1e9;
    const double bw = bw_bytes / bw_secs / 1e9;
    state.counters["GBps"] = gbps;
    state.counters["bw_GBps"] = bw;
    state.counters["bw_fraction"] = gbps / bw;
    state.counters["bw_min_GBps"] = bw_lo;
    state.counters["bw_max_GBps"] = bw_hi;
    state.counters["bw_start_GBps"] = g_bw[threads];
    state.counters["bw_fraction_start"] = gbps / g_bw[threads];
    state.counters["ms_per_call"] = secs / state.iterations() * 1e3;
    // Weight bytes per CPU-second summed over the process's threads, i.e. the speed one thread reaches
    // while it has a core: on a shared, busy machine this shows what the kernel would do on an idle one.
    state.counters["cpu_GBps_per_thread"] = (double)w.bytes * state.iterations() / cpu_secs / 1e9;
    state.SetLabel(desc(type).name);
}

// ncols 8 against ncols 1 in the same window: each iteration is one round of calls with ncols 1 on every
// weight copy and one round with ncols 8 (the order alternates between iterations, so a drift of the
// machine weighs on both alike). Counters: ms_n1, ms_n8 (mean wall time of one call) and n8_over_n1.
void BM_ratio(benchmark::State &state) {
    const uint32_t type = (uint32_t)state.range(0);
    const int threads = (int)state.range(1);
    Weights &w = weights_for(type);
    const std::vector<kpr_prepared *> p1 = prepare_all(state, w, type, 1, threads, "auto");
    if (p1.empty()) return;
    const std::vector<kpr_prepared *> p8 = prepare_all(state, w, type, 8, threads, "auto");
    if (p8.empty()) {
        for (kpr_prepared *p : p1) g_prov.table->release(g_prov.state, p);
        return;
    }
    std::mt19937_64 rng(7);
    std::normal_distribution<float> nd;
    std::vector<float> x(8 * kCols), y(8 * kRows);
    for (float &v : x) v = nd(rng);
    kpr_run_args a1{sizeof a1, 1, x.data(), y.data(), nullptr, nullptr};
    kpr_run_args a8{sizeof a8, 8, x.data(), y.data(), nullptr, nullptr};
    kpr_error err{sizeof err, {0}};
    for (size_t c = 0; c < w.copies; ++c) {
        g_prov.table->run(g_prov.state, p1[c], &a1, &err);
        g_prov.table->run(g_prov.state, p8[c], &a8, &err);
    }
    double s1 = 0, s8 = 0;
    size_t n1 = 0, n8 = 0;
    bool eight_first = false;
    auto round = [&](const std::vector<kpr_prepared *> &p, const kpr_run_args &a, double &secs, size_t &n) {
        const auto t0 = std::chrono::steady_clock::now();
        for (size_t c = 0; c < w.copies; ++c) g_prov.table->run(g_prov.state, p[c], &a, &err);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        secs += s;
        n += w.copies;
        return s;
    };
    for (auto _ : state) {
        double s = 0;
        if (eight_first) {
            s += round(p8, a8, s8, n8);
            s += round(p1, a1, s1, n1);
        } else {
            s += round(p1, a1, s1, n1);
            s += round(p8, a8, s8, n8);
        }
        eight_first = !eight_first;
        state.SetIterationTime(s);
        benchmark::DoNotOptimize(y.data());
    }
    for (kpr_prepared *p : p1) g_prov.table->release(g_prov.state, p);
    for (kpr_prepared *p : p8) g_prov.table->release(g_prov.state, p);
    state.counters["ms_n1"] = s1 / (double)n1 * 1e3;
    state.counters["ms_n8"] = s8 / (double)n8 * 1e3;
    state.counters["n8_over_n1"] = (s8 / (double)n8) / (s1 / (double)n1);
    state.counters["GBps_n1"] = (double)w.bytes * (double)n1 / s1 / 1e9;
    state.SetLabel(desc(type).name);
}

void register_all(const std::vector<uint32_t> &types, bool isa_sweep) {
    benchmark::RegisterBenchmark("read_bandwidth", BM_read_bandwidth)->Arg(1)->Arg(2)->UseManualTime()->Unit(
        benchmark::kMillisecond);
    for (uint32_t t : types)
        for (int threads : {1, 2})
            for (int nc : {1, 8})
                for (int isa : isa_sweep ? std::vector<int>{0, 1, 2} : std::vector<int>{0}) {
                    const std::string name = std::string("gemv/") + desc(t).name + "/ncols:" + std::to_string(nc) +
                                             "/threads:" + std::to_string(threads) +
                                             (isa == 0 ? "" : (isa == 1 ? "/isa:avx2" : "/isa:portable"));
                    benchmark::RegisterBenchmark(name.c_str(), BM_gemv)
                        ->Args({t, nc, threads, isa})
                        ->UseManualTime()
                        ->Unit(benchmark::kMillisecond);
                }
    for (uint32_t t : types)
        benchmark::RegisterBenchmark((std::string("ratio_n8_n1/") + desc(t).name + "/threads:2").c_str(), BM_ratio)
            ->Args({t, 2})
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
}

} // namespace

int main(int argc, char **argv) {
    if (!g_prov.load(std::string(KPR_PROVIDER_BUILD_DIR) + "/libkpr_generic_cpu.so")) {
        std::fprintf(stderr, "cannot load generic_cpu: %s\n", g_prov.error.c_str());
        return 1;
    }
    g_dev = host_cpu_device();
    g_dev.cpu_threads = std::max(1u, std::thread::hardware_concurrency());
    // --types=q8_0,q4_K,... restricts the set; --isa_sweep adds forced avx2/portable runs.
    std::vector<uint32_t> types;
    bool sweep = false;
    std::vector<char *> rest;
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.rfind("--types=", 0) == 0) {
            std::string list = a.substr(8);
            size_t pos = 0;
            while (pos <= list.size()) {
                const size_t e = std::min(list.find(',', pos), list.size());
                const std::string name = list.substr(pos, e - pos);
                for (const TypeDesc &t : all_types())
                    if (name == t.name) types.push_back(t.type);
                pos = e + 1;
            }
        } else if (a == "--isa_sweep") {
            sweep = true;
        } else {
            rest.push_back(argv[i]);
        }
    }
    if (types.empty())
        for (const TypeDesc &t : all_types()) types.push_back(t.type);
    measure_bandwidth();
    std::printf("measured read bandwidth: %.2f GB/s (1 thread), %.2f GB/s (2 threads)\n", g_bw[1], g_bw[2]);
    int rc = (int)rest.size();
    benchmark::Initialize(&rc, rest.data());
    register_all(types, sweep);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}

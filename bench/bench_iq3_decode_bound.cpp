// bench_iq3_decode_bound -- how fast can an AVX2 core merely *look up* IQ3_XXS / IQ3_S codebook entries?
//
// Issue 3 asks generic_cpu for IQ3_XXS and IQ3_S GEMV at 0.60 of the 2-thread read bandwidth. This
// program measures a lower bound on the decode cost that any AVX2 kernel pays, with none of the arithmetic
// of a dot product: per 32 weights, the eight codebook entries (4 bytes each, indexed by stored bytes)
// assembled into one vector, and for IQ3_XXS the four sign-pattern lookups (IQ3_S stores its sign bits,
// so only its 9-bit indices are assembled). The weights are random valid blocks small enough to stay in
// L2, so memory never limits; the results are xor-folded so nothing is optimised away. Reported: GB/s of
// IQ3 weight bytes per thread, and the same streaming read bandwidth the GEMV bench measures (1 and 2
// threads), so the bound can be set against what 0.60 requires: 0.60 x (2-thread read bandwidth) / 2 per
// thread. Not a ctest; see docs/benchmarks.md.
#include <benchmark/benchmark.h>
#include <kpr/ggml_blocks.h>

#include "read_bandwidth.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr size_t kRows = 32, kCols = 14336;       // 32 rows of the 4096 x 14336 weight: ~0.4 MiB, in L2
constexpr size_t kXxsBytes = 98, kSBytes = 110;   // bytes per 256-weight block
constexpr size_t kBlocks = kRows * kCols / 256;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 g(seed);
    for (auto &b : v) b = static_cast<uint8_t>(g());
    return v;
}

struct SignTable {
    uint64_t m[128];
    SignTable() {
        const uint8_t ks[128] = KPR_KSIGNS_IQ2XS_INIT;
        for (int i = 0; i < 128; ++i) {
            uint64_t v = 0;
            for (int j = 0; j < 8; ++j) v |= ((ks[i] >> j) & 1 ? 0xFFull : 0x01ull) << (8 * j);
            m[i] = v;
        }
    }
};
const SignTable kSigns;

inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Eight codebook entries as one vector: vmovd / vpinsrd from memory, the fastest way measured on this
// machine's AVX2 (generic_cpu's default, providers/generic_cpu/src/kernels_x86.inc grid8).
__attribute__((target("avx2"))) inline __m256i grid8(const uint32_t *g, uint32_t i0, uint32_t i1, uint32_t i2,
                                                     uint32_t i3, uint32_t i4, uint32_t i5, uint32_t i6, uint32_t i7) {
    __m128i lo = _mm_cvtsi32_si128((int)g[i0]), hi = _mm_cvtsi32_si128((int)g[i4]);
    lo = _mm_insert_epi32(lo, (int)g[i1], 1);
    hi = _mm_insert_epi32(hi, (int)g[i5], 1);
    lo = _mm_insert_epi32(lo, (int)g[i2], 2);
    hi = _mm_insert_epi32(hi, (int)g[i6], 2);
    lo = _mm_insert_epi32(lo, (int)g[i3], 3);
    hi = _mm_insert_epi32(hi, (int)g[i7], 3);
    return _mm256_set_m128i(hi, lo);
}

__attribute__((target("avx2"))) inline uint64_t fold(__m256i v) {
    return static_cast<uint64_t>(_mm256_extract_epi64(v, 0) ^ _mm256_extract_epi64(v, 1) ^ _mm256_extract_epi64(v, 2) ^
                                 _mm256_extract_epi64(v, 3));
}

// IQ3_XXS: grid entries and sign patterns of every 32 weights (vpinsrd), nothing else.
__attribute__((target("avx2"))) uint64_t xxs_lookups(const uint8_t *w, size_t nblocks, bool signs) {
    __m256i acc = _mm256_setzero_si256(), acc2 = _mm256_setzero_si256();
    for (size_t b = 0; b < nblocks; ++b) {
        const uint8_t *blk = w + b * kXxsBytes;
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t lo = rd32(blk + 2 + 8 * ib), hi = rd32(blk + 6 + 8 * ib);
            acc = _mm256_xor_si256(acc, grid8(kpr_iq3xxs_grid, lo & 255, (lo >> 8) & 255, (lo >> 16) & 255, lo >> 24,
                                              hi & 255, (hi >> 8) & 255, (hi >> 16) & 255, hi >> 24));
            if (signs) {
                const uint32_t aux = rd32(blk + 66 + 4 * ib);
                acc2 = _mm256_xor_si256(acc2, _mm256_set_epi64x((long long)kSigns.m[(aux >> 21) & 127],
                                                                (long long)kSigns.m[(aux >> 14) & 127],
                                                                (long long)kSigns.m[(aux >> 7) & 127],
                                                                (long long)kSigns.m[aux & 127]));
            }
        }
    }
    return fold(_mm256_xor_si256(acc, acc2));
}

// IQ3_XXS grid entries through vpgatherdd (indices widened with vpmovzxbd).
__attribute__((target("avx2"))) uint64_t xxs_gather(const uint8_t *w, size_t nblocks) {
    __m256i acc = _mm256_setzero_si256();
    for (size_t b = 0; b < nblocks; ++b) {
        const uint8_t *blk = w + b * kXxsBytes;
        for (int ib = 0; ib < 8; ++ib) {
            const __m256i idx =
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(blk + 2 + 8 * ib)));
            acc = _mm256_xor_si256(acc, _mm256_i32gather_epi32(reinterpret_cast<const int *>(kpr_iq3xxs_grid), idx, 4));
        }
    }
    return fold(acc);
}

// IQ3_S: 9-bit indices (a stored byte and one bit of qh) and their grid entries (vpinsrd), nothing else.
__attribute__((target("avx2"))) uint64_t s_lookups(const uint8_t *w, size_t nblocks) {
    __m256i acc = _mm256_setzero_si256();
    for (size_t b = 0; b < nblocks; ++b) {
        const uint8_t *blk = w + b * kSBytes;
        const uint8_t *qs = blk + 2, *qh = blk + 66;
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t h = qh[ib];
            const uint8_t *q = qs + 8 * ib;
            acc = _mm256_xor_si256(
                acc, grid8(kpr_iq3s_grid, q[0] | ((h << 8) & 256), q[1] | ((h << 7) & 256), q[2] | ((h << 6) & 256),
                           q[3] | ((h << 5) & 256), q[4] | ((h << 4) & 256), q[5] | ((h << 3) & 256),
                           q[6] | ((h << 2) & 256), q[7] | ((h << 1) & 256)));
        }
    }
    return fold(acc);
}

template <class F>
void run_lookup(benchmark::State &st, size_t block_bytes, F f) {
    const auto w = random_bytes(kBlocks * block_bytes, 1234);
    for (auto _ : st) {
        uint64_t r = f(w.data(), kBlocks);
        benchmark::DoNotOptimize(r);
    }
    st.counters["GBps"] = benchmark::Counter(static_cast<double>(st.iterations()) * kBlocks * block_bytes / 1e9,
                                             benchmark::Counter::kIsRate);
    st.counters["ns_per_32w"] =
        benchmark::Counter(static_cast<double>(st.iterations()) * kBlocks * 8 / 1e9,
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_iq3xxs_grid_and_signs_vpinsrd(benchmark::State &st) {
    run_lookup(st, kXxsBytes, [](const uint8_t *w, size_t n) { return xxs_lookups(w, n, true); });
}
void BM_iq3xxs_grid_only_vpinsrd(benchmark::State &st) {
    run_lookup(st, kXxsBytes, [](const uint8_t *w, size_t n) { return xxs_lookups(w, n, false); });
}
void BM_iq3xxs_grid_only_vpgatherdd(benchmark::State &st) { run_lookup(st, kXxsBytes, xxs_gather); }
void BM_iq3s_grid_only_vpinsrd(benchmark::State &st) { run_lookup(st, kSBytes, s_lookups); }

// Core clock: a chain of dependent adds retires one per cycle.
void BM_core_clock(benchmark::State &st) {
    constexpr uint64_t kAdds = 100000000;
    for (auto _ : st) {
        uint64_t x = 0;
        for (uint64_t i = 0; i < kAdds / 4; ++i) {
            asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
        }
        benchmark::DoNotOptimize(x);
    }
    st.counters["GHz"] = benchmark::Counter(static_cast<double>(st.iterations()) * kAdds / 1e9,
                                            benchmark::Counter::kIsRate);
}

// The streaming read bandwidth over 512 MiB, measured as bench_generic_cpu measures it (read_bandwidth.hpp).
void BM_read_bandwidth(benchmark::State &st) {
    const int threads = static_cast<int>(st.range(0));
    const double gbps = kpr_bench::run_read_passes(st, threads);
    st.counters["GBps"] = gbps;
    st.counters["GBps_per_thread"] = gbps / threads;
}

} // namespace

BENCHMARK(BM_core_clock)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_read_bandwidth)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseManualTime();
BENCHMARK(BM_iq3xxs_grid_only_vpinsrd)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_iq3xxs_grid_only_vpgatherdd)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_iq3xxs_grid_and_signs_vpinsrd)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_iq3s_grid_only_vpinsrd)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_read_bandwidth)->Arg(2)->Unit(benchmark::kMillisecond)->UseManualTime()->Name("BM_read_bandwidth_again");

BENCHMARK_MAIN();

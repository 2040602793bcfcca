// read_bandwidth.hpp -- the streaming read the CPU benchmarks take as the machine's read bandwidth:
// page-aligned buffers, a read-sum with 256-bit loads and four independent sums (scalar without AVX2),
// and one timed pass split over `threads` threads. Shared by bench_generic_cpu and bench_iq3_decode_bound
// so that both measure the same thing.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <sys/mman.h>

namespace kpr_bench {

// ---- big page-aligned buffers ------------------------------------------------------------------------
struct Buffer {
    uint8_t *p = nullptr;
    size_t n = 0;
    explicit Buffer(size_t bytes) : n(bytes) {
        void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            std::perror("mmap");
            std::exit(1);
        }
        madvise(m, bytes, MADV_HUGEPAGE);
        p = static_cast<uint8_t *>(m);
    }
    ~Buffer() { munmap(p, n); }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
};

// ---- read bandwidth ----------------------------------------------------------------------------------
inline uint64_t read_sum_scalar(const uint8_t *p, size_t n) {
    const uint64_t *q = reinterpret_cast<const uint64_t *>(p);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) {
        s0 += q[i];
        s1 += q[i + 1];
        s2 += q[i + 2];
        s3 += q[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

// 256-bit loads, four independent sums: one core issues reads as fast as the memory system allows.
__attribute__((target("avx2"))) inline uint64_t read_sum_avx2(const uint8_t *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i)));
        b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 32)));
        c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 64)));
        d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 96)));
    }
    a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    alignas(32) uint64_t t[4];
    _mm256_store_si256(reinterpret_cast<__m256i *>(t), a);
    return t[0] + t[1] + t[2] + t[3];
}

inline uint64_t read_sum(const uint8_t *p, size_t n) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    return avx2 ? read_sum_avx2(p, n) : read_sum_scalar(p, n);
}

// One pass over b with `threads` threads, each summing its own contiguous part. The threads start
// together (spin barrier); the time is from the first thread's start to the last thread's end, so thread
// creation is not counted. Returns GB/s.
inline double read_pass(const Buffer &b, int threads) {
    std::vector<std::thread> th;
    std::vector<uint64_t> sums(threads);
    using Clock = std::chrono::steady_clock;
    std::vector<Clock::time_point> t0(threads), t1(threads);
    std::atomic<int> ready{0};
    const size_t part = b.n / threads / 128 * 128;
    for (int t = 0; t < threads; ++t)
        th.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < threads) {
            }
            t0[t] = Clock::now();
            sums[t] = read_sum(b.p + t * part, part);
            t1[t] = Clock::now();
        });
    for (auto &x : th) x.join();
    const double s =
        std::chrono::duration<double>(*std::max_element(t1.begin(), t1.end()) - *std::min_element(t0.begin(), t0.end()))
            .count();
    benchmark::DoNotOptimize(sums.data());
    return (double)(part * threads) / s / 1e9;
}

// The 512 MiB buffer the read passes stream (filled once, on first use).
inline Buffer &bandwidth_buffer() {
    static Buffer b(size_t(512) << 20);
    static const bool init = [] {
        for (size_t i = 0; i < b.n; i += 8) {
            const uint64_t v = i * 0x9E3779B97F4A7C15ull;
            std::memcpy(b.p + i, &v, 8);
        }
        return true;
    }();
    (void)init;
    return b;
}

// The loop of a read-bandwidth benchmark (manual time: each iteration is one read pass over
// bandwidth_buffer()); returns GB/s over all of them.
inline double run_read_passes(benchmark::State &state, int threads) {
    Buffer &b = bandwidth_buffer();
    double secs = 0, bytes = 0;
    for (auto _ : state) {
        const double g = read_pass(b, threads);
        const double n = static_cast<double>(b.n / threads / 128 * 128 * threads);
        bytes += n;
        secs += n / (g * 1e9);
        state.SetIterationTime(n / (g * 1e9));
    }
    return bytes / secs / 1e9;
}

} // namespace kpr_bench

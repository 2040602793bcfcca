// Concurrency: 8 threads plan and run a mix of ops (several weight types and column counts, on weights
// prepared once and shared) for a few seconds; every output must equal, bit for bit, what one thread
// computed first. Clean under ThreadSanitizer (scripts/test-sanitizers runs it in the tsan build).
// KPR_STRESS_SECONDS overrides the duration (default 3).
#include "test_support.hpp"

#include <kpr/formats.hpp>
#include <kpr/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

using namespace kpr_test;

namespace {

struct Job {
    kpr_op_desc op;
    std::vector<uint8_t> weights;
    std::vector<float> x;
    std::shared_ptr<kpr::PreparedOp> prepared;   // shared by every thread
    std::vector<std::vector<float>> expected;    // [ncols-1]: single-threaded output for that many columns
};

} // namespace

TEST(Stress, EightThreadsMatchOneThread) {
    kpr::Runtime rt = kpr::Runtime::create(isolated_options());
    if (!rt.loaded("generic_cpu")) GTEST_SKIP() << "generic_cpu not built";
    double seconds = 3;
    if (const char *e = std::getenv("KPR_STRESS_SECONDS")) seconds = std::atof(e);

    std::vector<Job> jobs;
    uint64_t seed = 1;
    for (uint32_t type : {KPR_TYPE_Q8_0, KPR_TYPE_Q4_K, KPR_TYPE_F16, KPR_TYPE_IQ3_XXS, KPR_TYPE_Q6_K, KPR_TYPE_F32}) {
        const kpr::formats::TypeInfo *ti = kpr::formats::type_info(type);
        ASSERT_NE(ti, nullptr);
        Job j;
        j.op = kpr::gemv(type, 96, 512, 8);
        uint64_t bytes = kpr::weight_bytes(j.op);
        j.weights.resize(bytes);
        kpr::formats::fill_random_blocks(type, seed++, j.weights.data(), bytes / ti->block_bytes);
        j.x.resize(8 * 512);
        kpr::formats::fill_random_floats(seed++, j.x.data(), j.x.size());
        auto plan = rt.plan(j.op, "cpu");
        ASSERT_TRUE(plan->ok()) << plan->explain();
        j.prepared = std::make_shared<kpr::PreparedOp>(plan->prepare(j.weights.data(), bytes, seed));
        for (uint32_t n = 1; n <= 8; ++n) {
            std::vector<float> y(size_t(n) * 96);
            j.prepared->run(j.x.data(), y.data(), n);
            j.expected.push_back(y);
        }
        jobs.push_back(std::move(j));
    }

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> runs{0}, plans{0}, mismatches{0};
    std::atomic<int> errors{0};
    std::mutex first_error_mu;
    std::string first_error;
    auto worker = [&](unsigned id) {
        std::mt19937 rng(1234 + id);
        try {
            while (!stop.load(std::memory_order_relaxed)) {
                Job &j = jobs[rng() % jobs.size()];
                uint32_t n = 1 + rng() % 8;
                if (rng() % 4 == 0) {
                    // Negotiate (cached or fresh: a new row count is a new key), sometimes prepare a private op.
                    uint64_t rows = 32 * (1 + rng() % 6);
                    auto plan = rt.plan(kpr::gemv(j.op.weight_type, rows, j.op.cols, n), "cpu");
                    ++plans;
                    if (!plan->ok()) throw std::runtime_error("plan failed: " + plan->decision());
                    if (rows <= j.op.rows && rng() % 2) {
                        // The first `rows` rows of the shared weights, as their own op.
                        kpr::PreparedOp own = plan->prepare(j.weights.data(), kpr::weight_bytes(plan->op()));
                        std::vector<float> y(size_t(n) * rows);
                        own.run(j.x.data(), y.data(), n);
                    }
                }
                std::vector<float> y(size_t(n) * j.op.rows);
                j.prepared->run(j.x.data(), y.data(), n);
                ++runs;
                if (std::memcmp(y.data(), j.expected[n - 1].data(), y.size() * 4) != 0) ++mismatches;
            }
        } catch (const std::exception &e) {
            ++errors;
            std::lock_guard<std::mutex> g(first_error_mu);
            if (first_error.empty()) first_error = e.what();
        }
    };
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < 8; ++i) threads.emplace_back(worker, i);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto &t : threads) t.join();
    EXPECT_EQ(errors.load(), 0) << first_error;
    EXPECT_EQ(mismatches.load(), 0u) << "of " << runs.load() << " runs";
    EXPECT_GT(runs.load(), 8u);
    RecordProperty("runs", std::to_string(runs.load()));
    RecordProperty("plans", std::to_string(plans.load()));
    std::printf("stress: %llu runs, %llu plans, 8 threads, %.1f s\n", (unsigned long long)runs.load(),
                (unsigned long long)plans.load(), seconds);
}

// The self-test runner: it must pass a correct provider, catch a wrong one (with a message), honour the
// seed, the filter and per-case options, and run internal cases.
#include <kpr/ggml_blocks.h>
#include <kpr/runtime.hpp>
#include <kpr/selftest.hpp>

#include <gtest/gtest.h>

#include "test_support.hpp"

#include <cmath>

namespace {

using namespace kpr_test;
using Outcome = kpr::SelftestResult::Outcome;

kpr::Runtime make() { return kpr::Runtime::create(isolated_options({mock_dir("selftest")})); }

const kpr::SelftestResult *find_case(const std::vector<kpr::SelftestResult> &rs, const std::string &name) {
    for (auto &r : rs)
        if (r.case_name == name) return &r;
    return nullptr;
}

std::vector<kpr::SelftestResult> run(const kpr::Runtime &rt, uint64_t seed, const std::string &filter = "",
                                     const std::string &provider = "mock_selftest") {
    kpr::SelftestOptions o;
    o.provider = provider;
    o.seed = seed;
    o.filter = filter;
    return kpr::run_selftests(rt, o);
}

TEST(SelftestRunner, PassesTheCorrectCaseAndCatchesTheWrongOne) {
    auto rt = make();
    std::vector<std::string> progress;
    kpr::SelftestOptions o;
    o.provider = "mock_selftest";
    o.seed = 42;
    auto rs = kpr::run_selftests(rt, o, [&](const kpr::SelftestResult &r) { progress.push_back(r.case_name); });
    ASSERT_EQ(rs.size(), 4u);
    EXPECT_EQ(progress.size(), 4u) << "progress is reported for each case";

    const kpr::SelftestResult *ok = find_case(rs, "f32 ok 64x256 n2");
    ASSERT_NE(ok, nullptr);
    EXPECT_EQ(ok->outcome, Outcome::Passed) << ok->message;
    EXPECT_LE(ok->error, 1e-5);
    EXPECT_EQ(ok->tolerance, 1e-5);
    EXPECT_EQ(ok->kind, "reference");
    EXPECT_EQ(ok->op, "gemv f32 64x256 ncols 2");
    EXPECT_EQ(ok->provider, "mock_selftest");
    EXPECT_EQ(ok->device, "cpu");
    EXPECT_EQ(ok->seed, 42u);

    const kpr::SelftestResult *bad = find_case(rs, "f32 wrong 48x128 n1");
    ASSERT_NE(bad, nullptr);
    EXPECT_EQ(bad->outcome, Outcome::Failed) << "the runner must catch a kernel that drops a term";
    EXPECT_GT(bad->error, 1e-5);
    EXPECT_TRUE(std::isfinite(bad->error));
    EXPECT_TRUE(contains(bad->message, "exceeds tolerance")) << bad->message;

    const kpr::SelftestResult *iok = find_case(rs, "internal ok");
    ASSERT_NE(iok, nullptr);
    EXPECT_EQ(iok->outcome, Outcome::Passed) << iok->message;
    EXPECT_EQ(iok->kind, "internal");

    const kpr::SelftestResult *ibad = find_case(rs, "internal broken");
    ASSERT_NE(ibad, nullptr);
    EXPECT_EQ(ibad->outcome, Outcome::Failed);
    EXPECT_TRUE(contains(ibad->message, "checksum 0x1234 != 0x5678")) << "the provider's own message: " << ibad->message;
}

TEST(SelftestRunner, TheSeedReproducesTheErrors) {
    auto rt = make();
    auto a = run(rt, 7, "f32"), b = run(rt, 7, "f32"), c = run(rt, 8, "f32");
    ASSERT_EQ(a.size(), 2u);
    ASSERT_EQ(b.size(), 2u);
    ASSERT_EQ(c.size(), 2u);
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].case_name, b[i].case_name);
        EXPECT_EQ(a[i].error, b[i].error) << a[i].case_name << ": same seed, same data, same error";
        EXPECT_EQ(a[i].outcome, b[i].outcome);
    }
    EXPECT_NE(a[1].error, c[1].error) << "another seed draws other data";
}

TEST(SelftestRunner, WithoutASeedOneIsDrawnAndReported) {
    auto rt = make();
    auto rs = run(rt, 0, "wrong");
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_NE(rs[0].seed, 0u);
    auto again = run(rt, rs[0].seed, "wrong");
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].error, rs[0].error) << "the reported seed reproduces the run";
}

TEST(SelftestRunner, FilterSelectsCases) {
    auto rt = make();
    auto rs = run(rt, 1, "internal");
    ASSERT_EQ(rs.size(), 2u);
    for (auto &r : rs) EXPECT_TRUE(contains(r.case_name, "internal"));
    EXPECT_TRUE(run(rt, 1, "no such case").empty());
}

TEST(SelftestRunner, CaseOptionsDoNotLeakIntoNormalUse) {
    // The wrong case runs with bug=true; plans and prepared ops must still get the default (false).
    auto rt = make();
    run(rt, 3);
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 8, 64, 1), "cpu", "mock_selftest");
    ASSERT_TRUE(plan->ok()) << plan->explain();
    auto opts = rt.options_for("mock_selftest", "cpu");
    ASSERT_EQ(opts.size(), 1u);
    EXPECT_EQ(opts[0], std::make_pair(std::string("bug"), std::string("false")));
    std::vector<float> w(8 * 64, 0.f), x(64, 1.f), y(8, -1.f);
    for (size_t r = 0; r < 8; ++r) w[r * 64 + 63] = float(r + 1);  // only the last weight of each row is set
    kpr::PreparedOp op = plan->prepare(w.data(), w.size() * 4);
    op.run(x.data(), y.data(), 1);
    for (size_t r = 0; r < 8; ++r) EXPECT_EQ(y[r], float(r + 1)) << "row " << r;
}

TEST(SelftestRunner, GenericCpuPassesItsOwnCases) {
    auto rt = kpr::Runtime::create(isolated_options());
    auto rs = run(rt, 5, "q8_0 37x", "generic_cpu");
    ASSERT_FALSE(rs.empty());
    for (auto &r : rs) {
        EXPECT_EQ(r.outcome, Outcome::Passed) << r.case_name << ": " << r.message;
        EXPECT_LE(r.error, r.tolerance) << r.case_name;
        EXPECT_EQ(r.act_rounding, "q8_0") << r.case_name;
        EXPECT_GE(r.quantized_error, 0) << r.case_name;
    }
}

TEST(SelftestRunner, EveryProviderWhenNoneIsNamed) {
    auto rt = make();
    kpr::SelftestOptions o;
    o.seed = 9;
    o.filter = "internal";  // matches mock_selftest's cases only
    auto rs = kpr::run_selftests(rt, o);
    ASSERT_EQ(rs.size(), 2u);
    EXPECT_EQ(rs[0].provider, "mock_selftest");
}

TEST(SelftestRunner, BadOptionsAreErrors) {
    kpr::RuntimeOptions ro = isolated_options({mock_dir("selftest")});
    ro.extra_devices = {*kpr::simulated_device("p100")};
    auto rt = kpr::Runtime::create(ro);
    kpr::SelftestOptions o;
    o.provider = "mock_selftset";
    EXPECT_THROW(kpr::run_selftests(rt, o), kpr::Error);
    o.provider = "mock_selftest";
    o.device = "sim:p100";
    EXPECT_THROW(kpr::run_selftests(rt, o), kpr::Error) << "simulated devices cannot run";
    o.device = "cuda:9";
    EXPECT_THROW(kpr::run_selftests(rt, o), kpr::Error);
}

} // namespace

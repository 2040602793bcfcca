// The handshake and every way a provider library can fail to load, through the real core loader and
// the mock provider libraries of tests/support. Each failure must leave the library listed as Failed,
// with its file and a reason, and everything else working.
#include <kpr/ggml_blocks.h>
#include <kpr/runtime.hpp>
#include <kpr/selftest.hpp>

#include <gtest/gtest.h>

#include "test_support.hpp"

#include <cmath>
#include <random>

namespace {

using namespace kpr_test;

kpr::Runtime make(const std::vector<fs::path> &dirs) { return kpr::Runtime::create(isolated_options(dirs)); }

bool same_file(const std::string &a, const fs::path &b) {
    std::error_code ec;
    return fs::equivalent(a, b, ec);
}

// The provider named `name` must be listed as Failed, from `file`, with a reason containing `needle`.
void expect_failed(const kpr::Runtime &rt, const std::string &name, const fs::path &file, const std::string &needle) {
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, name);
    ASSERT_NE(p, nullptr) << "no provider entry named " << name;
    EXPECT_EQ(p->state, kpr::ProviderState::Failed) << name << ": " << p->reason;
    EXPECT_TRUE(same_file(p->file, file)) << p->file << " vs " << file;
    EXPECT_TRUE(contains(p->reason, needle)) << name << " reason: '" << p->reason << "' lacks '" << needle << "'";
    EXPECT_EQ(rt.loaded(name), nullptr) << "a failed provider must not be usable";
}

// generic_cpu (from the build tree) must still be loaded and serve an op.
void expect_generic_cpu_works(const kpr::Runtime &rt) {
    auto ps = rt.providers();
    const kpr::ProviderInfo *g = find_provider(ps, "generic_cpu");
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->state, kpr::ProviderState::Loaded) << g->reason;
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 64, 256, 1), "cpu", "generic_cpu");
    EXPECT_TRUE(plan->ok()) << plan->explain();
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> v(n);
    for (auto &x : v) x = d(rng);
    return v;
}

// Runs an f32 gemv through `plan` and compares with a double reference.
void expect_f32_plan_computes(const kpr::Plan &plan) {
    const kpr_op_desc &op = plan.op();
    auto w = random_floats(op.rows * op.cols, 1), x = random_floats(op.ncols * op.cols, 2);
    std::vector<float> y(op.ncols * op.rows, NAN);
    kpr::PreparedOp p = plan.prepare(w.data(), w.size() * sizeof(float));
    p.run(x.data(), y.data(), op.ncols);
    for (uint32_t j = 0; j < op.ncols; ++j)
        for (uint64_t r = 0; r < op.rows; ++r) {
            double ref = 0;
            for (uint64_t k = 0; k < op.cols; ++k) ref += double(w[r * op.cols + k]) * x[j * op.cols + k];
            ASSERT_NEAR(y[j * op.rows + r], ref, 1e-4 * (1 + std::fabs(ref))) << "row " << r << " col " << j;
        }
}

// ---- the handshake ------------------------------------------------------------------------------

TEST(Handshake, CoreOffersItsVersionRangeAndAHost) {
    auto rt = make({mock_dir("high")});
    KprMockStats *s = mock_stats(mock_file("high", "mock_high"));
    ASSERT_NE(s, nullptr) << "the core did not load " << mock_file("high", "mock_high");
    EXPECT_GE(s->entries.load(), 1);
    EXPECT_EQ(s->offer_min.load(), KPR_MAKE_VERSION(KPR_ABI_VERSION_MAJOR, 0));
    EXPECT_EQ(s->offer_max.load(), KPR_ABI_VERSION);
    EXPECT_EQ(s->host_ok.load(), 1);
    EXPECT_GE(s->inits.load(), 1) << "init must be called before anything else";

    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, "mock_high");
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->state, kpr::ProviderState::Loaded) << p->reason;
    EXPECT_EQ(p->abi_version, KPR_ABI_VERSION);
    EXPECT_EQ(p->version, "0.1.0-mock");
    EXPECT_EQ(p->family, "mock");
    EXPECT_EQ(p->device_kind, (uint32_t)KPR_DEVICE_CPU);
    EXPECT_TRUE(contains(p->description, "offered ABI 1.0.."));
    EXPECT_TRUE(same_file(p->file, mock_file("high", "mock_high")));
}

TEST(Handshake, OlderMinorIsAcceptedAndItsShortTableRespected) {
    auto rt = make({mock_dir("oldminor")});
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, "mock_oldminor");
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(p->state, kpr::ProviderState::Loaded) << p->reason;
    EXPECT_EQ(p->abi_version, KPR_MAKE_VERSION(KPR_ABI_VERSION_MAJOR, 0));

    // It negotiates, prepares and runs through the slots its table has...
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 16, 64, 2), "cpu", "mock_oldminor");
    ASSERT_TRUE(plan->ok()) << plan->explain();
    EXPECT_EQ(plan->provider(), "mock_oldminor");
    expect_f32_plan_computes(*plan);
    // ...and the core never calls a slot past the table's struct_size (the self-test slots are poisoned).
    kpr::SelftestOptions so;
    so.provider = "mock_oldminor";
    auto results = kpr::run_selftests(rt, so);
    EXPECT_TRUE(results.empty());
    KprMockStats *s = mock_stats(mock_file("oldminor", "mock_oldminor"));
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->short_table_violations.load(), 0);
}

TEST(Handshake, NewerMinorThanTheCoreSpeaksIsRefused) {
    auto rt = make({mock_dir("newminor")});
    expect_failed(rt, "mock_newminor", mock_file("newminor", "mock_newminor"),
                  "1." + std::to_string(KPR_ABI_VERSION_MINOR + 1));
    expect_generic_cpu_works(rt);
}

class OtherMajor : public ::testing::TestWithParam<const char *> {};

TEST_P(OtherMajor, IsRefusedByNameAndFileAndTheRestWorks) {
    const std::string name = GetParam();
    const std::string variant = name.substr(5);  // mock_major2 -> major2
    const fs::path file = mock_file(variant, name);
    auto rt = make({mock_dir(variant), mock_dir("high")});
    expect_failed(rt, name, file, "2.0");
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, name);
    ASSERT_NE(p, nullptr);
    // The reason names both versions so a person knows what to rebuild.
    EXPECT_TRUE(contains(p->reason, "1.0")) << p->reason;
    EXPECT_EQ(p->abi_version, 0u) << "a refused provider has no agreed version";

    // The plan's answers carry the refusal with the provider's name and its file.
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 32, 64, 1), "cpu");
    const kpr::Answer *a = find_answer(*plan, name);
    ASSERT_NE(a, nullptr) << plan->explain();
    EXPECT_EQ(a->state, kpr::AnswerState::Failed);
    EXPECT_TRUE(contains(a->reason, file.filename().string())) << a->reason;
    EXPECT_TRUE(contains(a->reason, "2.0")) << a->reason;
    EXPECT_EQ(plan->provider(), "mock_high") << plan->explain();
    expect_generic_cpu_works(rt);
}

INSTANTIATE_TEST_SUITE_P(Handshake, OtherMajor, ::testing::Values("mock_major2", "mock_major2ok"));

// ---- loader failures ----------------------------------------------------------------------------

TEST(Loader, GarbageFileIsFailedNotFatal) {
    TempDir tmp;
    fs::path garbage = write_garbage_library(tmp.path());
    auto rt = make({tmp.path(), mock_dir("high")});
    expect_failed(rt, "garbage", garbage, "not a loadable library");
    EXPECT_NE(rt.loaded("mock_high"), nullptr);
    expect_generic_cpu_works(rt);
}

TEST(Loader, EmptyFileIsFailedNotFatal) {
    TempDir tmp;
    fs::path empty = tmp.write("libkpr_empty.so", "");
    auto rt = make({tmp.path()});
    expect_failed(rt, "empty", empty, "not a loadable library");
    expect_generic_cpu_works(rt);
}

TEST(Loader, MissingEntryPoint) {
    auto rt = make({mock_dir("noentry")});
    expect_failed(rt, "mock_noentry", mock_file("noentry", "mock_noentry"), KPR_PROVIDER_ENTRY_SYMBOL);
    expect_generic_cpu_works(rt);
}

TEST(Loader, FailingInit) {
    auto rt = make({mock_dir("initfail")});
    expect_failed(rt, "mock_initfail", mock_file("initfail", "mock_initfail"), "the mock widget is missing");
    auto ps = rt.providers();
    EXPECT_TRUE(contains(find_provider(ps, "mock_initfail")->reason, "init"));
    expect_generic_cpu_works(rt);
}

TEST(Loader, ExceptionOutOfTheEntryPoint) {
    auto rt = make({mock_dir("throw_entry")});
    expect_failed(rt, "mock_throw_entry", mock_file("throw_entry", "mock_throw_entry"), "exception");
    expect_generic_cpu_works(rt);
}

TEST(Loader, TableTooSmall) {
    auto rt = make({mock_dir("smalltable")});
    expect_failed(rt, "mock_smalltable", mock_file("smalltable", "mock_smalltable"), "too small");
    expect_generic_cpu_works(rt);
}

TEST(Loader, NameThatDiffersFromTheFile) {
    auto rt = make({mock_dir("renamed")});
    expect_failed(rt, "mock_renamed", mock_file("renamed", "mock_renamed"), "mock_other");
    EXPECT_EQ(rt.loaded("mock_other"), nullptr);
    expect_generic_cpu_works(rt);
}

TEST(Loader, DuplicateNameTheFirstFolderWins) {
    for (bool reversed : {false, true}) {
        SCOPED_TRACE(reversed ? "dup2 first" : "dup1 first");
        std::vector<fs::path> dirs = {mock_dir("dup1"), mock_dir("dup2")};
        if (reversed) std::swap(dirs[0], dirs[1]);
        auto rt = make(dirs);
        int loaded = 0, failed = 0;
        for (auto &p : rt.providers()) {
            if (p.name != "mock_dup") continue;
            if (p.state == kpr::ProviderState::Loaded) {
                ++loaded;
                EXPECT_EQ(p.version, reversed ? "2.0.0-second" : "1.0.0-first");
                EXPECT_TRUE(same_file(p.file, dirs[0] / "libkpr_mock_dup.so"));
            } else {
                ++failed;
                EXPECT_EQ(p.state, kpr::ProviderState::Failed);
                EXPECT_TRUE(same_file(p.file, dirs[1] / "libkpr_mock_dup.so"));
                EXPECT_TRUE(contains(p.reason, "duplicate")) << p.reason;
                // The reason names the file that holds the name already.
                EXPECT_TRUE(contains(p.reason, (dirs[0] / "libkpr_mock_dup.so").string())) << p.reason;
            }
        }
        EXPECT_EQ(loaded, 1);
        EXPECT_EQ(failed, 1);
        ASSERT_NE(rt.loaded("mock_dup"), nullptr);
        EXPECT_EQ(loaded_info(rt, "mock_dup")->version, reversed ? "2.0.0-second" : "1.0.0-first");
        expect_generic_cpu_works(rt);
    }
}

TEST(Loader, ExceptionInsideQueryIsAFailedAnswerNotACrash) {
    auto rt = make({mock_dir("throw_query"), mock_dir("low")});
    ASSERT_NE(rt.loaded("mock_throw"), nullptr) << "it loads fine; only its query throws";
    std::shared_ptr<const kpr::Plan> plan;
    ASSERT_NO_THROW(plan = rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 64, 256, 1), "cpu"));
    const kpr::Answer *a = find_answer(*plan, "mock_throw");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->state, kpr::AnswerState::Failed);
    EXPECT_TRUE(contains(a->reason, "exception")) << a->reason;
    EXPECT_TRUE(contains(a->reason, "mock_throw")) << a->reason;
    EXPECT_EQ(plan->provider(), "generic_cpu") << plan->explain();
    EXPECT_TRUE(contains(plan->explain(), "mock_throw")) << plan->explain();
}

TEST(Loader, EveryFailureAtOnceLeavesTheRestWorking) {
    TempDir tmp;
    fs::path garbage = write_garbage_library(tmp.path());
    struct Bad {
        std::string name;
        fs::path file;
        std::string needle;
    };
    std::vector<Bad> bad = {
        {"garbage", garbage, "not a loadable library"},
        {"mock_noentry", mock_file("noentry", "mock_noentry"), KPR_PROVIDER_ENTRY_SYMBOL},
        {"mock_major2", mock_file("major2", "mock_major2"), "2.0"},
        {"mock_initfail", mock_file("initfail", "mock_initfail"), "widget"},
        {"mock_throw_entry", mock_file("throw_entry", "mock_throw_entry"), "exception"},
        {"mock_smalltable", mock_file("smalltable", "mock_smalltable"), "too small"},
        {"mock_renamed", mock_file("renamed", "mock_renamed"), "mock_other"},
    };
    std::vector<fs::path> dirs = {tmp.path()};
    for (auto &b : bad)
        if (b.name != "garbage") dirs.push_back(b.file.parent_path());
    dirs.push_back(mock_dir("high"));
    dirs.push_back(mock_dir("dup1"));
    dirs.push_back(mock_dir("dup2"));
    auto rt = make(dirs);
    for (auto &b : bad) {
        SCOPED_TRACE(b.name);
        expect_failed(rt, b.name, b.file, b.needle);
    }
    EXPECT_NE(rt.loaded("mock_dup"), nullptr);
    ASSERT_NE(rt.loaded("mock_high"), nullptr);
    expect_generic_cpu_works(rt);

    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 48, 128, 3), "cpu");
    ASSERT_EQ(plan->provider(), "mock_high") << plan->explain();
    std::string ex = plan->explain();
    for (auto &b : bad) {
        const kpr::Answer *a = find_answer(*plan, b.name);
        ASSERT_NE(a, nullptr) << b.name << " missing from the plan:\n" << ex;
        EXPECT_EQ(a->state, kpr::AnswerState::Failed) << b.name;
        EXPECT_TRUE(contains(ex, b.name)) << ex;
    }
    KprMockStats *s = mock_stats(mock_file("high", "mock_high"));
    ASSERT_NE(s, nullptr);
    int releases = s->releases.load(), runs = s->runs.load();
    expect_f32_plan_computes(*plan);
    EXPECT_EQ(s->runs.load(), runs + 1) << "the winner's kernel must be the one that ran";
    EXPECT_EQ(s->releases.load(), releases + 1) << "PreparedOp must release its handle when destroyed";
}

TEST(Loader, AProviderWrittenInC) {
    auto rt = make({mock_dir("cprovider")});
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, "mock_c");
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(p->state, kpr::ProviderState::Loaded) << p->reason;
    EXPECT_TRUE(p->options.empty());
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 40, 96, 2), "cpu");
    ASSERT_EQ(plan->provider(), "mock_c") << plan->explain();  // score 150 over generic_cpu's 100
    expect_f32_plan_computes(*plan);
}

TEST(Loader, MissingFoldersAndUnrelatedFilesAreIgnored) {
    TempDir tmp;
    tmp.write("README.txt", "not a provider");
    tmp.write("libkpr_Upper.so", "the name does not match libkpr_[a-z0-9_]+.so");
    tmp.write("libkpr_versioned.so.1", "neither does this one");
    tmp.write("libother.so", "nor this");
    auto rt = make({tmp.path() / "does-not-exist", tmp.path()});
    for (auto &p : rt.providers()) {
        EXPECT_NE(p.state, kpr::ProviderState::Failed) << p.name << ": " << p.reason;
        EXPECT_FALSE(contains(p.file, tmp.path().string())) << p.file;
    }
    expect_generic_cpu_works(rt);
}

TEST(Loader, SameFolderTwiceLoadsOnce) {
    auto rt = make({mock_dir("high"), mock_dir("high"), mock_dir("high") / "." });
    int n = 0;
    for (auto &p : rt.providers()) n += p.name == "mock_high";
    EXPECT_EQ(n, 1);
}

} // namespace

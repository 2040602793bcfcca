// Negotiation ("Who wins an op" in docs/config.md): disabled providers are not asked, forced
// providers win when they accept (require = true makes a decline an error), then priority, then the
// provider's score, then the name. Plus opt-in providers, the environment, rules per device, explain,
// the plan's JSON, caching and concurrent planning.
#include <kpr/ggml_blocks.h>
#include <kpr/runtime.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

namespace {

using namespace kpr_test;

const kpr_op_desc kQ8 = kpr::gemv(KPR_TYPE_Q8_0, 4096, 4096, 1);

kpr::Runtime make(const std::vector<fs::path> &dirs, const std::optional<fs::path> &config = std::nullopt) {
    kpr::RuntimeOptions o = isolated_options(dirs);
    o.config_file = config;
    return kpr::Runtime::create(o);
}

kpr::Runtime make_env(const std::vector<fs::path> &dirs, const std::optional<fs::path> &config = std::nullopt) {
    kpr::RuntimeOptions o = isolated_options(dirs);
    o.use_environment = true;
    o.config_file = config;
    return kpr::Runtime::create(o);
}

std::string winner(const kpr::Runtime &rt, const kpr_op_desc &op = kQ8, const std::string &dev = "cpu") {
    return rt.plan(op, dev)->provider();
}

// ---- precedence ---------------------------------------------------------------------------------

TEST(Precedence, HighestScoreWins) {
    auto rt = make({mock_dir("low"), mock_dir("high")});
    auto plan = rt.plan(kQ8, "cpu");
    ASSERT_EQ(plan->provider(), "mock_high") << plan->explain();
    EXPECT_TRUE(contains(plan->decision(), "score 300")) << plan->decision();
    const kpr::Answer *low = find_answer(*plan, "mock_low");
    ASSERT_NE(low, nullptr);
    EXPECT_EQ(low->state, kpr::AnswerState::Accepted);
    EXPECT_EQ(low->score, 50);
    EXPECT_EQ(find_answer(*plan, "generic_cpu")->score, 100);
}

TEST(Precedence, NameBreaksATieWhateverTheLoadOrder) {
    TempDir tmp;
    // mock_tie_b is found first, mock_tie_a second: the name still decides.
    copy_mock("tie", "mock_tie_b", tmp.path() / "first");
    copy_mock("tie", "mock_tie_a", tmp.path() / "second");
    for (auto dirs : {std::vector<fs::path>{tmp.path() / "first", tmp.path() / "second"},
                      std::vector<fs::path>{tmp.path() / "second", tmp.path() / "first"}}) {
        auto rt = make(dirs);
        auto plan = rt.plan(kQ8, "cpu");
        EXPECT_EQ(plan->provider(), "mock_tie_a") << plan->explain();
        EXPECT_TRUE(contains(plan->decision(), "name")) << plan->decision();
    }
}

TEST(Precedence, PriorityBeatsScore) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_low]\npriority = 10\n");
    auto rt = make({mock_dir("low"), mock_dir("high")}, cfg);
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_EQ(plan->provider(), "mock_low") << plan->explain();
    EXPECT_TRUE(contains(plan->decision(), "priority 10")) << plan->decision();
    EXPECT_EQ(find_answer(*plan, "mock_low")->priority, 10);
}

TEST(Precedence, NegativePriorityLosesToTheDefault) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_high]\npriority = -1\n");
    auto rt = make({mock_dir("low"), mock_dir("high")}, cfg);
    EXPECT_EQ(winner(rt), "generic_cpu");  // 100 beats mock_low's 50; mock_high sits below both
}

TEST(Precedence, ForceBeatsPriorityAndScore) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml",
                             "[providers.mock_low]\nforce = true\n\n[providers.mock_high]\npriority = 100\n");
    auto rt = make({mock_dir("low"), mock_dir("high")}, cfg);
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_EQ(plan->provider(), "mock_low") << plan->explain();
    EXPECT_TRUE(contains(plan->decision(), "forced")) << plan->decision();
    EXPECT_TRUE(find_answer(*plan, "mock_low")->forced);
    EXPECT_TRUE(contains(plan->explain(), "[forced]")) << plan->explain();
}

TEST(Precedence, TwoForcedFallBackToPriorityThenScore) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_low]\nforce = true\n[providers.mock_high]\nforce = true\n");
    auto rt = make({mock_dir("low"), mock_dir("high")}, cfg);
    EXPECT_EQ(winner(rt), "mock_high");
}

TEST(Precedence, ForcedProviderThatDeclinesFallsThroughAndTheTraceSaysSo) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_decline]\nforce = true\n");
    auto rt = make({mock_dir("decline"), mock_dir("low")}, cfg);
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_EQ(plan->provider(), "generic_cpu") << plan->explain();
    const kpr::Answer *a = find_answer(*plan, "mock_decline");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->state, kpr::AnswerState::Declined);
    EXPECT_TRUE(a->forced);
    EXPECT_TRUE(contains(a->reason, "52 KiB")) << a->reason;
    EXPECT_TRUE(contains(plan->decision(), "mock_decline")) << plan->decision();
    EXPECT_TRUE(contains(plan->decision(), "forced")) << plan->decision();
    EXPECT_TRUE(contains(plan->decision(), cfg.string())) << "the trace names the setting: " << plan->decision();
}

TEST(Precedence, ForcedWithRequireThatDeclinesIsAnError) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "# forced and required\n[providers.mock_decline]\nforce = true\nrequire = true\n");
    auto rt = make({mock_dir("decline")}, cfg);
    try {
        rt.plan(kQ8, "cpu");
        FAIL() << "plan must throw when a required provider declines";
    } catch (const kpr::Error &e) {
        std::string m = e.what();
        EXPECT_TRUE(contains(m, "mock_decline")) << m;
        EXPECT_TRUE(contains(m, "require")) << m;
        EXPECT_TRUE(contains(m, "52 KiB")) << "the provider's reason is part of the error: " << m;
        EXPECT_TRUE(contains(m, cfg.string() + ":3:")) << "the force setting's position: " << m;
        EXPECT_TRUE(contains(m, cfg.string() + ":4:")) << "the require setting's position: " << m;
    }
}

TEST(Precedence, ForcedWithRequireThatThrowsIsAnError) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_throw]\nforce = true\nrequire = true\n");
    auto rt = make({mock_dir("throw_query")}, cfg);
    EXPECT_THROW(rt.plan(kQ8, "cpu"), kpr::Error);
}

TEST(Precedence, ForcedWithRequireThatAcceptsWins) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_low]\nforce = true\nrequire = true\n");
    auto rt = make({mock_dir("low"), mock_dir("high")}, cfg);
    EXPECT_EQ(winner(rt), "mock_low");
}

TEST(Precedence, RequireWithoutForceChangesNothing) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_decline]\nrequire = true\n");
    auto rt = make({mock_dir("decline")}, cfg);
    std::shared_ptr<const kpr::Plan> plan;
    ASSERT_NO_THROW(plan = rt.plan(kQ8, "cpu"));
    EXPECT_EQ(plan->provider(), "generic_cpu");
}

TEST(Precedence, NothingAcceptsGivesAPlanThatSaysWhy) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.generic_cpu]\nenabled = false\n");
    auto rt = make({mock_dir("decline")}, cfg);
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_FALSE(plan->ok());
    EXPECT_EQ(plan->provider(), "");
    EXPECT_TRUE(contains(plan->decision(), "no provider accepts")) << plan->decision();
    EXPECT_THROW(plan->prepare(nullptr, 0), kpr::Error);
    std::string ex = plan->explain();
    EXPECT_TRUE(contains(ex, "mock_decline")) << ex;
    EXPECT_TRUE(contains(ex, "52 KiB")) << ex;
    EXPECT_TRUE(contains(ex, "generic_cpu")) << ex;
    EXPECT_TRUE(contains(ex, "disabled by " + cfg.string())) << ex;
}

// ---- enabling and disabling ---------------------------------------------------------------------

TEST(Enable, DisabledByConfigIsNotAskedAndTheReasonNamesTheLine) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "\n[providers.mock_high]\nenabled = false\n");
    auto rt = make({mock_dir("high")}, cfg);
    KprMockStats *s = mock_stats(mock_file("high", "mock_high"));
    ASSERT_NE(s, nullptr);
    int queries = s->queries.load();
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_EQ(plan->provider(), "generic_cpu");
    EXPECT_EQ(s->queries.load(), queries) << "a disabled provider must not be asked";
    const kpr::Answer *a = find_answer(*plan, "mock_high");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->state, kpr::AnswerState::Disabled);
    EXPECT_TRUE(contains(a->reason, cfg.string() + ":3:")) << a->reason;
    auto ps = rt.providers();
    EXPECT_EQ(find_provider(ps, "mock_high")->state, kpr::ProviderState::Disabled);
    EXPECT_TRUE(contains(find_provider(ps, "mock_high")->reason, cfg.string())) << find_provider(ps, "mock_high")->reason;
}

TEST(Enable, KprDisableNamesTheVariable) {
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_DISABLE", "mock_high, generic_cpu");
    auto rt = make_env({mock_dir("high"), mock_dir("low")});
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_EQ(plan->provider(), "mock_low") << plan->explain();
    for (const char *n : {"mock_high", "generic_cpu"}) {
        const kpr::Answer *a = find_answer(*plan, n);
        ASSERT_NE(a, nullptr);
        EXPECT_EQ(a->state, kpr::AnswerState::Disabled) << n;
        EXPECT_TRUE(contains(a->reason, "KPR_DISABLE")) << a->reason;
    }
    // Both names are known (the list may have spaces after its commas): nothing to warn about.
    EXPECT_TRUE(rt.warnings().empty()) << ::testing::PrintToString(rt.warnings());
}

TEST(Enable, OptInProviderIsOffUntilEnabled) {
    auto rt = make({mock_dir("optin"), mock_dir("low")});
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_EQ(plan->provider(), "generic_cpu");
    const kpr::Answer *a = find_answer(*plan, "mock_optin");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->state, kpr::AnswerState::Disabled);
    EXPECT_TRUE(contains(a->reason, "opt-in")) << a->reason;
    EXPECT_TRUE(contains(a->reason, "KPR_ENABLE=mock_optin")) << "says how to enable it: " << a->reason;
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, "mock_optin");
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(p->opt_in);
    EXPECT_EQ(p->state, kpr::ProviderState::Disabled);
}

TEST(Enable, OptInEnabledByConfig) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_optin]\nenabled = true\n");
    auto rt = make({mock_dir("optin")}, cfg);
    EXPECT_EQ(winner(rt), "mock_optin");
    auto ps = rt.providers();
    EXPECT_EQ(find_provider(ps, "mock_optin")->state, kpr::ProviderState::Loaded);
}

TEST(Enable, OptInEnabledByKprEnable) {
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_ENABLE", "mock_optin");
    auto rt = make_env({mock_dir("optin")});
    EXPECT_EQ(winner(rt), "mock_optin");
}

TEST(Enable, OptInEnabledByARuleOnlyWhereItMatches) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[[rules]]\ndevice = \"cpu\"\n[rules.providers.mock_optin]\nenabled = true\n");
    auto rt = make({mock_dir("optin")}, cfg);
    EXPECT_EQ(winner(rt), "mock_optin");
    TempDir tmp2;
    fs::path cfg2 = tmp2.write("kpr.toml", "[[rules]]\ndevice = \"cuda:7\"\n[rules.providers.mock_optin]\nenabled = true\n");
    auto rt2 = make({mock_dir("optin")}, cfg2);
    EXPECT_EQ(winner(rt2), "generic_cpu");
}

TEST(Enable, KprForceEnablesAndWinsOverPriority) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_high]\npriority = 100\n");
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_FORCE", "mock_optin");
    auto rt = make_env({mock_dir("optin"), mock_dir("high")}, cfg);
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_EQ(plan->provider(), "mock_optin") << plan->explain();
    EXPECT_TRUE(find_answer(*plan, "mock_optin")->forced);
    EXPECT_TRUE(contains(plan->decision(), "forced")) << plan->decision();
}

TEST(Enable, EnvironmentOverridesTheFile) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_high]\nenabled = false\n[providers.generic_cpu]\nenabled = true\n");
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_ENABLE", "mock_high");
    env.set("KPR_DISABLE", "generic_cpu");
    auto rt = make_env({mock_dir("high")}, cfg);
    auto plan = rt.plan(kQ8, "cpu");
    EXPECT_EQ(plan->provider(), "mock_high") << plan->explain();
    EXPECT_TRUE(contains(find_answer(*plan, "generic_cpu")->reason, "KPR_DISABLE"));
}

TEST(Enable, KprDisableBeatsKprForce) {
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_FORCE", "mock_high");
    env.set("KPR_DISABLE", "mock_high");
    auto rt = make_env({mock_dir("high")});
    EXPECT_EQ(winner(rt), "generic_cpu");
}

TEST(Enable, UseEnvironmentFalseIgnoresTheVariables) {
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_DISABLE", "generic_cpu,mock_high");
    env.set("KPR_FORCE", "mock_low");
    auto rt = make({mock_dir("high"), mock_dir("low")});
    EXPECT_EQ(winner(rt), "mock_high");
}

TEST(Enable, UnknownNameInTheEnvironmentIsAWarningWithASuggestion) {
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_ENABLE", "mock_hihg");
    auto rt = make_env({mock_dir("high")});
    bool found = false;
    for (auto &w : rt.warnings())
        if (contains(w, "KPR_ENABLE") && contains(w, "mock_hihg") && contains(w, "did you mean 'mock_high'")) found = true;
    EXPECT_TRUE(found) << "warnings: " << ::testing::PrintToString(rt.warnings());
}

// ---- environment: where the config and providers come from ----------------------------------------

TEST(Environment, KprConfigIsReadWhenNoFileIsGiven) {
    TempDir tmp;
    fs::path cfg = tmp.write("env.toml", "[providers.mock_low]\npriority = 3\n");
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_CONFIG", cfg.string());
    auto rt = make_env({mock_dir("low"), mock_dir("high")});
    EXPECT_EQ(winner(rt), "mock_low");
    ASSERT_EQ(rt.config_files().size(), 1u);
    EXPECT_EQ(rt.config_files()[0], cfg.string());
}

TEST(Environment, AnExplicitConfigFileBeatsKprConfig) {
    TempDir tmp;
    fs::path env_cfg = tmp.write("env.toml", "[providers.mock_low]\npriority = 3\n");
    fs::path flag_cfg = tmp.write("flag.toml", "[providers.mock_high]\npriority = 3\n");
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_CONFIG", env_cfg.string());
    auto rt = make_env({mock_dir("low"), mock_dir("high")}, flag_cfg);
    EXPECT_EQ(winner(rt), "mock_high");
    EXPECT_EQ(rt.config_files(), std::vector<std::string>{flag_cfg.string()});
}

TEST(Environment, KprProviderPathIsSearched) {
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_PROVIDER_PATH", mock_dir("low").string() + ":" + mock_dir("high").string());
    auto rt = make_env({});
    EXPECT_NE(rt.loaded("mock_low"), nullptr);
    EXPECT_NE(rt.loaded("mock_high"), nullptr);
    EXPECT_EQ(winner(rt), "mock_high");
}

TEST(Environment, ProviderPathFlagComesBeforeKprProviderPath) {
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_PROVIDER_PATH", mock_dir("dup2").string());
    auto rt = make_env({mock_dir("dup1")});
    ASSERT_NE(rt.loaded("mock_dup"), nullptr);
    EXPECT_EQ(loaded_info(rt, "mock_dup")->version, "1.0.0-first");
}

TEST(Environment, ConfigProviderPathsAreRelativeToTheFile) {
    TempDir tmp;
    copy_mock("high", "mock_high", tmp.path() / "conf" / "mine");
    fs::path cfg = tmp.write("conf/kpr.toml", "[runtime]\nprovider_paths = [\"mine\"]\n");
    auto rt = make({}, cfg);
    ASSERT_NE(rt.loaded("mock_high"), nullptr);
    EXPECT_TRUE(contains(loaded_info(rt, "mock_high")->file, (tmp.path() / "conf" / "mine").string()));
}

TEST(Environment, KprLogDoesNotBreakAnything) {
    EnvGuard env;
    env.clear_kpr();
    env.set("KPR_LOG", "off");
    auto rt = make_env({mock_dir("high")});
    EXPECT_EQ(winner(rt), "mock_high");
}

// ---- rules per device, architecture and device name, on simulated GPUs ---------------------------

kpr::Runtime make_gpu(const std::optional<fs::path> &config = std::nullopt) {
    kpr::RuntimeOptions o = isolated_options({mock_dir("gpu")});
    o.config_file = config;
    o.extra_devices = {*kpr::simulated_device("p100"), *kpr::simulated_device("h200")};
    return kpr::Runtime::create(o);
}

TEST(Rules, SimulatedDevicesReachTheProviders) {
    auto rt = make_gpu();
    auto p100 = rt.plan(kQ8, "sim:p100");
    ASSERT_EQ(p100->provider(), "mock_gpu") << p100->explain();
    const kpr::Answer *a = find_answer(*p100, "mock_gpu");
    EXPECT_TRUE(contains(a->reason, "Tesla P100")) << a->reason;
    EXPECT_TRUE(contains(a->reason, "cc 6.0")) << a->reason;
    EXPECT_TRUE(contains(a->reason, "56 SMs")) << a->reason;
    EXPECT_TRUE(contains(a->reason, "49152 B smem/block")) << a->reason;
    EXPECT_TRUE(contains(a->reason, "simulated")) << a->reason;
    // The shared-memory hungry provider declines on the P100 with a reason a person can act on...
    const kpr::Answer *smem = find_answer(*p100, "mock_gpu_smem");
    EXPECT_EQ(smem->state, kpr::AnswerState::Declined);
    EXPECT_TRUE(contains(smem->reason, "needs 52 KiB")) << smem->reason;
    EXPECT_TRUE(contains(smem->reason, "allows 48 KiB")) << smem->reason;
    // ...and wins on the H200.
    auto h200 = rt.plan(kQ8, "sim:h200");
    EXPECT_EQ(h200->provider(), "mock_gpu_smem") << h200->explain();
    EXPECT_TRUE(contains(find_answer(*h200, "mock_gpu")->reason, "cc 9.0"));
    // CPU providers decline GPU devices; GPU providers decline the CPU.
    EXPECT_EQ(find_answer(*h200, "generic_cpu")->state, kpr::AnswerState::Declined);
    auto cpu = rt.plan(kQ8, "cpu");
    EXPECT_EQ(cpu->provider(), "generic_cpu");
    EXPECT_EQ(find_answer(*cpu, "mock_gpu")->state, kpr::AnswerState::Declined);
}

TEST(Rules, ArchRuleSetsOptionsOnlyWhereItMatches) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[[rules]]\narch = \"6.0\"\n[rules.providers.mock_gpu.options]\nblocks_per_sm = 2\n");
    auto rt = make_gpu(cfg);
    EXPECT_TRUE(contains(find_answer(*rt.plan(kQ8, "sim:p100"), "mock_gpu")->reason, "blocks_per_sm=2"));
    EXPECT_TRUE(contains(find_answer(*rt.plan(kQ8, "sim:h200"), "mock_gpu")->reason, "blocks_per_sm=4"));
    auto opts = rt.options_for("mock_gpu", "sim:p100");
    EXPECT_NE(std::find(opts.begin(), opts.end(), std::make_pair(std::string("blocks_per_sm"), std::string("2"))),
              opts.end());
}

TEST(Rules, DeviceNameRuleIsAGlob) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[[rules]]\ndevice_name = \"*H200*\"\n[rules.providers.mock_gpu]\npriority = 5\n");
    auto rt = make_gpu(cfg);
    EXPECT_EQ(winner(rt, kQ8, "sim:h200"), "mock_gpu");
    EXPECT_EQ(find_answer(*rt.plan(kQ8, "sim:h200"), "mock_gpu")->priority, 5);
    EXPECT_EQ(find_answer(*rt.plan(kQ8, "sim:p100"), "mock_gpu")->priority, 0);
}

TEST(Rules, DeviceRuleDisablesOnOneDevice) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[[rules]]\ndevice = \"sim:p100\"\n[rules.providers.mock_gpu]\nenabled = false\n");
    auto rt = make_gpu(cfg);
    auto p100 = rt.plan(kQ8, "sim:p100");
    EXPECT_FALSE(p100->ok()) << p100->explain();
    EXPECT_EQ(find_answer(*p100, "mock_gpu")->state, kpr::AnswerState::Disabled);
    EXPECT_TRUE(contains(find_answer(*p100, "mock_gpu")->reason, cfg.string() + ":4:"));
    EXPECT_EQ(winner(rt, kQ8, "sim:h200"), "mock_gpu_smem");
}

TEST(Rules, ArchRuleEnablesWhatTheFileDisables) {
    // Like config/pascal-gp100.toml: off everywhere, on where the architecture is 6.0.
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml",
                             "[providers.mock_gpu]\nenabled = false\n\n"
                             "[[rules]]\narch = \"6.0\"\n[rules.providers.mock_gpu]\nenabled = true\n");
    auto rt = make_gpu(cfg);
    EXPECT_EQ(winner(rt, kQ8, "sim:p100"), "mock_gpu");
    auto h200 = rt.plan(kQ8, "sim:h200");
    EXPECT_EQ(find_answer(*h200, "mock_gpu")->state, kpr::AnswerState::Disabled);
    EXPECT_TRUE(contains(find_answer(*h200, "mock_gpu")->reason, cfg.string() + ":2:"));
}

TEST(Rules, LaterRulesOverrideEarlierOnes) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml",
                             "[[rules]]\narch = \"9.0\"\n[rules.providers.mock_gpu]\npriority = 1\n"
                             "[[rules]]\ndevice = \"sim:h200\"\n[rules.providers.mock_gpu]\npriority = 7\n");
    auto rt = make_gpu(cfg);
    EXPECT_EQ(find_answer(*rt.plan(kQ8, "sim:h200"), "mock_gpu")->priority, 7);
}

TEST(Rules, UnknownDeviceIsAnErrorNamingTheKnownOnes) {
    auto rt = make_gpu();
    try {
        rt.plan(kQ8, "cuda:3");
        FAIL();
    } catch (const kpr::Error &e) {
        EXPECT_TRUE(contains(e.what(), "cuda:3")) << e.what();
        EXPECT_TRUE(contains(e.what(), "sim:p100")) << e.what();
    }
}

TEST(Rules, SimulatedDevicesCannotPrepare) {
    auto rt = make_gpu();
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "sim:h200");
    ASSERT_TRUE(plan->ok());
    std::vector<float> w(4 * 32);
    EXPECT_THROW(plan->prepare(w.data(), w.size() * 4), kpr::Error);
}

// ---- options ------------------------------------------------------------------------------------

TEST(Options, DefaultsReachTheProviderInDeclarationOrder) {
    auto rt = make({mock_dir("options")});
    auto plan = rt.plan(kQ8, "cpu", "mock_opts");
    const kpr::Answer *a = find_answer(*plan, "mock_opts");
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(contains(a->reason, "options: fast=false blocks_per_sm=4 mode=auto ratio=0.5")) << a->reason;
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, "mock_opts");
    ASSERT_EQ(p->options.size(), 4u);
    EXPECT_EQ(p->options[0].name, "fast");
    EXPECT_EQ(p->options[0].type, "bool");
    EXPECT_EQ(p->options[1].type, "int");
    EXPECT_EQ(p->options[1].min_value, 1);
    EXPECT_EQ(p->options[1].max_value, 16);
    EXPECT_EQ(p->options[2].choices, "auto,wide,narrow");
    EXPECT_EQ(p->options[3].type, "float");
}

TEST(Options, ConfiguredValuesReachTheProvider) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml",
                             "[providers.mock_opts]\noptions = { fast = true, blocks_per_sm = 16, mode = \"narrow\", ratio = 0.25 }\n");
    auto rt = make({mock_dir("options")}, cfg);
    auto plan = rt.plan(kQ8, "cpu", "mock_opts");
    EXPECT_TRUE(contains(find_answer(*plan, "mock_opts")->reason, "fast=true blocks_per_sm=16 mode=narrow ratio=0.25"))
        << find_answer(*plan, "mock_opts")->reason;
    auto opts = rt.options_for("mock_opts", "cpu");
    ASSERT_EQ(opts.size(), 4u);
    EXPECT_EQ(opts[1], std::make_pair(std::string("blocks_per_sm"), std::string("16")));
}

TEST(Options, OnlyProviderRestrictsTheAnswers) {
    auto rt = make({mock_dir("high"), mock_dir("low")});
    auto plan = rt.plan(kQ8, "cpu", "mock_low");
    EXPECT_EQ(plan->provider(), "mock_low");
    EXPECT_EQ(find_answer(*plan, "mock_high")->state, kpr::AnswerState::Disabled);
    try {
        rt.plan(kQ8, "cpu", "mock_lwo");
        FAIL();
    } catch (const kpr::Error &e) {
        EXPECT_TRUE(contains(e.what(), "did you mean 'mock_low'")) << e.what();
    }
}

// ---- explain and JSON ---------------------------------------------------------------------------

TEST(Explain, ShowsTheOpTheWinnerAndEveryAnswer) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_low]\nenabled = false\n");
    auto rt = make({mock_dir("high"), mock_dir("low"), mock_dir("decline"), mock_dir("major2")}, cfg);
    auto plan = rt.plan(kQ8, "cpu");
    std::string ex = plan->explain();
    EXPECT_TRUE(contains(ex, "gemv q8_0 4096x4096 ncols 1")) << ex;
    EXPECT_TRUE(contains(ex, "on cpu")) << ex;
    EXPECT_TRUE(contains(ex, "winner: mock_high")) << ex;
    EXPECT_TRUE(contains(ex, "* mock_high")) << "the winner is marked:\n" << ex;
    // One line per provider with its state and reason.
    struct Row {
        const char *name, *state, *reason;
    } rows[] = {{"mock_high", "accepted", "mock_high serves 4096x4096 n1"},
                {"generic_cpu", "accepted", ""},
                {"mock_low", "disabled", "disabled by "},
                {"mock_decline", "declined", "needs 52 KiB"},
                {"mock_major2", "failed", "2.0"}};
    std::istringstream in(ex);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (auto &r : rows) {
        bool found = false;
        for (auto &l : lines)
            if (contains(l, std::string(" ") + r.name + " ") && contains(l, r.state) && contains(l, r.reason)) found = true;
        EXPECT_TRUE(found) << "no line for " << r.name << " " << r.state << " '" << r.reason << "' in:\n" << ex;
    }
}

TEST(Explain, JsonHasTheDocumentedFields) {
    auto rt = make({mock_dir("high"), mock_dir("decline"), mock_dir("optin"), mock_dir("major2")});
    auto plan = rt.plan(kQ8, "cpu");
    nlohmann::json j = nlohmann::json::parse(plan->to_json());
    EXPECT_EQ(j["provider"], "mock_high");
    EXPECT_EQ(j["device"], "cpu");
    ASSERT_TRUE(j["answers"].is_array());
    EXPECT_EQ(j["answers"].size(), plan->answers().size());
    std::map<std::string, std::string> states;
    for (auto &a : j["answers"]) {
        ASSERT_TRUE(a.contains("provider") && a["provider"].is_string()) << a.dump();
        ASSERT_TRUE(a.contains("state") && a["state"].is_string()) << a.dump();
        ASSERT_TRUE(a.contains("score") && a["score"].is_number_integer()) << a.dump();
        ASSERT_TRUE(a.contains("reason") && a["reason"].is_string()) << a.dump();
        states[a["provider"]] = a["state"];
    }
    EXPECT_EQ(states["mock_high"], "accepted");
    EXPECT_EQ(states["generic_cpu"], "accepted");
    EXPECT_EQ(states["mock_decline"], "declined");
    EXPECT_EQ(states["mock_optin"], "disabled");
    EXPECT_EQ(states["mock_major2"], "failed");
    for (auto &a : j["answers"])
        if (a["provider"] == "mock_high") EXPECT_EQ(a["score"], 300);
}

TEST(Explain, JsonProviderIsNullWhenNothingServes) {
    TempDir tmp;
    fs::path cfg = tmp.write("kpr.toml", "[providers.generic_cpu]\nenabled = false\n");
    auto rt = make({}, cfg);
    nlohmann::json j = nlohmann::json::parse(rt.plan(kQ8, "cpu")->to_json());
    EXPECT_TRUE(j["provider"].is_null()) << j.dump();
    EXPECT_EQ(j["answers"][0]["state"], "disabled");
}

// ---- caching and threads ------------------------------------------------------------------------

TEST(Cache, TheSameKeyGetsTheSamePlanWithoutAskingAgain) {
    auto rt = make({mock_dir("high")});
    KprMockStats *s = mock_stats(mock_file("high", "mock_high"));
    ASSERT_NE(s, nullptr);
    auto a = rt.plan(kQ8, "cpu");
    int queries = s->queries.load();
    auto b = rt.plan(kQ8, "cpu");
    EXPECT_EQ(a.get(), b.get());
    EXPECT_EQ(s->queries.load(), queries) << "a cached key must not query the providers again";
    auto c = rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 4096, 4096, 2), "cpu");
    EXPECT_NE(a.get(), c.get()) << "ncols is part of the key";
    EXPECT_EQ(c->op().ncols, 2u);
    auto d = rt.plan(kQ8, "cpu", "generic_cpu");
    EXPECT_NE(a.get(), d.get()) << "a restriction to one provider is part of the key";
    EXPECT_EQ(d->provider(), "generic_cpu");
}

TEST(Cache, EightThreadsGetIdenticalPlans) {
    auto rt = make({mock_dir("high"), mock_dir("low"), mock_dir("tie"), mock_dir("decline"), mock_dir("throw_query")});
    std::vector<kpr_op_desc> ops;
    for (uint32_t n = 1; n <= 8; ++n) {
        ops.push_back(kpr::gemv(KPR_TYPE_Q8_0, 4096, 4096, n));
        ops.push_back(kpr::gemv(KPR_TYPE_F16, 1024, 512, n));
        ops.push_back(kpr::gemv_grouped(KPR_TYPE_Q8_0, 256, 1024, n, 8, 2));
    }
    constexpr int kThreads = 8;
    std::vector<std::vector<const kpr::Plan *>> got(kThreads);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            ready++;
            while (ready.load() < kThreads) std::this_thread::yield();
            try {
                for (int round = 0; round < 3; ++round)
                    for (size_t i = 0; i < ops.size(); ++i) {
                        size_t k = (i + t * 5) % ops.size();  // each thread in its own order
                        auto p = rt.plan(ops[k], "cpu");
                        if (round == 0) {
                            if (got[t].empty()) got[t].resize(ops.size());
                            got[t][k] = p.get();
                        } else if (got[t][k] != p.get()) {
                            errors++;
                        }
                    }
            } catch (...) {
                errors++;
            }
        });
    for (auto &th : threads) th.join();
    EXPECT_EQ(errors.load(), 0);
    for (size_t k = 0; k < ops.size(); ++k) {
        std::set<const kpr::Plan *> distinct;
        for (int t = 0; t < kThreads; ++t) distinct.insert(got[t][k]);
        EXPECT_EQ(distinct.size(), 1u) << kpr::describe(ops[k]) << ": threads got different plans";
        EXPECT_EQ(got[0][k]->provider(), "mock_high");
        EXPECT_EQ(rt.plan(ops[k], "cpu").get(), got[0][k]);
    }
}

TEST(Cache, ConcurrentRunsOnOnePreparedOp) {
    auto rt = make({});
    const uint64_t rows = 64, cols = 256;
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, rows, cols, 2), "cpu");
    ASSERT_EQ(plan->provider(), "generic_cpu");
    std::vector<float> w(rows * cols), x(2 * cols);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 7) % 13) - 6.f;
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 3) % 5) - 2.f;
    kpr::PreparedOp op = plan->prepare(w.data(), w.size() * 4);
    std::vector<float> ref(2 * rows);
    op.run(x.data(), ref.data(), 2);
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&] {
            std::vector<float> y(2 * rows);
            for (int i = 0; i < 20; ++i) {
                op.run(x.data(), y.data(), 2);
                if (std::memcmp(y.data(), ref.data(), y.size() * 4) != 0) mismatches++;
            }
        });
    for (auto &th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0);
    // Integers times integers: the exact answer is known.
    double r0 = 0;
    for (uint64_t k = 0; k < cols; ++k) r0 += double(w[k]) * x[k];
    EXPECT_EQ(ref[0], float(r0));
}

// ---- ops ----------------------------------------------------------------------------------------

TEST(Ops, ImpossibleOpsAreErrors) {
    auto rt = make({});
    EXPECT_THROW(rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 64, 256, 0), "cpu"), kpr::Error);
    EXPECT_THROW(rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 64, 256, 9), "cpu"), kpr::Error);
    EXPECT_THROW(rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 64, 100, 1), "cpu"), kpr::Error);  // not a multiple of 32
    EXPECT_THROW(rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 0, 256, 1), "cpu"), kpr::Error);
    EXPECT_THROW(rt.plan(kpr::gemv(4, 64, 256, 1), "cpu"), kpr::Error);            // no type 4 in ggml
    EXPECT_THROW(rt.plan(kpr::gemv_grouped(KPR_TYPE_Q8_0, 64, 256, 1, 4, 5), "cpu"), kpr::Error);
    EXPECT_THROW(rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 1ull << 62, 1ull << 20, 1), "cpu"), kpr::Error);  // overflows
    try {
        rt.plan(kpr::gemv(KPR_TYPE_Q8_0, 64, 100, 1), "cpu");
    } catch (const kpr::Error &e) {
        EXPECT_TRUE(contains(e.what(), "100")) << e.what();
        EXPECT_TRUE(contains(e.what(), "32")) << e.what();
    }
}

TEST(Ops, DescribeAndSizes) {
    EXPECT_EQ(kpr::describe(kQ8), "gemv q8_0 4096x4096 ncols 1");
    EXPECT_EQ(kpr::weight_bytes(kQ8), 4096ull * 4096 / 32 * 34);
    EXPECT_EQ(kpr::weight_bytes(kpr::gemv_grouped(KPR_TYPE_F16, 10, 64, 1, 3, 1)), 3ull * 10 * 64 * 2);
}

TEST(Ops, PrepareChecksTheWeightSize) {
    auto rt = make({});
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu");
    std::vector<float> w(4 * 32);
    EXPECT_THROW(plan->prepare(w.data(), w.size() * 4 - 4), kpr::Error);
    EXPECT_THROW(plan->prepare(nullptr, w.size() * 4), kpr::Error);
    kpr::PreparedOp op = plan->prepare(w.data(), w.size() * 4);
    std::vector<float> x(32), y(1);
    EXPECT_THROW(op.run(x.data(), y.data(), 2), kpr::Error) << "ncols above the prepared op's";
}

} // namespace

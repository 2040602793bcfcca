// End-to-end runs of the `kpr` command (build/bin/kpr) with temporary config files and the mock
// provider folders. Exit codes: 0 success, 1 a failed check or bad input, 2 a usage error.
// Kept fast for a 2-core CI machine: small shapes, filtered self-tests.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

#include <regex>
#include <tuple>

namespace {

using namespace kpr_test;
using json = nlohmann::json;

const std::vector<std::string> kQ8Plan = {"plan", "--type", "q8_0", "--rows", "4096", "--cols", "4096", "--ncols", "1"};

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string> &b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::string show(const CommandResult &r) {
    return "exit " + std::to_string(r.exit_code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

json parse_json(const CommandResult &r) {
    try {
        return json::parse(r.out);
    } catch (const std::exception &e) {
        ADD_FAILURE() << "stdout is not JSON (" << e.what() << "):\n" << show(r);
        return json();
    }
}

// The line of `text` that contains every needle, or "".
std::string line_with(const std::string &text, const std::vector<std::string> &needles) {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
        bool all = true;
        for (auto &n : needles) all = all && contains(l, n);
        if (all) return l;
    }
    return "";
}

class Cli : public ::testing::Test {
protected:
    void SetUp() override { ASSERT_TRUE(fs::exists(kpr_binary())) << kpr_binary() << " was not built"; }
    TempDir tmp;
    // kpr with a private state folder (self-test records) and no KPR_* from the caller's environment.
    CommandResult run_kpr(const std::vector<std::string> &args,
                          std::vector<std::pair<std::string, std::string>> env = {}, int timeout_s = 120) {
        env.emplace_back("XDG_STATE_HOME", (tmp.path() / "state").string());
        return kpr_test::run_kpr(args, env, timeout_s);
    }
};

// ---- exit codes ---------------------------------------------------------------------------------

TEST_F(Cli, UsageErrorsExitTwo) {
    for (auto args : std::vector<std::vector<std::string>>{
             {"--no-such-flag", "devices"},
             {},
             {"frobnicate"},
             {"plan", "--rows", "4", "--cols", "32"},  // --type missing
             {"plan", "--type", "nonsense", "--rows", "4", "--cols", "32"},
             {"plan", "--type", "q8_0", "--rows", "0", "--cols", "32"},
             {"plan", "--type", "q8_0", "--rows", "4", "--cols", "32", "--op", "gemm"},
             {"--log-level", "loud", "devices"},
             {"plan", "--type", "q8_0", "--rows", "4", "--cols", "32", "--simulate-device", "gtx9000"},
             {"config", "check"},  // no file, no --config, no KPR_CONFIG
         }) {
        auto r = run_kpr(args);
        EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << show(r);
    }
}

TEST_F(Cli, UnknownTypeSaysWhatItKnows) {
    auto r = run_kpr({"plan", "--type", "nonsense", "--rows", "4", "--cols", "32"});
    EXPECT_EQ(r.exit_code, 2) << show(r);
    EXPECT_TRUE(contains(r.err, "nonsense")) << show(r);
    EXPECT_TRUE(contains(r.err, "q8_0")) << "lists the known types: " << show(r);
}

TEST_F(Cli, HelpAndVersionExitZero) {
    auto h = run_kpr({"--help"});
    EXPECT_EQ(h.exit_code, 0) << show(h);
    EXPECT_TRUE(contains(h.out, "plan")) << show(h);
    auto v = run_kpr({"--version"});
    EXPECT_EQ(v.exit_code, 0) << show(v);
    EXPECT_TRUE(contains(v.all(), "kpr")) << show(v);
}

TEST_F(Cli, BadInputExitsOne) {
    auto r = run_kpr({"plan", "--type", "q8_0", "--rows", "4", "--cols", "100"});  // not a multiple of 32
    EXPECT_EQ(r.exit_code, 1) << show(r);
    auto n = run_kpr({"plan", "--type", "q8_0", "--rows", "4", "--cols", "32", "--ncols", "9"});
    EXPECT_EQ(n.exit_code, 1) << show(n);
    auto d = run_kpr({"plan", "--type", "q8_0", "--rows", "4", "--cols", "32", "--device", "cuda:7"});
    EXPECT_EQ(d.exit_code, 1) << show(d);
    EXPECT_TRUE(contains(d.err, "cuda:7")) << show(d);
}

// The issue calls --config, --provider-path and --log-level global options: they must work after the
// subcommand too (`kpr plan --type q8_0 ... --config my.toml`), not only before it.
TEST_F(Cli, GlobalOptionsAfterTheSubcommand) {
    fs::path cfg = tmp.write("off.toml", "[providers.generic_cpu]\nenabled = false\n");
    auto r = run_kpr(cat(kQ8Plan, {"--config", cfg.string(), "--provider-path", mock_dir("high").string(),
                                   "--log-level", "error", "--json"}));
    EXPECT_EQ(r.exit_code, 0) << show(r);
    if (r.exit_code == 0) EXPECT_EQ(parse_json(r)["provider"], "mock_high") << show(r);
}

// ---- plan ---------------------------------------------------------------------------------------

TEST_F(Cli, PlanExplainShowsGenericCpuWinningAndEveryAnswer) {
    auto r = run_kpr(cat({"--provider-path", mock_dir("decline").string(), "--provider-path", mock_dir("major2").string()},
                         cat(kQ8Plan, {"--explain"})));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_TRUE(contains(r.out, "gemv q8_0 4096x4096 ncols 1")) << show(r);
    EXPECT_TRUE(contains(r.out, "winner: generic_cpu")) << show(r);
    EXPECT_NE(line_with(r.out, {"* generic_cpu", "accepted"}), "") << show(r);
    EXPECT_NE(line_with(r.out, {"mock_decline", "declined", "needs 52 KiB"}), "") << show(r);
    EXPECT_NE(line_with(r.out, {"mock_major2", "failed", "2.0"}), "") << show(r);
}

TEST_F(Cli, PlanWithoutExplainNamesTheWinner) {
    auto r = run_kpr({"plan", "--type", "Q8_0", "--rows", "64", "--cols", "256"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_TRUE(contains(r.out, "generic_cpu")) << show(r);
}

TEST_F(Cli, PlanWithGenericCpuDisabledExitsOneAndSaysWhy) {
    fs::path cfg = tmp.write("no-generic.toml", "# nothing but the mocks\n[providers.generic_cpu]\nenabled = false\n");
    auto r = run_kpr(cat({"--config", cfg.string(), "--provider-path", mock_dir("decline").string()}, cat(kQ8Plan, {"--explain"})));
    EXPECT_EQ(r.exit_code, 1) << show(r);
    EXPECT_TRUE(contains(r.all(), "nothing serves")) << show(r);
    EXPECT_TRUE(contains(r.out, "no provider accepts")) << show(r);
    EXPECT_NE(line_with(r.out, {"generic_cpu", "disabled", cfg.string() + ":3:"}), "") << show(r);
    EXPECT_NE(line_with(r.out, {"mock_decline", "declined", "needs 52 KiB"}), "") << show(r);
    // Without --explain the reasons are shown too: a failed plan always says why.
    auto plain = run_kpr(cat({"--config", cfg.string()}, kQ8Plan));
    EXPECT_EQ(plain.exit_code, 1) << show(plain);
    EXPECT_NE(line_with(plain.out, {"generic_cpu", "disabled"}), "") << show(plain);
}

TEST_F(Cli, PlanDisabledByTheEnvironment) {
    auto r = run_kpr(kQ8Plan, {{"KPR_DISABLE", "generic_cpu"}});
    EXPECT_EQ(r.exit_code, 1) << show(r);
    EXPECT_NE(line_with(r.out, {"generic_cpu", "disabled", "KPR_DISABLE"}), "") << show(r);
}

TEST_F(Cli, PlanOfATypeNobodyServesExitsOne) {
    for (const char *type : {"iq2_xxs", "IQ2_XXS"}) {
        auto r = run_kpr({"plan", "--type", type, "--rows", "256", "--cols", "256"});
        EXPECT_EQ(r.exit_code, 1) << type << "\n" << show(r);
        EXPECT_TRUE(contains(r.out, "no provider accepts")) << show(r);
        EXPECT_NE(line_with(r.out, {"generic_cpu", "declined"}), "") << "generic_cpu's reason is shown\n" << show(r);
    }
}

TEST_F(Cli, PlanJson) {
    auto r = run_kpr(cat({"--provider-path", mock_dir("decline").string(), "--provider-path", mock_dir("major2").string()},
                         cat(kQ8Plan, {"--json"})));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    json j = parse_json(r);
    EXPECT_EQ(j["provider"], "generic_cpu") << j.dump(2);
    EXPECT_EQ(j["device"], "cpu");
    ASSERT_TRUE(j["answers"].is_array());
    std::map<std::string, std::string> states;
    for (auto &a : j["answers"]) {
        ASSERT_TRUE(a["provider"].is_string() && a["state"].is_string() && a["score"].is_number() && a["reason"].is_string())
            << a.dump();
        states[a["provider"]] = a["state"];
    }
    EXPECT_EQ(states["generic_cpu"], "accepted");
    EXPECT_EQ(states["mock_decline"], "declined");
    EXPECT_EQ(states["mock_major2"], "failed");

    fs::path cfg = tmp.write("off.toml", "[providers.generic_cpu]\nenabled = false\n");
    auto none = run_kpr(cat({"--config", cfg.string()}, cat(kQ8Plan, {"--json"})));
    EXPECT_EQ(none.exit_code, 1) << show(none);
    json n = parse_json(none);
    EXPECT_TRUE(n["provider"].is_null()) << n.dump(2);
    EXPECT_EQ(n["answers"][0]["state"], "disabled");
}

TEST_F(Cli, PlanOnASimulatedGp100) {
    auto r = run_kpr({"--provider-path", mock_dir("gpu").string(), "plan", "--type", "q8_0", "--rows", "4096", "--cols",
                      "4096", "--simulate-device", "p100", "--explain"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_TRUE(contains(r.out, "winner: mock_gpu")) << show(r);
    EXPECT_NE(line_with(r.out, {"mock_gpu_smem", "declined", "needs 52 KiB"}), "") << show(r);
    EXPECT_TRUE(contains(r.out, "56 SMs")) << show(r);
}

// Issue 4's negotiation through the whole runtime, with the real CUDA providers of this build (skipped in a
// build without them). On an H200 description with no config, Q8_0 and IQ3_XXS go to generic_cuda: sm60_q8
// is opt-in, iq_stage_tables declines off 6.0. With config/pascal-gp100.toml, its 6.0 rule enables both on a
// GP100 description: they win where the build has 6.0 code (a CUDA 12.x build with KPR_CUDA_ARCHS 60), and
// elsewhere decline with the architecture as the reason; on the H200 the file changes nothing.
TEST_F(Cli, CudaProvidersNegotiateOnSimulatedGpus) {
    for (const char *p : {"generic_cuda", "sm60_q8", "iq_stage_tables"})
        if (!fs::exists(provider_build_dir() / (std::string("libkpr_") + p + ".so")))
            GTEST_SKIP() << "this build has no CUDA providers (" << p << ")";
    const fs::path pascal = fs::path(KPR_TEST_SOURCE_DIR) / "config" / "pascal-gp100.toml";
    auto plan = [&](const std::string &type, const std::string &device, bool with_config) {
        std::vector<std::string> a;
        if (with_config) a = {"--config", pascal.string()};
        a = cat(a, {"plan", "--type", type, "--rows", "4096", "--cols", "14336", "--simulate-device", device, "--json"});
        auto r = run_kpr(a);
        json j = parse_json(r);
        std::map<std::string, json> by;
        if (j.is_object() && j["answers"].is_array())
            for (auto &x : j["answers"]) by[x["provider"].get<std::string>()] = x;
        return std::make_tuple(r, j, by);
    };
    for (bool with_config : {false, true}) {
        SCOPED_TRACE(with_config ? "with config/pascal-gp100.toml" : "no config");
        auto [r8, j8, a8] = plan("q8_0", "h200", with_config);
        ASSERT_EQ(r8.exit_code, 0) << show(r8);
        EXPECT_EQ(j8["provider"], "generic_cuda") << show(r8);
        EXPECT_EQ(a8["sm60_q8"]["state"], "disabled") << show(r8);
        if (!with_config)
            EXPECT_TRUE(contains(a8["sm60_q8"]["reason"].get<std::string>(), "opt-in provider, not enabled")) << show(r8);
        auto [r3, j3, a3] = plan("iq3_xxs", "h200", with_config);
        ASSERT_EQ(r3.exit_code, 0) << show(r3);
        EXPECT_EQ(j3["provider"], "generic_cuda") << show(r3);
        EXPECT_EQ(a3["iq_stage_tables"]["state"], "declined") << show(r3);
        EXPECT_TRUE(contains(a3["iq_stage_tables"]["reason"].get<std::string>(), "only on compute capability 6.0"))
            << show(r3);
    }
    for (auto [type, name] : {std::pair<std::string, std::string>{"q8_0", "sm60_q8"}, {"iq3_xxs", "iq_stage_tables"}}) {
        SCOPED_TRACE(type);
        auto [r, j, a] = plan(type, "p100", true);
        ASSERT_TRUE(a.count(name)) << show(r);
        const std::string state = a[name]["state"], reason = a[name]["reason"];
        if (state == "accepted") {
            EXPECT_EQ(r.exit_code, 0) << show(r);
            EXPECT_EQ(j["provider"], name) << show(r);
        } else {
            EXPECT_EQ(state, "declined") << show(r); // enabled by the rule, and then the binary's archs decide
            EXPECT_TRUE(contains(reason, "no kernel image for compute capability 6.0")) << show(r);
        }
    }
    auto [rd, jd, ad] = plan("q8_0", "p100", false);
    EXPECT_EQ(ad["sm60_q8"]["state"], "disabled") << show(rd); // opt-in, on Pascal too, without the config
}

// ---- providers ----------------------------------------------------------------------------------

TEST_F(Cli, BrokenLibrariesAreListedAsFailedAndTheRestWorks) {
    write_garbage_library(tmp.path());
    std::vector<std::string> paths = {"--provider-path", tmp.path().string(), "--provider-path",
                                      mock_dir("noentry").string(), "--provider-path", mock_dir("major2").string()};
    auto r = run_kpr(cat(paths, {"providers"}));
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_NE(line_with(r.out, {"generic_cpu", "loaded"}), "") << show(r);
    for (auto &[name, reason] : std::vector<std::pair<std::string, std::string>>{
             {"garbage", "not a loadable library"}, {"mock_noentry", "kpr_provider_entry"}, {"mock_major2", "2.0"}}) {
        EXPECT_NE(line_with(r.out, {name, "failed"}), "") << name << "\n" << show(r);
        EXPECT_NE(line_with(r.out, {name, reason}), "") << name << " with its reason\n" << show(r);
    }
    EXPECT_TRUE(contains(r.out, (tmp.path() / "libkpr_garbage.so").string())) << "the file is named\n" << show(r);

    auto j = run_kpr(cat(paths, {"providers", "--json"}));
    ASSERT_EQ(j.exit_code, 0) << show(j);
    json arr = parse_json(j);
    ASSERT_TRUE(arr.is_array());
    std::map<std::string, json> by;
    for (auto &p : arr) by[p["name"]] = p;
    ASSERT_TRUE(by.count("mock_major2")) << arr.dump(2);
    EXPECT_EQ(by["mock_major2"]["state"], "failed");
    EXPECT_TRUE(contains(by["mock_major2"]["reason"].get<std::string>(), "2.0"));
    EXPECT_TRUE(contains(by["mock_major2"]["file"].get<std::string>(), "libkpr_mock_major2.so"));
    EXPECT_EQ(by["garbage"]["state"], "failed");
    EXPECT_EQ(by["mock_noentry"]["state"], "failed");
    EXPECT_EQ(by["generic_cpu"]["state"], "loaded");

    // And generic_cpu still serves ops with the broken libraries around.
    auto plan = run_kpr(cat(paths, {"plan", "--type", "q8_0", "--rows", "64", "--cols", "256"}));
    EXPECT_EQ(plan.exit_code, 0) << show(plan);
    EXPECT_TRUE(contains(plan.out, "generic_cpu")) << show(plan);
}

TEST_F(Cli, ProvidersShowsDisabledAndOptIn) {
    fs::path cfg = tmp.write("kpr.toml", "[providers.mock_high]\nenabled = false\n");
    auto r = run_kpr({"--config", cfg.string(), "--provider-path", mock_dir("high").string(), "--provider-path",
                      mock_dir("optin").string(), "providers", "--json"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    json arr = parse_json(r);
    std::map<std::string, json> by;
    for (auto &p : arr) by[p["name"]] = p;
    EXPECT_EQ(by["mock_high"]["state"], "disabled");
    EXPECT_TRUE(contains(by["mock_high"]["reason"].get<std::string>(), cfg.string())) << by["mock_high"].dump();
    EXPECT_EQ(by["mock_optin"]["state"], "disabled");
    EXPECT_EQ(by["mock_optin"]["opt_in"], true);
}

// Providers log through the host's callback (the ABI says it is never null); the core prefixes the
// provider's name. The mock logs "mock init" at debug level from init.
TEST_F(Cli, ProviderLogMessagesReachTheLog) {
    auto r = run_kpr({"--log-level", "debug", "--provider-path", mock_dir("high").string(), "providers"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_TRUE(contains(r.err, "[mock_high] mock init")) << show(r);
}

TEST_F(Cli, ProviderPathFromTheEnvironment) {
    auto r = run_kpr({"providers", "--json"}, {{"KPR_PROVIDER_PATH", mock_dir("high").string()}});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    bool found = false;
    for (auto &p : parse_json(r)) found = found || (p["name"] == "mock_high" && p["state"] == "loaded");
    EXPECT_TRUE(found) << show(r);
}

// ---- config check -------------------------------------------------------------------------------

TEST_F(Cli, ConfigCheckAcceptsAGoodFile) {
    fs::path cfg = tmp.write("good.toml", "[providers.generic_cpu]\npriority = 1\noptions = { threads = 1 }\n\n"
                                          "[[rules]]\narch = \"6.0\"\n[rules.providers.mock_gpu]\nenabled = true\n");
    auto r = run_kpr({"--provider-path", mock_dir("gpu").string(), "config", "check", cfg.string()});
    EXPECT_EQ(r.exit_code, 0) << show(r);
    EXPECT_TRUE(contains(r.out, "ok")) << show(r);
    EXPECT_TRUE(contains(r.out, "threads=1")) << "the options each provider gets\n" << show(r);
    // --config and KPR_CONFIG name the file too.
    EXPECT_EQ(run_kpr({"--provider-path", mock_dir("gpu").string(), "--config", cfg.string(), "config", "check"}).exit_code, 0);
    EXPECT_EQ(run_kpr({"--provider-path", mock_dir("gpu").string(), "config", "check"}, {{"KPR_CONFIG", cfg.string()}}).exit_code, 0);
}

TEST_F(Cli, ConfigCheckRejectsBadFilesWithPositionAndKey) {
    struct Case {
        const char *name, *toml;
        int line;
        const char *key, *needle;
    } cases[] = {
        {"syntax", "[providers.generic_cpu]\nenabled = tru\n", 2, "", "syntax error"},
        {"unknown-key", "[providers.generic_cpu]\nenabeld = true\n", 2, "providers.generic_cpu.enabeld", "did you mean 'enabled'"},
        {"unknown-provider", "\n[providers.generic_cpux]\nenabled = true\n", 2, "providers.generic_cpux", "did you mean 'generic_cpu'"},
        {"wrong-type", "[providers.generic_cpu]\npriority = \"high\"\n", 2, "providers.generic_cpu.priority", "integer"},
        {"undeclared-option", "[providers.mock_opts.options]\nfsat = true\n", 2, "providers.mock_opts.options.fsat", "did you mean 'fast'"},
        {"out-of-range", "[providers.mock_opts]\noptions = { blocks_per_sm = 64 }\n", 2, "providers.mock_opts.options.blocks_per_sm",
         "out of range"},
    };
    for (auto &c : cases) {
        SCOPED_TRACE(c.name);
        fs::path cfg = tmp.write(std::string(c.name) + ".toml", c.toml);
        auto r = run_kpr({"--provider-path", mock_dir("options").string(), "config", "check", cfg.string()});
        EXPECT_EQ(r.exit_code, 1) << show(r);
        std::smatch m;
        std::regex pos(std::regex_replace(cfg.string(), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") + ":([0-9]+):([0-9]+): ");
        ASSERT_TRUE(std::regex_search(r.err, m, pos)) << "no FILE:LINE:COL\n" << show(r);
        EXPECT_EQ(std::stoi(m[1]), c.line) << show(r);
        EXPECT_TRUE(contains(r.err, c.key)) << show(r);
        EXPECT_TRUE(contains(r.err, c.needle)) << show(r);
    }
}

TEST_F(Cli, TheShippedDefaultConfigChecks) {
    fs::path def = fs::path(KPR_TEST_SOURCE_DIR) / "config" / "default.toml";
    ASSERT_TRUE(fs::exists(def));
    auto r = run_kpr({"config", "check", def.string()});
    EXPECT_EQ(r.exit_code, 0) << show(r);
    auto p = run_kpr(cat({"--config", def.string()}, kQ8Plan));
    EXPECT_EQ(p.exit_code, 0) << show(p);
    EXPECT_TRUE(contains(p.out, "generic_cpu")) << show(p);
}

TEST_F(Cli, ConfigCheckOfAMissingFile) {
    auto r = run_kpr({"config", "check", (tmp.path() / "absent.toml").string()});
    EXPECT_EQ(r.exit_code, 1) << show(r);
    EXPECT_TRUE(contains(r.err, "absent.toml")) << show(r);
}

// ---- selftest -----------------------------------------------------------------------------------

TEST_F(Cli, SelftestGenericCpuQ8PassesAndPrintsTheSeed) {
    auto r = run_kpr({"selftest", "--provider", "generic_cpu", "--filter", "q8_0"}, {}, 300);
    ASSERT_EQ(r.exit_code, 0) << show(r);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(([0-9]+) passed, 0 failed, [0-9]+ skipped \(seed ([0-9]+))")))
        << show(r);
    EXPECT_GT(std::stoi(m[1]), 0) << show(r);
    EXPECT_NE(m[2], "0") << show(r);
    EXPECT_FALSE(contains(r.out, "FAIL")) << show(r);
}

TEST_F(Cli, SelftestCatchesAWrongProviderAndTheSeedReproducesIt) {
    std::vector<std::string> base = {"--provider-path", mock_dir("selftest").string(), "selftest", "--provider",
                                     "mock_selftest", "--filter", "f32"};
    auto a = run_kpr(cat(base, {"--seed", "1234", "--json"}));
    auto b = run_kpr(cat(base, {"--seed", "1234", "--json"}));
    auto c = run_kpr(cat(base, {"--seed", "4321", "--json"}));
    EXPECT_EQ(a.exit_code, 1) << "a failed self-test exits 1\n" << show(a);
    json ja = parse_json(a), jb = parse_json(b), jc = parse_json(c);
    EXPECT_EQ(ja["seed"], 1234);
    EXPECT_EQ(ja["passed"], 1);
    EXPECT_EQ(ja["failed"], 1);
    ASSERT_EQ(ja["results"].size(), 2u) << ja.dump(2);
    ASSERT_EQ(jb["results"].size(), 2u) << jb.dump(2);
    ASSERT_EQ(jc["results"].size(), 2u) << jc.dump(2);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(ja["results"][i]["case"], jb["results"][i]["case"]);
        EXPECT_EQ(ja["results"][i]["error"], jb["results"][i]["error"]) << "the same seed reproduces the same error";
        EXPECT_EQ(ja["results"][i]["result"], jb["results"][i]["result"]);
    }
    EXPECT_EQ(ja["results"][1]["result"], "FAIL") << ja.dump(2);
    EXPECT_NE(ja["results"][1]["error"], jc["results"][1]["error"]) << "another seed, other data";

    // Human output: the failure, its message, and how to rerun.
    auto h = run_kpr(cat(base, {"--seed", "1234"}));
    EXPECT_EQ(h.exit_code, 1) << show(h);
    EXPECT_NE(line_with(h.out, {"mock_selftest", "f32 wrong", "FAIL"}), "") << show(h);
    EXPECT_TRUE(contains(h.out, "exceeds tolerance")) << show(h);
    EXPECT_TRUE(contains(h.out, "--seed 1234")) << show(h);
}

// A provider whose cases break the rules: a name holding lines of the contained runner's protocol ("\nT 0\nE"
// would end the child's report early and lose the cases after it), and an override of an option it never
// declared (the case would run without the override and could pass). Each such case fails with a message that
// says why; every other case still runs, contained or in process.
TEST_F(Cli, SelftestCasesThatBreakTheAbiFailClearly) {
    for (bool contained : {true, false}) {
        SCOPED_TRACE(contained ? "contained" : "in process");
        std::vector<std::string> a = {"--provider-path", mock_dir("badcases").string(), "selftest", "--provider",
                                      "mock_badcases", "--seed", "7", "--json"};
        if (!contained) a.push_back("--in-process");
        auto r = run_kpr(a);
        EXPECT_EQ(r.exit_code, 1) << show(r);
        json j = parse_json(r);
        ASSERT_TRUE(j["results"].is_array()) << show(r);
        EXPECT_EQ(j["results"].size(), 6u) << j.dump(2);
        std::string all = j.dump();
        EXPECT_TRUE(contains(all, "control character in its name 'f32 8x32 n1\\\\x0aT 0\\\\x0aE'")) << j.dump(2);
        EXPECT_TRUE(contains(all, "overrides option 'bgu', which the provider does not declare")) << j.dump(2);
        EXPECT_EQ(j["passed"], 2) << j.dump(2); // "f32 ok" and "internal ok"
        EXPECT_EQ(j["failed"], 4) << j.dump(2);
    }
}

TEST_F(Cli, ProvidersWithMalformedIdentitiesOrOptionsFailToLoad) {
    auto r = run_kpr({"--provider-path", mock_dir("manyarchs").string(), "--provider-path", mock_dir("badoption").string(),
                      "providers"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_NE(line_with(r.out, {"mock_manyarchs", "failed"}), "") << show(r);
    EXPECT_NE(line_with(r.out, {"mock_manyarchs:", "identity declares 1000 sass_archs (at most 64)"}), "") << show(r);
    EXPECT_NE(line_with(r.out, {"mock_badoption", "failed"}), "") << show(r);
    EXPECT_NE(line_with(r.out, {"mock_badoption:", "malformed name 'Fast Path'"}), "") << show(r);
    EXPECT_NE(line_with(r.out, {"generic_cpu", "loaded"}), "") << show(r);
}

TEST_F(Cli, SelftestPrintedSeedReproducesARandomRun) {
    std::vector<std::string> base = {"--provider-path", mock_dir("selftest").string(), "selftest", "--provider",
                                     "mock_selftest", "--filter", "wrong"};
    auto first = run_kpr(base);
    EXPECT_EQ(first.exit_code, 1) << show(first);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(first.out, m, std::regex(R"(rerun with --seed ([0-9]+))"))) << show(first);
    std::string seed = m[1];
    auto a = parse_json(run_kpr(cat(base, {"--json"})));  // another random seed
    auto again = parse_json(run_kpr(cat(base, {"--seed", seed, "--json"})));
    auto again2 = parse_json(run_kpr(cat(base, {"--seed", seed, "--json"})));
    EXPECT_EQ(std::to_string(again["seed"].get<uint64_t>()), seed);
    EXPECT_EQ(again["results"][0]["error"], again2["results"][0]["error"]);
    // The human table printed the error with 3 significant digits; the JSON run with that seed matches it.
    double err = again["results"][0]["error"].get<double>();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2e", err);
    EXPECT_TRUE(contains(first.out, buf)) << buf << "\n" << show(first);
    (void)a;
}

// --list names the cases a run would run, in the same order, without running them: mock_selftest's "f32 wrong"
// fails when run, and is only listed here (exit 0).
TEST_F(Cli, SelftestListShowsTheCasesARunWouldRunWithoutRunningThem) {
    std::vector<std::string> base = {"--provider-path", mock_dir("selftest").string(), "selftest", "--provider",
                                     "mock_selftest", "--filter", "f32"};
    auto l = run_kpr(cat(base, {"--list", "--json"}));
    ASSERT_EQ(l.exit_code, 0) << show(l);
    json jl = parse_json(l);
    auto run = parse_json(run_kpr(cat(base, {"--seed", "5", "--json"})));
    ASSERT_EQ(jl["count"], run["results"].size()) << jl.dump(2) << run.dump(2);
    ASSERT_EQ(jl["cases"].size(), run["results"].size());
    for (size_t i = 0; i < jl["cases"].size(); ++i) {
        EXPECT_EQ(jl["cases"][i]["case"], run["results"][i]["case"]);
        EXPECT_EQ(jl["cases"][i]["op"], run["results"][i]["op"]);
        EXPECT_EQ(jl["cases"][i]["threshold"], run["results"][i]["threshold"]);
        EXPECT_EQ(jl["cases"][i]["act_rounding"], run["results"][i]["act_rounding"]);
        EXPECT_FALSE(jl["cases"][i].contains("error"));
    }
    auto h = run_kpr(cat(base, {"--list"}));
    EXPECT_EQ(h.exit_code, 0) << show(h);
    EXPECT_NE(line_with(h.out, {"mock_selftest", "f32 wrong", "reference"}), "") << show(h);
    EXPECT_FALSE(contains(h.out, "FAIL")) << show(h);
    EXPECT_TRUE(contains(h.out, std::to_string(jl["count"].get<size_t>()) + " case(s)")) << show(h);

    auto none = run_kpr({"selftest", "--provider", "generic_cpu", "--list", "--filter", "Q8_0"});
    EXPECT_EQ(none.exit_code, 1) << show(none);
    EXPECT_TRUE(contains(none.err, "no self-test cases matched --filter 'Q8_0'")) << show(none);
    auto cpu = parse_json(run_kpr({"selftest", "--provider", "generic_cpu", "--list", "--filter", "q8_0", "--json"}));
    ASSERT_GT(cpu["count"].get<size_t>(), 0u) << cpu.dump(2);
    for (auto &c : cpu["cases"]) EXPECT_TRUE(contains(c["case"].get<std::string>(), "q8_0")) << c.dump();
}

// Cases a provider describes against the ABI's rules are listed with the reason, and the listing exits 1.
TEST_F(Cli, SelftestListReportsCasesTheProviderCannotDescribe) {
    auto r = run_kpr({"--provider-path", mock_dir("badcases").string(), "selftest", "--provider", "mock_badcases",
                      "--list", "--json"});
    EXPECT_EQ(r.exit_code, 1) << show(r);
    json j = parse_json(r);
    EXPECT_EQ(j["count"], 6) << j.dump(2);
    EXPECT_GE(j["errors"].get<int>(), 2) << j.dump(2);
    std::string all = j.dump();
    EXPECT_TRUE(contains(all, "control character in its name 'f32 8x32 n1\\\\x0aT 0\\\\x0aE'")) << j.dump(2);
    EXPECT_TRUE(contains(all, "overrides option 'bgu', which the provider does not declare")) << j.dump(2);
    auto h = run_kpr({"--provider-path", mock_dir("badcases").string(), "selftest", "--provider", "mock_badcases", "--list"});
    EXPECT_EQ(h.exit_code, 1) << show(h);
    EXPECT_TRUE(contains(h.out, "ERROR: provider 'mock_badcases'")) << show(h);
    EXPECT_TRUE(contains(h.out, "that the provider could not describe")) << show(h);
}

TEST_F(Cli, SelftestWithNothingToRun) {
    auto r = run_kpr({"selftest", "--provider", "generic_cpu", "--filter", "no such case"});
    EXPECT_EQ(r.exit_code, 1) << show(r); // a filter that selects nothing fails: it is not a pass
    EXPECT_TRUE(contains(r.err, "no self-test cases matched --filter 'no such case'")) << show(r);
    auto k = run_kpr({"selftest", "--provider", "generic_cpu", "--filter", "Q8_0"}); // names say q8_0
    EXPECT_EQ(k.exit_code, 1) << show(k);
    EXPECT_TRUE(contains(k.err, "case-sensitive")) << show(k);
    auto u = run_kpr({"selftest", "--provider", "generic_cpx"});
    EXPECT_EQ(u.exit_code, 1) << show(u);
    EXPECT_TRUE(contains(u.err, "generic_cpx")) << show(u);
}

// ---- devices and doctor -------------------------------------------------------------------------

TEST_F(Cli, Devices) {
    auto r = run_kpr({"devices"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_TRUE(contains(r.out, "cpu")) << show(r);
    auto j = run_kpr({"devices", "--json"});
    ASSERT_EQ(j.exit_code, 0) << show(j);
    json arr = parse_json(j);
    ASSERT_TRUE(arr.is_array() && !arr.empty()) << j.out;
    EXPECT_EQ(arr[0]["id"], "cpu");
    EXPECT_EQ(arr[0]["kind"], "cpu");
    EXPECT_GE(arr[0]["threads"].get<int>(), 1);
}

TEST_F(Cli, DoctorExitsZero) {
    auto r = run_kpr({"doctor"}, {}, 600);
    ASSERT_EQ(r.exit_code, 0) << show(r);
    EXPECT_TRUE(contains(r.out, "devices")) << show(r);
    EXPECT_TRUE(contains(r.out, "generic_cpu")) << show(r);
    EXPECT_TRUE(contains(r.out, "summary:")) << show(r);
    EXPECT_TRUE(contains(r.out, "-> OK")) << show(r);
}

} // namespace

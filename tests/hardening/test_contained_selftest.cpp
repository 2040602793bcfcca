// Contained self-tests: a provider whose self-test crashes, aborts or hangs fails with the reason, the
// other cases and providers still run, and quarantine_on_failure then keeps negotiation away from it.
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>

using namespace kpr_test;

namespace {

std::string broken_dir(const std::string &variant) { return (fs::path(KPR_BROKEN_PROVIDER_DIR) / variant).string(); }

nlohmann::json results_of(const CommandResult &r) {
    try {
        return nlohmann::json::parse(r.out);
    } catch (const std::exception &e) {
        ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.all();
        return {};
    }
}

// Under AddressSanitizer a SIGSEGV is caught by ASan (report, exit 1); these tests want the plain signal.
// run_command passes this process's environment and then appends `env`, so a child would see two
// ASAN_OPTIONS and getenv finds the first: the option is set here too (ASan read this process's options at
// start-up, so it changes nothing for the test itself).
std::vector<std::pair<std::string, std::string>> segv_env() {
    const char *a = std::getenv("ASAN_OPTIONS");
    std::string v = a ? a : "";
    if (v.find("handle_segv=0") == std::string::npos) v += (v.empty() ? "" : ":") + std::string("handle_segv=0");
    setenv("ASAN_OPTIONS", v.c_str(), 1);
    return {{"ASAN_OPTIONS", v}};
}

const nlohmann::json *find_case(const nlohmann::json &j, const std::string &provider, const std::string &name) {
    for (auto &r : j["results"])
        if (r["provider"] == provider && r["case"] == name) return &r;
    return nullptr;
}

} // namespace

TEST(ContainedSelftest, SegfaultIsThatProvidersFailureAndTheRestRun) {
    // Every provider (generic_cpu too, when built), cases named "hardening ...": the broken ones' and a good one's.
    CommandResult r = run_kpr({"--no-gpu", "--provider-path", broken_dir("segv"), "--provider-path", broken_dir("selftestok"),
                               "selftest", "--json", "--filter", "hardening"},
                              segv_env());
    EXPECT_EQ(r.exit_code, 1) << r.all();
    nlohmann::json j = results_of(r);
    const nlohmann::json *bad = find_case(j, "broken_segv", "hardening bad here");
    ASSERT_NE(bad, nullptr) << r.all();
    EXPECT_EQ((*bad)["result"], "FAIL");
    EXPECT_EQ((*bad)["message"], "crashed: signal 11 in case hardening bad here (SIGSEGV)");
    // The case after the crash ran in a fresh child, the one before in the first; the other provider ran.
    for (const char *p : {"broken_segv", "broken_selftestok"})
        for (const char *ok : {"hardening ok before", "hardening ok after"}) {
            const nlohmann::json *c = find_case(j, p, ok);
            ASSERT_NE(c, nullptr) << p << " " << ok << "\n" << r.all();
            EXPECT_EQ((*c)["result"], "pass") << p << " " << ok;
        }
    EXPECT_EQ((*find_case(j, "broken_selftestok", "hardening bad here"))["result"], "pass");
    EXPECT_EQ(j["failed"], 1);
    EXPECT_EQ(j["passed"], 5);
}

TEST(ContainedSelftest, AbortIsReported) {
    CommandResult r = run_kpr({"--no-gpu", "--provider-path", broken_dir("abort"), "selftest", "--provider", "broken_abort"});
    EXPECT_EQ(r.exit_code, 1) << r.all();
    EXPECT_TRUE(contains(r.out, "broken_abort hardening bad here FAIL: crashed: signal 6 in case hardening bad here (SIGABRT)")) << r.all();
    EXPECT_TRUE(contains(r.out, "2 passed, 1 failed")) << r.out;
}

TEST(ContainedSelftest, HangIsKilledAtTheTimeLimit) {
    auto t0 = std::chrono::steady_clock::now();
    CommandResult r = run_kpr({"--no-gpu", "--provider-path", broken_dir("hang"), "selftest", "--provider", "broken_hang",
                               "--case-timeout", "1.5"},
                              {}, 60);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 1) << r.all();
    EXPECT_TRUE(contains(r.out, "broken_hang hardening bad here FAIL: hung: no result within 1.5 s in case hardening bad here (killed)")) << r.all();
    EXPECT_TRUE(contains(r.out, "2 passed, 1 failed")) << r.out;
    EXPECT_LT(s, 30.0);
}

TEST(ContainedSelftest, BadCaseTimeoutIsUsage) {
    CommandResult r = run_kpr({"--no-gpu", "selftest", "--case-timeout", "0"});
    EXPECT_EQ(r.exit_code, 2) << r.all();
    EXPECT_TRUE(contains(r.err, "--case-timeout")) << r.err;
}

TEST(ContainedSelftest, InProcessRunsInProcess) {
    // A well-behaved provider gives the same verdicts both ways.
    CommandResult a = run_kpr({"--no-gpu", "--provider-path", broken_dir("selftestok"), "selftest", "--provider",
                               "broken_selftestok", "--seed", "7", "--json"});
    CommandResult b = run_kpr({"--no-gpu", "--provider-path", broken_dir("selftestok"), "selftest", "--provider",
                               "broken_selftestok", "--seed", "7", "--json", "--in-process"});
    EXPECT_EQ(a.exit_code, 0) << a.all();
    EXPECT_EQ(b.exit_code, 0) << b.all();
    nlohmann::json ja = results_of(a), jb = results_of(b);
    ASSERT_EQ(ja["results"].size(), jb["results"].size());
    for (size_t i = 0; i < ja["results"].size(); ++i) {
        EXPECT_EQ(ja["results"][i]["case"], jb["results"][i]["case"]);
        EXPECT_EQ(ja["results"][i]["error"], jb["results"][i]["error"]) << ja["results"][i]["case"];
    }
    // And in process, the crash takes the whole command down: that is what containment is for.
    CommandResult c = run_kpr({"--no-gpu", "--provider-path", broken_dir("segv"), "selftest", "--provider", "broken_segv",
                               "--in-process"},
                              segv_env());
    EXPECT_NE(c.exit_code, 0);
    EXPECT_NE(c.exit_code, 1);
}

TEST(ContainedSelftest, QuarantineDeclinesAProviderThatFailedHere) {
    TempDir t;
    fs::path state = t.path() / "state" / "selftest-state.json";
    fs::path on = t.write("on.toml", "[runtime]\nquarantine_on_failure = true\nstate_file = \"" + state.string() + "\"\n");
    fs::path off = t.write("off.toml", "[runtime]\nstate_file = \"" + state.string() + "\"\n");
    fs::path per = t.write("per.toml", "[runtime]\nstate_file = \"" + state.string() +
                                           "\"\n[providers.broken_segv]\nquarantine_on_failure = true\n");
    std::vector<std::string> plan = {"plan", "--type", "f32", "--rows", "64", "--cols", "64", "--explain"};
    auto kpr = [&](const fs::path &cfg, std::vector<std::string> args) {
        args.insert(args.begin(), {"--no-gpu", "--config", cfg.string(), "--provider-path", broken_dir("segv"),
                                   "--provider-path", broken_dir("good")});
        return run_kpr(args, segv_env());
    };
    // Before any self-test: broken_segv (score 1000) wins f32.
    CommandResult p0 = kpr(on, plan);
    EXPECT_TRUE(contains(p0.out, "winner: broken_segv")) << p0.all();
    // The self-test fails and is recorded.
    CommandResult st = kpr(on, {"selftest", "--provider", "broken_segv"});
    EXPECT_EQ(st.exit_code, 1) << st.all();
    ASSERT_TRUE(fs::exists(state)) << st.all();
    std::ifstream in(state);
    nlohmann::json s = nlohmann::json::parse(in);
    ASSERT_EQ(s["records"].size(), 1u) << s.dump();
    EXPECT_EQ(s["records"][0]["provider"], "broken_segv");
    EXPECT_EQ(s["records"][0]["device"], "cpu");
    EXPECT_EQ(s["records"][0]["sha256"].get<std::string>().size(), 64u);
    // Quarantined: declined with the recorded reason; generic_cpu wins.
    CommandResult p1 = kpr(on, plan);
    EXPECT_EQ(p1.exit_code, 0) << p1.all();
    EXPECT_TRUE(contains(p1.out, "winner: broken_good")) << p1.out;
    EXPECT_TRUE(contains(p1.out, "quarantined: failed its self-test on this machine (cpu, ")) << p1.out;
    EXPECT_TRUE(contains(p1.out, "crashed: signal 11 in case hardening bad here")) << p1.out;
    // Per provider works too; without the setting the record is ignored.
    EXPECT_TRUE(contains(kpr(per, plan).out, "winner: broken_good"));
    EXPECT_TRUE(contains(kpr(off, plan).out, "winner: broken_segv"));
    // A filtered passing run does not clear the record; a failing provider keeps it.
    kpr(on, {"selftest", "--provider", "broken_segv", "--filter", "ok"});
    EXPECT_TRUE(contains(kpr(on, plan).out, "winner: broken_good"));
}

TEST(ContainedSelftest, ARebuiltLibraryIsNotQuarantined) {
    TempDir t;
    fs::path state = t.path() / "selftest-state.json";
    fs::path dir = t.dir("p");
    fs::copy_file(fs::path(broken_dir("segv")) / "libkpr_broken_segv.so", dir / "libkpr_broken_segv.so");
    fs::path on = t.write("on.toml", "[runtime]\nquarantine_on_failure = true\nstate_file = \"" + state.string() + "\"\n");
    std::vector<std::string> base = {"--no-gpu", "--config", on.string(), "--provider-path", dir.string()};
    auto with = [&](std::vector<std::string> a) {
        a.insert(a.begin(), base.begin(), base.end());
        return run_kpr(a, segv_env());
    };
    with({"selftest", "--provider", "broken_segv"});
    EXPECT_TRUE(contains(with({"plan", "--type", "f32", "--rows", "8", "--cols", "32", "--explain"}).out, "quarantined"));
    // Another build of the library (here: a byte appended) is a new library: no quarantine.
    std::ofstream(dir / "libkpr_broken_segv.so", std::ios::app) << '\0';
    CommandResult p = with({"plan", "--type", "f32", "--rows", "8", "--cols", "32", "--explain"});
    EXPECT_FALSE(contains(p.out, "quarantined")) << p.out;
    EXPECT_TRUE(contains(p.out, "winner: broken_segv")) << p.out;
}

// A kpr outside the build tree, so it loads only the providers a test names (not the build's generic_cpu,
// whose full self-test set `doctor` would otherwise run).
static fs::path lone_kpr(const TempDir &t) {
    fs::path bin = t.dir("bin") / "kpr";
    fs::copy_file(kpr_binary(), bin);
    fs::permissions(bin, fs::perms::owner_all, fs::perm_options::add);
    return bin;
}

TEST(ContainedSelftest, DoctorSurvivesACrashingSelftest) {
    TempDir t;
    fs::path kpr = lone_kpr(t);
    fs::path state = t.path() / "state";
    auto env = segv_env();
    env.emplace_back("XDG_STATE_HOME", state.string());
    CommandResult r = run_command({kpr.string(), "--no-gpu", "--provider-path", broken_dir("segv"), "--provider-path",
                                   broken_dir("selftestok"), "doctor", "--no-workload"},
                                  env, 300);
    // doctor finished and reported the failure: no signal, the summary printed.
    EXPECT_EQ(r.exit_code, 1) << r.all();
    EXPECT_TRUE(contains(r.out, "FAIL broken_segv hardening bad here on cpu: crashed: signal 11 in case hardening bad here (SIGSEGV)"))
        << r.all();
    EXPECT_TRUE(contains(r.out, "2 passed, 1 failed, 0 skipped")) << r.out;  // broken_segv: the cases around the crash ran
    EXPECT_TRUE(contains(r.out, "3 passed, 0 failed, 0 skipped")) << r.out;  // broken_selftestok
    EXPECT_TRUE(contains(r.out, "self-tests 5 passed, 1 failed")) << r.out;
    EXPECT_TRUE(contains(r.out, "-> PROBLEMS")) << r.out;
    // The failure is recorded for quarantine, as `kpr selftest` records it.
    EXPECT_TRUE(fs::exists(state / "kpr" / "selftest-state.json")) << r.all();
    // --json stays clean JSON (the children's output goes to stderr).
    CommandResult j = run_command({kpr.string(), "--no-gpu", "--provider-path", broken_dir("segv"), "doctor",
                                   "--no-workload", "--json"},
                                  env, 300);
    EXPECT_EQ(j.exit_code, 1) << j.all();
    nlohmann::json doc = results_of(j);
    EXPECT_EQ(doc["selftests"]["failed"], 1) << j.out;
    EXPECT_EQ(doc["selftests"]["passed"], 2) << j.out;
    EXPECT_EQ(doc["ok"], false);
}

TEST(ContainedSelftest, CalibrateExcludesAProviderWhoseSelftestCrashes) {
    TempDir t;
    fs::path kpr = lone_kpr(t);
    fs::path shapes = t.write("shapes.txt", "f32 64 64\n");
    fs::path out = t.path() / "calibration.toml";
    CommandResult r = run_command({kpr.string(), "--no-gpu", "--provider-path", broken_dir("segvf32"), "--provider-path",
                                   broken_dir("good"), "calibrate", "--shapes", shapes.string(), "--output", out.string(),
                                   "--reps", "2", "--warmup", "0", "--json"},
                                  segv_env(), 300);
    EXPECT_EQ(r.exit_code, 0) << r.all();
    nlohmann::json j = results_of(r);
    ASSERT_TRUE(j.is_array() && j.size() == 1) << r.all();
    EXPECT_EQ(j[0]["winner"], "broken_good") << r.out;
    std::string why = j[0]["excluded"].value("broken_segvf32", "");
    EXPECT_TRUE(contains(why, "crashed: signal 11 in case f32_hardening bad here (SIGSEGV)")) << r.out;
    EXPECT_TRUE(fs::exists(out));
}

// A provider's case names and messages need not be UTF-8: the contained runner's protocol, the --json output
// and the self-test state file stay valid JSON (the bad bytes become U+FFFD), and no temporary is left.
TEST(ContainedSelftest, NamesAndMessagesThatAreNotUtf8) {
    TempDir t;
    fs::path state = t.path() / "state" / "selftest-state.json";
    fs::path cfg = t.write("cfg.toml", "[runtime]\nstate_file = \"" + state.string() + "\"\n");
    CommandResult r = run_kpr({"--no-gpu", "--config", cfg.string(), "--provider-path", broken_dir("latin1"),
                               "selftest", "--provider", "broken_latin1", "--json"});
    EXPECT_EQ(r.exit_code, 1) << r.all();  // one case fails
    EXPECT_FALSE(contains(r.all(), "json.exception")) << r.all();
    nlohmann::json j = results_of(r);
    ASSERT_EQ(j["results"].size(), 3u) << r.out;
    const std::string fffd = "\xef\xbf\xbd";
    EXPECT_EQ(j["results"][1]["case"], "caf" + fffd + " " + fffd + " hardening bad here") << r.out;
    EXPECT_EQ(j["results"][1]["result"], "FAIL") << r.out;
    EXPECT_TRUE(contains(j["results"][1]["message"].get<std::string>(), "r" + fffd + "sultat " + fffd + " faux")) << r.out;
    // The failure is recorded; the file parses; nothing else is in its folder.
    ASSERT_TRUE(fs::exists(state)) << r.all();
    std::ifstream in(state);
    nlohmann::json s;
    ASSERT_NO_THROW(s = nlohmann::json::parse(in));
    ASSERT_EQ(s["records"].size(), 1u) << s.dump();
    EXPECT_EQ(s["records"][0]["provider"], "broken_latin1");
    size_t files = 0;
    for (auto &e : fs::directory_iterator(state.parent_path())) {
        ++files;
        EXPECT_EQ(e.path(), state) << "left behind";
    }
    EXPECT_EQ(files, 1u);
}

// A provider may declare a valid case far too large for this machine: the case fails with a message naming
// the op and the bytes it needs (it was "std::bad_alloc"), and the run goes on to report it.
TEST(ContainedSelftest, CaseTooLargeForMemory) {
    for (bool in_process : {false, true}) {
        SCOPED_TRACE(in_process ? "in process" : "contained");
        std::vector<std::string> args = {"--no-gpu", "--provider-path", broken_dir("huge"), "selftest", "--provider",
                                         "broken_huge", "--json"};
        if (in_process) args.push_back("--in-process");
        CommandResult r = run_kpr(args);
        EXPECT_EQ(r.exit_code, 1) << r.all();
        nlohmann::json j = results_of(r);
        ASSERT_EQ(j["results"].size(), 1u) << r.out;
        EXPECT_EQ(j["results"][0]["result"], "FAIL") << r.out;
        const std::string msg = j["results"][0]["message"].get<std::string>();
        EXPECT_TRUE(contains(msg, "gemv f32 1000000000x1000000000 ncols 1")) << msg;
        EXPECT_TRUE(contains(msg, "of host memory, but only")) << msg;
        EXPECT_FALSE(contains(msg, "bad_alloc")) << msg;
    }
}

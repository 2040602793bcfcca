// Trusted loading: files and folders writable by others, or owned by another user, are refused unless the
// config allows them; a SHA-256 pin is checked before the library is mapped; under secure execution the
// environment cannot point kpr at other providers or another config.
#include "test_support.hpp"

#include <kpr/config.hpp>
#include <kpr/ggml_blocks.h>
#include <kpr/runtime.hpp>

#include <gtest/gtest.h>

#include <cctype>
#include <dlfcn.h>
#include <stdexcept>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace kpr_test;

namespace {

fs::path broken_dir(const std::string &variant) { return fs::path(KPR_BROKEN_PROVIDER_DIR) / variant; }

fs::path copy_good(const fs::path &dir) {
    fs::create_directories(dir);
    fs::path to = dir / "libkpr_broken_good.so";
    fs::copy_file(broken_dir("good") / "libkpr_broken_good.so", to, fs::copy_options::overwrite_existing);
    return to;
}

const kpr::ProviderInfo provider(const kpr::Runtime &rt, const std::string &name) {
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, name);
    if (!p) throw std::runtime_error("provider " + name + " not listed");
    return *p;
}

kpr::Runtime make(const fs::path &dir, const std::string &config_text = "") {
    kpr::RuntimeOptions o = isolated_options({dir});
    static int n = 0;
    if (!config_text.empty()) {
        fs::path cfg = dir.parent_path() / ("kpr" + std::to_string(n++) + ".toml");
        std::ofstream(cfg) << config_text;
        o.config_file = cfg;
    }
    return kpr::Runtime::create(o);
}

std::string fmt_mode(int mode) {
    char b[16];
    std::snprintf(b, sizeof b, "(mode %04o)", mode);
    return b;
}

std::string sha256sum(const fs::path &f) {
    CommandResult r = run_command({"/usr/bin/env", "sha256sum", f.string()});
    if (r.exit_code != 0) return "";
    return r.out.substr(0, 64);
}

} // namespace

TEST(Trust, PrivateFileAndFolderLoad) {
    TempDir t;
    copy_good(t.path() / "p");
    fs::permissions(t.path() / "p", fs::perms(0755));
    fs::permissions(t.path() / "p" / "libkpr_broken_good.so", fs::perms(0755));
    EXPECT_EQ(provider(make(t.path() / "p"), "broken_good").state, kpr::ProviderState::Loaded);
}

TEST(Trust, WritableFileIsRefused) {
    for (int mode : {0666, 0775, 0757}) {
        SCOPED_TRACE(mode);
        TempDir t;
        fs::path f = copy_good(t.path() / "p");
        ASSERT_EQ(chmod(f.c_str(), mode), 0);
        auto p = provider(make(t.path() / "p"), "broken_good");
        EXPECT_EQ(p.state, kpr::ProviderState::Failed);
        EXPECT_TRUE(contains(p.reason, "refused, untrusted: the file")) << p.reason;
        EXPECT_TRUE(contains(p.reason, fmt_mode(mode))) << p.reason;
        EXPECT_TRUE(contains(p.reason, "allow_untrusted_providers")) << p.reason;
    }
}

TEST(Trust, WritableFolderIsRefused) {
    TempDir t;
    fs::path f = copy_good(t.path() / "p");
    ASSERT_EQ(chmod((t.path() / "p").c_str(), 0777), 0);
    auto p = provider(make(t.path() / "p"), "broken_good");
    EXPECT_EQ(p.state, kpr::ProviderState::Failed);
    EXPECT_TRUE(contains(p.reason, "the folder " + (t.path() / "p").string() + " is writable by group and others (mode 0777)"))
        << p.reason;
}

TEST(Trust, SymlinkIntoAWritableFolderIsRefused) {
    TempDir t;
    fs::path real = copy_good(t.path() / "open");
    ASSERT_EQ(chmod((t.path() / "open").c_str(), 0777), 0);
    fs::create_directories(t.path() / "p");
    fs::create_symlink(real, t.path() / "p" / "libkpr_broken_good.so");
    auto p = provider(make(t.path() / "p"), "broken_good");
    EXPECT_EQ(p.state, kpr::ProviderState::Failed);
    EXPECT_TRUE(contains(p.reason, "the folder " + (t.path() / "open").string())) << p.reason;
}

TEST(Trust, OwnedByAnotherUserIsRefused) {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
    TempDir t;
    fs::path f = copy_good(t.path() / "p");
    ASSERT_EQ(chown(f.c_str(), 4242, 4242), 0);
    auto p = provider(make(t.path() / "p"), "broken_good");
    EXPECT_EQ(p.state, kpr::ProviderState::Failed);
    EXPECT_TRUE(contains(p.reason, "is owned by uid 4242, neither this process's user (uid 0) nor root")) << p.reason;
}

TEST(Trust, ConfigCanAllowUntrusted) {
    TempDir t;
    fs::path f = copy_good(t.path() / "p");
    ASSERT_EQ(chmod(f.c_str(), 0666), 0);
    ASSERT_EQ(chmod((t.path() / "p").c_str(), 0777), 0);
    auto p = provider(make(t.path() / "p", "[runtime]\nallow_untrusted_providers = true\n"), "broken_good");
    EXPECT_EQ(p.state, kpr::ProviderState::Loaded) << p.reason;
}

TEST(Trust, Sha256PinMatches) {
    TempDir t;
    fs::path f = copy_good(t.path() / "p");
    std::string h = sha256sum(f);
    if (h.empty()) GTEST_SKIP() << "no sha256sum";
    kpr::Runtime rt = make(t.path() / "p", "[providers.broken_good]\nsha256 = \"" + h + "\"\n");
    EXPECT_EQ(provider(rt, "broken_good").state, kpr::ProviderState::Loaded) << provider(rt, "broken_good").reason;
    // And it works: it was mapped from the descriptor that was hashed.
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 2, 32, 1), "cpu", "broken_good");
    std::vector<float> w(64, 1.0f), x(32, 1.0f), y(2);
    plan->prepare(w.data(), 256).run(x.data(), y.data(), 1);
    EXPECT_EQ(y[0], 32.0f);
    // Upper-case hex is the same pin.
    std::string upper = h;
    for (auto &c : upper) c = char(std::toupper(c));
    EXPECT_EQ(provider(make(t.path() / "p", "[providers.broken_good]\nsha256 = \"" + upper + "\"\n"), "broken_good").state,
              kpr::ProviderState::Loaded);
}

TEST(Trust, Sha256MismatchIsRefusedBeforeLoading) {
    TempDir t;
    copy_good(t.path() / "p");
    std::string wrong(64, 'a');
    kpr::Runtime rt = make(t.path() / "p", "[providers.broken_good]\nsha256 = \"" + wrong + "\"\npriority = 3\n");
    auto p = provider(rt, "broken_good");
    EXPECT_EQ(p.state, kpr::ProviderState::Failed);
    EXPECT_TRUE(contains(p.reason, "refused: its SHA-256 is ")) << p.reason;
    EXPECT_TRUE(contains(p.reason, "but the config pins " + wrong)) << p.reason;
    EXPECT_TRUE(contains(p.reason, "providers.broken_good.sha256")) << p.reason;
    // Not loaded at all: the library is not mapped into this process.
    void *h = dlopen((t.path() / "p" / "libkpr_broken_good.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
    EXPECT_EQ(h, nullptr);
    if (h) dlclose(h);
    // The rest still works.
    EXPECT_TRUE(rt.plan(kpr::gemv(KPR_TYPE_F32, 2, 32, 1), "cpu")->ok());
}

TEST(Trust, Sha256MustLookLikeOne) {
    for (const char *bad : {"abc", "zz", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg"}) {
        SCOPED_TRACE(bad);
        try {
            kpr::Config::parse(std::string("[providers.x]\nsha256 = \"") + bad + "\"\n", "/etc/kpr.toml");
            FAIL() << "accepted";
        } catch (const kpr::Error &e) {
            EXPECT_TRUE(contains(e.what(), "/etc/kpr.toml:2:10: providers.x.sha256: expected 64 hexadecimal digits")) << e.what();
        }
    }
    try {
        kpr::Config::parse("[[rules]]\ndevice = \"cpu\"\n[rules.providers.x]\nsha256 = \"" + std::string(64, 'a') + "\"\n", "k.toml");
        FAIL() << "a pin in a rule was accepted";
    } catch (const kpr::Error &e) {
        EXPECT_TRUE(contains(e.what(), "k.toml:4:1: rules[0].providers.x.sha256: unknown key")) << e.what();
    }
    EXPECT_THROW(kpr::Config::parse("[runtime]\nallow_untrusted_providers = \"yes\"\n", "k.toml"), kpr::Error);
    EXPECT_THROW(kpr::Config::parse("[runtime]\nquarantine_on_failure = 1\n", "k.toml"), kpr::Error);
    kpr::Config c = kpr::Config::parse("[runtime]\nallow_untrusted_providers = true\nquarantine_on_failure = true\n"
                                       "state_file = \"st.json\"\n[providers.x]\nquarantine_on_failure = false\n",
                                       "/etc/kpr/k.toml");
    ASSERT_TRUE(c.allow_untrusted_providers && c.quarantine_on_failure && c.state_file);
    EXPECT_TRUE(c.allow_untrusted_providers->value);
    EXPECT_EQ(*c.state_file, fs::path("/etc/kpr/st.json"));
    EXPECT_FALSE(c.effective("x", "cpu", "cpu", "").quarantine_on_failure->value);
}

TEST(Trust, SecureExecutionIgnoresProviderPathAndConfig) {
    TempDir t;
    copy_good(t.path() / "p");
    fs::path cfg = t.write("kpr.toml", "this is = not toml [\n");
    // Without secure execution both are honoured: the bad config is an error.
    CommandResult plain = run_kpr({"--no-gpu", "providers"}, {{"KPR_PROVIDER_PATH", (t.path() / "p").string()}, {"KPR_CONFIG", cfg.string()}});
    EXPECT_EQ(plain.exit_code, 1) << plain.all();
    CommandResult plain2 = run_kpr({"--no-gpu", "providers"}, {{"KPR_PROVIDER_PATH", (t.path() / "p").string()}});
    EXPECT_TRUE(contains(plain2.out, "broken_good")) << plain2.all();
    // With it, neither is: the command works, lists no broken_good, and says what it ignored.
    CommandResult r = run_kpr({"--no-gpu", "providers"}, {{"KPR_SECURE_EXECUTION", "1"},
                                                           {"KPR_PROVIDER_PATH", (t.path() / "p").string()},
                                                           {"KPR_CONFIG", cfg.string()}});
    EXPECT_EQ(r.exit_code, 0) << r.all();
    EXPECT_FALSE(contains(r.out, "broken_good")) << r.out;
    EXPECT_TRUE(contains(r.err, "secure execution (setuid, setgid or capabilities): ignored KPR_PROVIDER_PATH=")) << r.err;
    EXPECT_TRUE(contains(r.err, "KPR_CONFIG=" + cfg.string())) << r.err;
    // An explicit --provider-path is the caller's own choice and still counts.
    CommandResult r2 = run_kpr({"--no-gpu", "--provider-path", (t.path() / "p").string(), "providers"}, {{"KPR_SECURE_EXECUTION", "1"}});
    EXPECT_TRUE(contains(r2.out, "broken_good")) << r2.all();
}

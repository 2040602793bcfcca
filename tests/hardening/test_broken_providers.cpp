// The broken-provider corpus: for each way a provider library can be wrong, the runtime keeps running
// (the generic_cpu provider still serves an op), and the provider is reported failed with the reason.
#include "test_support.hpp"

#include <kpr/formats.hpp>
#include <kpr/runtime.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <elf.h>
#include <fstream>
#include <random>
#include <sstream>

using namespace kpr_test;

namespace {

fs::path broken_dir(const std::string &variant) { return fs::path(KPR_BROKEN_PROVIDER_DIR) / variant; }

// The runtime over `dirs`, then a plan and a run through generic_cpu to show it still works.
kpr::Runtime runtime_over(std::vector<fs::path> dirs, const std::optional<fs::path> &config = {}) {
    dirs.push_back(broken_dir("control"));  // a correct provider: the runtime must keep serving through it
    kpr::RuntimeOptions o = isolated_options(dirs);
    if (config) o.config_file = *config;
    return kpr::Runtime::create(o);
}

void still_serves(const kpr::Runtime &rt) {
    for (const char *p : {"broken_control", "generic_cpu"}) {
        if (!rt.loaded(p)) {
            EXPECT_STRNE(p, "broken_control") << "the control provider did not load";
            continue;
        }
        auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu", p);
        ASSERT_TRUE(plan->ok()) << plan->explain();
        std::vector<float> w(4 * 32, 0.5f), x(32, 2.0f), y(4, 0.0f);
        kpr::PreparedOp op = plan->prepare(w.data(), w.size() * 4);
        op.run(x.data(), y.data(), 1);
        for (float v : y) EXPECT_FLOAT_EQ(v, 32.0f) << p;
    }
}

void expect_failed(const kpr::Runtime &rt, const std::string &name, const std::string &reason_part) {
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, name);
    ASSERT_NE(p, nullptr) << "provider " << name << " not listed";
    EXPECT_EQ(p->state, kpr::ProviderState::Failed) << name << ": " << p->reason;
    EXPECT_TRUE(contains(p->reason, reason_part)) << name << ": reason '" << p->reason << "' lacks '" << reason_part << "'";
    still_serves(rt);
}

void write_bytes(const fs::path &p, const std::string &bytes) {
    fs::create_directories(p.parent_path());
    std::ofstream f(p, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A 64-byte ELF header for a shared object of another machine.
std::string elf_header(uint16_t machine, uint16_t type = ET_DYN, unsigned char cls = ELFCLASS64) {
    Elf64_Ehdr h{};
    std::memcpy(h.e_ident, ELFMAG, SELFMAG);
    h.e_ident[EI_CLASS] = cls;
    h.e_ident[EI_DATA] = ELFDATA2LSB;
    h.e_ident[EI_VERSION] = EV_CURRENT;
    h.e_type = type;
    h.e_machine = machine;
    h.e_version = EV_CURRENT;
    h.e_ehsize = sizeof h;
    std::string s(reinterpret_cast<const char *>(&h), sizeof h);
    s.resize(4096, '\0');
    return s;
}

} // namespace

TEST(BrokenProviders, CorrectOneLoadsAndServes) {
    kpr::Runtime rt = runtime_over({broken_dir("good")});
    auto ps = rt.providers();
    const kpr::ProviderInfo *p = find_provider(ps, "broken_good");
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->state, kpr::ProviderState::Loaded) << p->reason;
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu");
    EXPECT_EQ(plan->provider(), "broken_good");  // the control: its score wins when it answers sanely
}

TEST(BrokenProviders, NotAnElf) {
    TempDir t;
    write_garbage_library(t.path(), "garbage");
    write_bytes(t.path() / "libkpr_text.so", "#!/bin/sh\necho this is not a library\n");
    write_bytes(t.path() / "libkpr_empty.so", "");
    kpr::Runtime rt = runtime_over({t.path()});
    expect_failed(rt, "garbage", "not an ELF file");
    expect_failed(rt, "text", "not an ELF file");
    expect_failed(rt, "empty", "the file is empty");
}

TEST(BrokenProviders, ElfForAnotherMachine) {
    TempDir t;
    write_bytes(t.path() / "libkpr_arm.so", elf_header(EM_AARCH64));
    write_bytes(t.path() / "libkpr_ppc.so", elf_header(EM_PPC64));
    write_bytes(t.path() / "libkpr_i386.so", elf_header(EM_386, ET_DYN, ELFCLASS32));
    kpr::Runtime rt = runtime_over({t.path()});
    expect_failed(rt, "arm", "an ELF file for aarch64, this machine is x86-64");
    expect_failed(rt, "ppc", "an ELF file for ppc64");
    expect_failed(rt, "i386", "32-bit");
}

TEST(BrokenProviders, RealAarch64Library) {
    fs::path f = broken_dir("aarch64") / "libkpr_broken_aarch64.so";
    if (!fs::exists(f)) GTEST_SKIP() << "clang/lld could not build an aarch64 library here";
    kpr::Runtime rt = runtime_over({broken_dir("aarch64")});
    expect_failed(rt, "broken_aarch64", "an ELF file for aarch64");
}

TEST(BrokenProviders, RelocatableObjectNamedLikeALibrary) {
    kpr::Runtime rt = runtime_over({broken_dir("object")});
    expect_failed(rt, "broken_object", "relocatable object");
}

TEST(BrokenProviders, LoaderFailures) {
    struct Case {
        const char *variant, *name, *reason;
    } cases[] = {
        {"noentry", "broken_noentry", "no entry point"},
        {"major2", "broken_major2", "speaks provider ABI 2.0"},
        {"throwentry", "broken_throwentry", "threw a C++ exception out of kpr_provider_entry"},
        {"initfail", "broken_initfail", "init failed (device error): broken_initfail: init failed: no widget"},
        {"throwinit", "broken_throwinit", "threw a C++ exception during initialisation"},
        {"nullidentity", "broken_nullidentity", "identity() returned null"},
        {"nullname", "broken_nullname", "invalid name ''"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.variant);
        kpr::Runtime rt = runtime_over({broken_dir(c.variant)});
        expect_failed(rt, c.name, c.reason);
    }
}

TEST(BrokenProviders, NameAlreadyTaken) {
    kpr::Runtime rt = runtime_over({broken_dir("good"), broken_dir("twin")});
    auto ps = rt.providers();
    int loaded = 0, failed = 0;
    for (auto &p : ps)
        if (p.name == "broken_good") {
            if (p.state == kpr::ProviderState::Loaded) {
                ++loaded;
                EXPECT_TRUE(contains(p.file, "/good/")) << p.file;
            }
            if (p.state == kpr::ProviderState::Failed) {
                ++failed;
                EXPECT_TRUE(contains(p.reason, "duplicate name 'broken_good': already loaded from")) << p.reason;
            }
        }
    EXPECT_EQ(loaded, 1);
    EXPECT_EQ(failed, 1);
    still_serves(rt);
    // The explanation marks the winning answer only, not the failed twin's answer that bears the same name.
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu");
    ASSERT_EQ(plan->provider(), "broken_good") << plan->explain();
    const std::string ex = plan->explain();
    int marked = 0, named = 0;
    std::istringstream lines(ex);
    for (std::string l; std::getline(lines, l);) {
        if (contains(l, " broken_good ")) ++named;
        if (l.rfind("* ", 0) == 0) {
            ++marked;
            EXPECT_TRUE(contains(l, "accepted")) << l;
        }
    }
    EXPECT_EQ(named, 2) << ex;
    EXPECT_EQ(marked, 1) << ex;
}

TEST(BrokenProviders, AllAtOnceInOneRuntime) {
    std::vector<fs::path> dirs;
    for (const char *v : {"noentry", "major2", "throwentry", "initfail", "throwinit", "nullidentity", "nullname",
                          "throwprepare", "throwrun", "impossible", "accepted7", "noreason", "segv", "hang", "object"})
        dirs.push_back(broken_dir(v));
    kpr::Runtime rt = runtime_over(dirs);
    still_serves(rt);
    // Negotiation over all of them: the broken answers never win.
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu");
    EXPECT_TRUE(plan->ok());
    EXPECT_NE(plan->provider(), "broken_impossible") << plan->explain();
    EXPECT_NE(plan->provider(), "broken_accepted7") << plan->explain();
}

TEST(BrokenProviders, ExceptionsOutOfPrepareAndRunAreErrors) {
    {
        kpr::Runtime rt = runtime_over({broken_dir("throwprepare")});
        auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu", "broken_throwprepare");
        ASSERT_TRUE(plan->ok());
        std::vector<float> w(4 * 32, 1.0f);
        try {
            plan->prepare(w.data(), w.size() * 4);
            FAIL() << "prepare did not throw";
        } catch (const kpr::Error &e) {
            EXPECT_TRUE(contains(e.what(), "provider 'broken_throwprepare': prepare: threw a C++ exception across the ABI")) << e.what();
        }
        still_serves(rt);
    }
    {
        kpr::Runtime rt = runtime_over({broken_dir("throwrun")});
        auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu", "broken_throwrun");
        ASSERT_TRUE(plan->ok());
        std::vector<float> w(4 * 32, 1.0f), x(32, 1.0f), y(4);
        kpr::PreparedOp op = plan->prepare(w.data(), w.size() * 4);
        try {
            op.run(x.data(), y.data(), 1);
            FAIL() << "run did not throw";
        } catch (const kpr::Error &e) {
            EXPECT_TRUE(contains(e.what(), "provider 'broken_throwrun': run: threw a C++ exception across the ABI")) << e.what();
        }
        still_serves(rt);
    }
}

TEST(BrokenProviders, NonsenseOffersFailTheAnswer) {
    struct Case {
        const char *variant, *name, *reason;
    } cases[] = {
        {"impossible", "broken_impossible", "accepted with an impossible offer: 18446744073709551615 prepared bytes"},
        {"accepted7", "broken_accepted7", "malformed offer (accepted = 7"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.variant);
        kpr::Runtime rt = runtime_over({broken_dir(c.variant)});
        auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu");
        ASSERT_TRUE(plan->ok());
        EXPECT_NE(plan->provider(), c.name) << plan->explain();
        const kpr::Answer *a = find_answer(*plan, c.name);
        ASSERT_NE(a, nullptr);
        EXPECT_EQ(a->state, kpr::AnswerState::Failed);
        EXPECT_TRUE(contains(a->reason, c.reason)) << a->reason;
    }
}

TEST(BrokenProviders, UnterminatedDeclineReasonIsCut) {
    kpr::Runtime rt = runtime_over({broken_dir("noreason")});
    auto plan = rt.plan(kpr::gemv(KPR_TYPE_F32, 4, 32, 1), "cpu");
    const kpr::Answer *a = find_answer(*plan, "broken_noreason");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->state, kpr::AnswerState::Declined);
    EXPECT_EQ(a->reason.size(), size_t(KPR_REASON_CAPACITY - 1));
    EXPECT_NE(plan->provider(), "broken_noreason");
}

TEST(BrokenProviders, ConfigNamingAFailedProviderIsNoError) {
    // A config that configures a provider which then fails to load must not stop the runtime.
    TempDir t;
    fs::path cfg = t.write("kpr.toml", "[providers.broken_initfail]\npriority = 5\n");
    kpr::Runtime rt = runtime_over({broken_dir("initfail")}, cfg);
    expect_failed(rt, "broken_initfail", "init failed");
}

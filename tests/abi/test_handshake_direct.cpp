// The handshake driven by hand (dlopen, no core): the real generic_cpu provider and the C provider must
// answer an offer of their major, pick the newest version both sides speak, and refuse another major
// with KPR_ERR_VERSION, a message, and no table.
#include <kpr/provider.h>

#include <gtest/gtest.h>

#include "test_support.hpp"

#include <cstring>
#include <dlfcn.h>

namespace {

using namespace kpr_test;

void log_sink(void *, int32_t, const char *) {}

struct Library {
    void *handle = nullptr;
    kpr_provider_entry_fn entry = nullptr;
    explicit Library(const fs::path &file) {
        handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle) entry = reinterpret_cast<kpr_provider_entry_fn>(dlsym(handle, KPR_PROVIDER_ENTRY_SYMBOL));
    }
    // Never dlclose: a provider may keep threads alive (the core never unloads either).
};

struct Offer {
    kpr_host_api host{sizeof(kpr_host_api), KPR_ABI_VERSION, log_sink, nullptr, KPR_LOG_ERROR};
    kpr_handshake_offer offer{};
    kpr_handshake_answer answer{};
    kpr_error err{};
    Offer(uint32_t lo, uint32_t hi) {
        offer = {sizeof offer, lo, hi, 0, &host};
        answer = {sizeof answer, 0xdeadbeef, nullptr};
        err.struct_size = sizeof err;
    }
};

class DirectHandshake : public ::testing::TestWithParam<const char *> {
protected:
    fs::path file() const {
        std::string p = GetParam();
        return p == std::string("generic_cpu") ? provider_build_dir() / "libkpr_generic_cpu.so"
                                               : mock_file("cprovider", "mock_c");
    }
};

TEST_P(DirectHandshake, AcceptsTheCoresRange) {
    Library lib(file());
    ASSERT_NE(lib.handle, nullptr) << dlerror();
    ASSERT_NE(lib.entry, nullptr) << "no " << KPR_PROVIDER_ENTRY_SYMBOL;
    Offer o(KPR_MAKE_VERSION(1, 0), KPR_ABI_VERSION);
    ASSERT_EQ(lib.entry(&o.offer, &o.answer, &o.err), KPR_OK) << o.err.message;
    EXPECT_EQ(o.answer.abi_version, KPR_ABI_VERSION);
    ASSERT_NE(o.answer.table, nullptr);
    EXPECT_GE(o.answer.table->struct_size, offsetof(kpr_provider_v1, release) + sizeof(void *));
    EXPECT_EQ(KPR_VERSION_MAJOR(o.answer.table->abi_version), 1u);
    ASSERT_NE(o.answer.table->identity, nullptr);
    void *state = nullptr;
    if (o.answer.table->init) {
        kpr_error e{sizeof e, {}};
        ASSERT_EQ(o.answer.table->init(&o.host, &state, &e), KPR_OK) << e.message;
    }
    const kpr_provider_identity *id = o.answer.table->identity(state);
    ASSERT_NE(id, nullptr);
    EXPECT_GE(id->struct_size, offsetof(kpr_provider_identity, opt_in));
    EXPECT_EQ(std::string(id->name), GetParam());
    EXPECT_EQ(id->device_kind, (uint32_t)KPR_DEVICE_CPU);
}

TEST_P(DirectHandshake, ANewerCoreGetsTheProvidersOwnMinor) {
    Library lib(file());
    ASSERT_NE(lib.entry, nullptr);
    Offer o(KPR_MAKE_VERSION(1, 0), KPR_MAKE_VERSION(1, KPR_ABI_VERSION_MINOR + 7));
    ASSERT_EQ(lib.entry(&o.offer, &o.answer, &o.err), KPR_OK) << o.err.message;
    EXPECT_EQ(o.answer.abi_version, KPR_ABI_VERSION) << "a provider must not claim a minor it was not built for";
    EXPECT_NE(o.answer.table, nullptr);
}

TEST_P(DirectHandshake, RefusesAnotherMajor) {
    Library lib(file());
    ASSERT_NE(lib.entry, nullptr);
    Offer o(KPR_MAKE_VERSION(2, 0), KPR_MAKE_VERSION(2, 3));
    EXPECT_EQ(lib.entry(&o.offer, &o.answer, &o.err), KPR_ERR_VERSION);
    EXPECT_EQ(o.answer.table, nullptr);
    EXPECT_EQ(KPR_VERSION_MAJOR(o.answer.abi_version), 1u) << "the answer says which version it does speak";
    EXPECT_GT(std::strlen(o.err.message), 0u) << "a refusal carries a message";
}

INSTANTIATE_TEST_SUITE_P(Providers, DirectHandshake, ::testing::Values("generic_cpu", "mock_c"));

} // namespace

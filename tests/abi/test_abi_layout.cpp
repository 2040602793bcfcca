// The ABI's frozen layouts, checked at compile time in C++ (and, through abi_layout_c99.c and
// abi_layout_c11.c, in C), and the sizes each language computed compared at run time.
#include <gtest/gtest.h>

#include <type_traits>

#define KPR_LAYOUT_CHECK(c, m) static_assert(c, m)
#include "abi_layout_checks.inc"

#include "abi_layout_sizes.h"

// Structs that cross the boundary must be plain data in C++ too.
static_assert(std::is_standard_layout_v<kpr_device_desc> && std::is_trivially_copyable_v<kpr_device_desc>);
static_assert(std::is_standard_layout_v<kpr_op_desc> && std::is_trivially_copyable_v<kpr_op_desc>);
static_assert(std::is_standard_layout_v<kpr_offer> && std::is_trivially_copyable_v<kpr_offer>);
static_assert(std::is_standard_layout_v<kpr_selftest_case> && std::is_trivially_copyable_v<kpr_selftest_case>);
static_assert(std::is_standard_layout_v<kpr_provider_v1> && std::is_trivially_copyable_v<kpr_provider_v1>);
static_assert(std::is_same_v<kpr_provider_entry_fn, kpr_status (*)(const kpr_handshake_offer *,
                                                                    kpr_handshake_answer *, kpr_error *)>);

namespace {

TEST(AbiLayout, CAndCxxAgreeOnEverySize) {
    size_t cxx[KPR_ABI_N_SIZES], c99[KPR_ABI_N_SIZES], c11[KPR_ABI_N_SIZES];
    KPR_ABI_FILL_SIZES(cxx);
    kpr_abi_sizes_c99(c99);
    kpr_abi_sizes_c11(c11);
    for (int i = 0; i < KPR_ABI_N_SIZES; ++i) {
        EXPECT_EQ(cxx[i], c99[i]) << "struct #" << i << " differs between C++ and C99";
        EXPECT_EQ(cxx[i], c11[i]) << "struct #" << i << " differs between C++ and C11";
    }
}

TEST(AbiLayout, VersionMacros) {
    EXPECT_EQ(KPR_ABI_VERSION, KPR_MAKE_VERSION(KPR_ABI_VERSION_MAJOR, KPR_ABI_VERSION_MINOR));
    EXPECT_EQ(KPR_VERSION_MAJOR(KPR_ABI_VERSION), KPR_ABI_VERSION_MAJOR);
    EXPECT_EQ(KPR_VERSION_MINOR(KPR_ABI_VERSION), KPR_ABI_VERSION_MINOR);
    EXPECT_STREQ(KPR_PROVIDER_ENTRY_SYMBOL, "kpr_provider_entry");
}

} // namespace

// Unit tests of the formats reference: the type table, half conversions, dequantization against hand-built
// blocks and against the format's own statement (formats README), quantizers, random blocks, CRCs.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>
#include <kpr/provider.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

using namespace kpr::formats;

namespace {

template <typename B>
std::vector<float> deq(uint32_t type, const B &b) {
    const TypeInfo *t = type_info(type);
    std::vector<float> out(t->block_size);
    dequantize_row(type, &b, out.data(), t->block_size);
    return out;
}

float bits_to_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint32_t float_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

} // namespace

// ---- type table -----------------------------------------------------------------------------------

TEST(FormatsTypes, BlockGeometryMatchesTheStructs) {
    struct Expect {
        uint32_t id;
        uint32_t block, bytes;
    } const expect[] = {
        {KPR_TYPE_F32, 1, 4},
        {KPR_TYPE_F16, 1, 2},
        {KPR_TYPE_BF16, 1, 2},
        {KPR_TYPE_Q4_0, 32, sizeof(kpr_block_q4_0)},
        {KPR_TYPE_Q4_1, 32, sizeof(kpr_block_q4_1)},
        {KPR_TYPE_Q5_0, 32, sizeof(kpr_block_q5_0)},
        {KPR_TYPE_Q5_1, 32, sizeof(kpr_block_q5_1)},
        {KPR_TYPE_Q8_0, 32, sizeof(kpr_block_q8_0)},
        {KPR_TYPE_Q8_1, 32, sizeof(kpr_block_q8_1)},
        {KPR_TYPE_IQ4_NL, 32, sizeof(kpr_block_iq4_nl)},
        {KPR_TYPE_Q2_K, 256, sizeof(kpr_block_q2_K)},
        {KPR_TYPE_Q3_K, 256, sizeof(kpr_block_q3_K)},
        {KPR_TYPE_Q4_K, 256, sizeof(kpr_block_q4_K)},
        {KPR_TYPE_Q5_K, 256, sizeof(kpr_block_q5_K)},
        {KPR_TYPE_Q6_K, 256, sizeof(kpr_block_q6_K)},
        {KPR_TYPE_Q8_K, 256, sizeof(kpr_block_q8_K)},
        {KPR_TYPE_IQ4_XS, 256, sizeof(kpr_block_iq4_xs)},
        {KPR_TYPE_IQ3_XXS, 256, sizeof(kpr_block_iq3_xxs)},
        {KPR_TYPE_IQ3_S, 256, sizeof(kpr_block_iq3_s)},
    };
    for (const auto &e : expect) {
        const TypeInfo *t = type_info(e.id);
        ASSERT_NE(t, nullptr) << e.id;
        EXPECT_EQ(t->id, e.id);
        EXPECT_EQ(t->block_size, e.block) << t->name;
        EXPECT_EQ(t->block_bytes, e.bytes) << t->name;
    }
}

TEST(FormatsTypes, SupportedSetIsTheSeventeen) {
    std::set<std::string> names;
    for (const TypeInfo *t : supported_types()) names.insert(t->name);
    const std::set<std::string> want = {"f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1",   "q5_0",    "q5_1", "q2_K",
                                        "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "iq3_xxs", "iq3_s"};
    EXPECT_EQ(names, want);
    ASSERT_NE(type_info(KPR_TYPE_Q8_1), nullptr);
    EXPECT_FALSE(type_info(KPR_TYPE_Q8_1)->supported);
    ASSERT_NE(type_info(KPR_TYPE_IQ2_XXS), nullptr);
    EXPECT_FALSE(type_info(KPR_TYPE_IQ2_XXS)->supported);
    EXPECT_EQ(type_info(KPR_TYPE_IQ2_XXS)->block_bytes, 66u);
    EXPECT_EQ(type_info(4), nullptr);
    EXPECT_EQ(type_info(5), nullptr);
    EXPECT_EQ(type_info(1000), nullptr);
}

TEST(FormatsTypes, NamesAreGgmlsAndCaseInsensitive) {
    EXPECT_STREQ(type_info(KPR_TYPE_Q4_K)->name, "q4_K");
    EXPECT_STREQ(type_info(KPR_TYPE_IQ3_XXS)->name, "iq3_xxs");
    EXPECT_EQ(type_from_name("q4_k"), KPR_TYPE_Q4_K);
    EXPECT_EQ(type_from_name("Q4_K"), KPR_TYPE_Q4_K);
    EXPECT_EQ(type_from_name("IQ3_XXS"), KPR_TYPE_IQ3_XXS);
    EXPECT_EQ(type_from_name("bf16"), KPR_TYPE_BF16);
    EXPECT_EQ(type_from_name("F32"), KPR_TYPE_F32);
    EXPECT_EQ(type_from_name("q4_2"), std::nullopt);
    EXPECT_EQ(type_from_name(""), std::nullopt);
    for (const TypeInfo *t : supported_types()) EXPECT_EQ(type_from_name(t->name), t->id);
}

TEST(FormatsTypes, RowBytes) {
    EXPECT_EQ(row_bytes(KPR_TYPE_Q4_K, 4096), 16u * 144u);
    EXPECT_EQ(row_bytes(KPR_TYPE_Q8_0, 4096), 128u * 34u);
    EXPECT_EQ(row_bytes(KPR_TYPE_F16, 7), 14u);
    EXPECT_EQ(row_bytes(KPR_TYPE_Q8_0, 0), 0u);
    EXPECT_THROW(row_bytes(KPR_TYPE_Q4_K, 100), kpr::Error);
    EXPECT_THROW(row_bytes(KPR_TYPE_Q8_0, 33), kpr::Error);
    EXPECT_THROW(row_bytes(4, 32), kpr::Error);
    EXPECT_THROW(row_bytes(KPR_TYPE_F32, uint64_t{1} << 63), kpr::Error);
    try {
        row_bytes(KPR_TYPE_Q4_K, 100);
    } catch (const kpr::Error &e) {
        EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << e.what();
    }
}

// ---- half precision -------------------------------------------------------------------------------

TEST(FormatsHalf, KnownValues) {
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
    EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00); // the tie goes to even: infinity
    EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
    EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
    EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);
    EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);            // tie to even: 0
    EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);          // 1.5 ulp: tie to even: 2
    EXPECT_EQ(f32_to_f16(0x1.000002p-25f), 0x0001);     // just above half
    EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);            // smallest normal
    EXPECT_EQ(f32_to_f16(0x1.ff8p-15f), 0x03ff);        // the largest subnormal
    EXPECT_EQ(f32_to_f16(0x1.ffcp-15f), 0x0400);        // a tie that rounds up into the normals
    EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     // tie, even
    EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); // tie, even (up)
    EXPECT_EQ(f32_to_f16(bits_to_float(0x3f801001u)), 0x3c01); // 1 + 2^-11 + 2^-23: above the tie
    const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x03ff, 0);
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
    EXPECT_EQ(f16_to_f32(0x03ff), 0x3ffp-24f);
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
    EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
    EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
    EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
}

TEST(FormatsHalf, EveryHalfRoundTrips) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16_to_f32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
    }
}

#if defined(__FLT16_MANT_DIG__)
TEST(FormatsHalf, MatchesTheCompilersFloat16) {
    std::mt19937_64 rng(7);
    for (int i = 0; i < 2000000; ++i) {
        // Bias towards the half range, include every exponent.
        const uint32_t u = static_cast<uint32_t>(rng());
        const float f = (i & 1) ? bits_to_float(u) : bits_to_float((u & 0x87ffffffu) | 0x30000000u);
        if (std::isnan(f)) continue;
        const _Float16 ref = static_cast<_Float16>(f);
        uint16_t rb;
        std::memcpy(&rb, &ref, 2);
        ASSERT_EQ(f32_to_f16(f), rb) << std::hexfloat << f;
        ASSERT_EQ(float_to_bits(f16_to_f32(rb)), float_to_bits(static_cast<float>(ref)));
    }
}
#endif

TEST(FormatsHalf, BFloat16) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
    EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even (1.0). 1 + 3 * 2^-8 ties up.
    EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    EXPECT_EQ(f32_to_bf16(bits_to_float(0x3f808001u)), 0x3f81); // above the tie
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::max()))));
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_f32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(f32_to_bf16(f), h);
    }
}

// ---- hand-built blocks ----------------------------------------------------------------------------

TEST(FormatsDequant, Q8_0) {
    kpr_block_q8_0 b{};
    b.d = f32_to_f16(0.5f);
    for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(i - 16);
    const auto w = deq(KPR_TYPE_Q8_0, b);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(w[i], 0.5f * (i - 16));
}

TEST(FormatsDequant, Q4_0LowNibblesFirst) {
    kpr_block_q4_0 b{};
    b.d = f32_to_f16(2.0f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto w = deq(KPR_TYPE_Q4_0, b);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(w[j], 2.0f * (j - 8));
        EXPECT_EQ(w[j + 16], 2.0f * (15 - j - 8));
    }
}

TEST(FormatsDequant, Q4_1) {
    kpr_block_q4_1 b{};
    b.d = f32_to_f16(0.25f);
    b.m = f32_to_f16(-3.0f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto w = deq(KPR_TYPE_Q4_1, b);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(w[j], 0.25f * j - 3.0f);
        EXPECT_EQ(w[j + 16], 0.25f * (15 - j) - 3.0f);
    }
}

TEST(FormatsDequant, Q5_0AndQ5_1HighBits) {
    // qh bit i is the fifth bit of weight i.
    const uint32_t qh = 0xA5C3F00Fu;
    kpr_block_q5_0 b{};
    b.d = f32_to_f16(1.0f);
    std::memcpy(b.qh, &qh, 4);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    kpr_block_q5_1 c{};
    c.d = f32_to_f16(0.5f);
    c.m = f32_to_f16(1.0f);
    std::memcpy(c.qh, &qh, 4);
    std::memcpy(c.qs, b.qs, 16);
    const auto w0 = deq(KPR_TYPE_Q5_0, b);
    const auto w1 = deq(KPR_TYPE_Q5_1, c);
    for (int i = 0; i < 32; ++i) {
        const int lo = i < 16 ? (b.qs[i] & 0xF) : (b.qs[i - 16] >> 4);
        const int q = lo | (((qh >> i) & 1) << 4);
        EXPECT_EQ(w0[i], static_cast<float>(q - 16)) << i;
        EXPECT_EQ(w1[i], 0.5f * q + 1.0f) << i;
    }
}

TEST(FormatsDequant, IQ4_NL) {
    kpr_block_iq4_nl b{};
    b.d = f32_to_f16(1.0f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto w = deq(KPR_TYPE_IQ4_NL, b);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(w[j], kpr_kvalues_iq4nl[j]);
        EXPECT_EQ(w[j + 16], kpr_kvalues_iq4nl[15 - j]);
    }
}

TEST(FormatsDequant, Q4_KUnitScalesGiveTheNibbles) {
    kpr_block_q4_K b{};
    b.d = f32_to_f16(1.0f);
    b.dmin = f32_to_f16(0.0f);
    // sc = 1 for all eight sub-blocks: bytes 0..3 = 1, bytes 8..11 low nibble = 1, high bits 0.
    for (int j = 0; j < 4; ++j) b.scales[j] = 1;
    for (int j = 8; j < 12; ++j) b.scales[j] = 1;
    for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
    const auto w = deq(KPR_TYPE_Q4_K, b);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            EXPECT_EQ(w[64 * c + l], static_cast<float>(l % 16));
            EXPECT_EQ(w[64 * c + 32 + l], static_cast<float>(15 - l % 16));
        }
}

TEST(FormatsDequant, Q3_KKnownBlock) {
    // All scales 6-bit value 33 (-> 1 after the -32 bias): low nibble 1 everywhere, high bits 10b.
    kpr_block_q3_K b{};
    b.d = f32_to_f16(1.0f);
    for (int j = 0; j < 8; ++j) b.scales[j] = 0x11;
    for (int j = 8; j < 12; ++j) b.scales[j] = 0xAA;
    // hmask all set: no -4; qs bits pick 0..3.
    std::memset(b.hmask, 0xFF, 32);
    for (int i = 0; i < 64; ++i) b.qs[i] = 0xE4; // 2-bit fields 0,1,2,3 at shifts 0,2,4,6
    auto w = deq(KPR_TYPE_Q3_K, b);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(w[i], static_cast<float>(((i % 128) / 32))) << i;
    std::memset(b.hmask, 0x00, 32); // every weight loses 4
    w = deq(KPR_TYPE_Q3_K, b);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(w[i], static_cast<float>(((i % 128) / 32) - 4)) << i;
}

TEST(FormatsDequant, IQ4_XSScales) {
    kpr_block_iq4_xs b{};
    b.d = f32_to_f16(1.0f);
    // ls = 33 for every sub-block (-> 1): low nibble 1, high 2 bits 10b.
    for (int j = 0; j < 4; ++j) b.scales_l[j] = 0x11;
    b.scales_h = 0xAAAA;
    for (int j = 0; j < 128; ++j) b.qs[j] = static_cast<uint8_t>((j % 16) | ((15 - j % 16) << 4));
    const auto w = deq(KPR_TYPE_IQ4_XS, b);
    for (int ib = 0; ib < 8; ++ib)
        for (int j = 0; j < 16; ++j) {
            EXPECT_EQ(w[32 * ib + j], kpr_kvalues_iq4nl[j]);
            EXPECT_EQ(w[32 * ib + j + 16], kpr_kvalues_iq4nl[15 - j]);
        }
}

// ---- dequantization against the format's statement (formats README), on random blocks -------------

namespace {

std::vector<float> spec_q2_K(const kpr_block_q2_K &b) {
    std::vector<float> w(256);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 4; ++t)
            for (int part = 0; part < 2; ++part) {
                const int s = 8 * h + 2 * t + part;
                for (int l = 0; l < 16; ++l) {
                    const int q = (b.qs[32 * h + 16 * part + l] >> (2 * t)) & 3;
                    w[128 * h + 32 * t + 16 * part + l] =
                        d * static_cast<float>(b.scales[s] & 0xF) * static_cast<float>(q) -
                        dmin * static_cast<float>(b.scales[s] >> 4);
                }
            }
    return w;
}

void sc_m(int j, const uint8_t *q, int &sc, int &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

std::vector<float> spec_q4_K(const kpr_block_q4_K &b) {
    std::vector<float> w(256);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int c = 0; c < 4; ++c) {
        int sc0, m0, sc1, m1;
        sc_m(2 * c, b.scales, sc0, m0);
        sc_m(2 * c + 1, b.scales, sc1, m1);
        for (int l = 0; l < 32; ++l) {
            w[64 * c + l] = d * static_cast<float>(sc0) * static_cast<float>(b.qs[32 * c + l] & 0xF) -
                            dmin * static_cast<float>(m0);
            w[64 * c + 32 + l] = d * static_cast<float>(sc1) * static_cast<float>(b.qs[32 * c + l] >> 4) -
                                 dmin * static_cast<float>(m1);
        }
    }
    return w;
}

std::vector<float> spec_q5_K(const kpr_block_q5_K &b) {
    // As Q4_K, with bit (2c) / (2c+1) of qh[l] as the fifth bit of the low / high nibble weight.
    std::vector<float> w(256);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int c = 0; c < 4; ++c) {
        int sc0, m0, sc1, m1;
        sc_m(2 * c, b.scales, sc0, m0);
        sc_m(2 * c + 1, b.scales, sc1, m1);
        for (int l = 0; l < 32; ++l) {
            const int q0 = (b.qs[32 * c + l] & 0xF) | (((b.qh[l] >> (2 * c)) & 1) << 4);
            const int q1 = (b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4);
            w[64 * c + l] = d * static_cast<float>(sc0) * static_cast<float>(q0) - dmin * static_cast<float>(m0);
            w[64 * c + 32 + l] = d * static_cast<float>(sc1) * static_cast<float>(q1) - dmin * static_cast<float>(m1);
        }
    }
    return w;
}

std::vector<float> spec_q6_K(const kpr_block_q6_K &b) {
    std::vector<float> w(256);
    const float d = f16_to_f32(b.d);
    for (int h = 0; h < 2; ++h) {
        const uint8_t *L = b.ql + 64 * h;
        const uint8_t *H = b.qh + 32 * h;
        const int8_t *S = b.scales + 8 * h;
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            w[128 * h + l] = d * S[is] * static_cast<float>(((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32);
            w[128 * h + l + 32] = d * S[is + 2] * static_cast<float>(((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32);
            w[128 * h + l + 64] = d * S[is + 4] * static_cast<float>(((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32);
            w[128 * h + l + 96] = d * S[is + 6] * static_cast<float>(((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32);
        }
    }
    return w;
}

std::vector<float> spec_iq3_xxs(const kpr_block_iq3_xxs &b) {
    std::vector<float> w(256);
    const float d = f16_to_f32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
        uint32_t aux;
        std::memcpy(&aux, b.qs + 64 + 4 * ib, 4);
        const int ls = aux >> 28;
        for (int l = 0; l < 4; ++l)
            for (int k = 0; k < 2; ++k)
                for (int j = 0; j < 4; ++j) {
                    const int g = (kpr_iq3xxs_grid[b.qs[8 * ib + 2 * l + k]] >> (8 * j)) & 0xFF;
                    const bool neg = (kpr_ksigns_iq2xs[(aux >> (7 * l)) & 127] >> (4 * k + j)) & 1;
                    w[32 * ib + 8 * l + 4 * k + j] = d * (0.5f + ls) * 0.5f * static_cast<float>(neg ? -g : g);
                }
    }
    return w;
}

std::vector<float> spec_iq3_s(const kpr_block_iq3_s &b) {
    std::vector<float> w(256);
    const float d = f16_to_f32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
        const int ls = (b.scales[ib / 2] >> (4 * (ib & 1))) & 0xF;
        for (int k = 0; k < 8; ++k) {
            const int idx = b.qs[8 * ib + k] | (((b.qh[ib] >> k) & 1) << 8);
            for (int j = 0; j < 4; ++j) {
                const int g = (kpr_iq3s_grid[idx] >> (8 * j)) & 0xFF;
                const int wi = 32 * ib + 4 * k + j;
                const bool neg = (b.signs[4 * ib + (4 * k + j) / 8] >> ((4 * k + j) % 8)) & 1;
                w[wi] = d * static_cast<float>(1 + 2 * ls) * static_cast<float>(g) * (neg ? -1.f : 1.f);
            }
        }
    }
    return w;
}

template <typename B, typename Spec>
void check_against_spec(uint32_t type, Spec spec) {
    constexpr int kBlocks = 200;
    std::vector<B> blocks(kBlocks);
    fill_random_blocks(type, 99, blocks.data(), kBlocks);
    std::vector<float> got(static_cast<size_t>(kBlocks) * 256);
    dequantize_row(type, blocks.data(), got.data(), got.size());
    for (int i = 0; i < kBlocks; ++i) {
        const auto want = spec(blocks[i]);
        for (int k = 0; k < 256; ++k)
            ASSERT_EQ(float_to_bits(got[256 * i + k]), float_to_bits(want[k]))
                << type_info(type)->name << " block " << i << " weight " << k << ": " << got[256 * i + k] << " vs "
                << want[k];
    }
}

} // namespace

TEST(FormatsDequant, Q2_KAsSpecified) { check_against_spec<kpr_block_q2_K>(KPR_TYPE_Q2_K, spec_q2_K); }
TEST(FormatsDequant, Q4_KAsSpecified) { check_against_spec<kpr_block_q4_K>(KPR_TYPE_Q4_K, spec_q4_K); }
TEST(FormatsDequant, Q5_KAsSpecified) { check_against_spec<kpr_block_q5_K>(KPR_TYPE_Q5_K, spec_q5_K); }
TEST(FormatsDequant, Q6_KAsSpecified) { check_against_spec<kpr_block_q6_K>(KPR_TYPE_Q6_K, spec_q6_K); }
TEST(FormatsDequant, IQ3_XXSAsSpecified) { check_against_spec<kpr_block_iq3_xxs>(KPR_TYPE_IQ3_XXS, spec_iq3_xxs); }
TEST(FormatsDequant, IQ3_SAsSpecified) { check_against_spec<kpr_block_iq3_s>(KPR_TYPE_IQ3_S, spec_iq3_s); }

TEST(FormatsDequant, RejectsUnsupportedAndRaggedLengths) {
    std::vector<uint8_t> buf(1024);
    std::vector<float> out(512);
    EXPECT_THROW(dequantize_row(KPR_TYPE_Q8_1, buf.data(), out.data(), 32), kpr::Error);
    EXPECT_THROW(dequantize_row(KPR_TYPE_Q4_K, buf.data(), out.data(), 300), kpr::Error);
    EXPECT_THROW(dot_row(KPR_TYPE_IQ2_XXS, buf.data(), out.data(), 256), kpr::Error);
    EXPECT_THROW(dot_row(77, buf.data(), out.data(), 256), kpr::Error);
}

TEST(FormatsDot, IsTheDoubleSumOfTheDequantizedProducts) {
    for (const TypeInfo *t : supported_types()) {
        const uint64_t n = 1024;
        std::vector<uint8_t> row(row_bytes(t->id, n));
        fill_random_blocks(t->id, 5, row.data(), n / t->block_size);
        std::vector<float> x(n), w(n);
        fill_random_floats(6, x.data(), n);
        dequantize_row(t->id, row.data(), w.data(), n);
        double want = 0;
        for (uint64_t k = 0; k < n; ++k) want += static_cast<double>(w[k]) * static_cast<double>(x[k]);
        EXPECT_EQ(dot_row(t->id, row.data(), x.data(), n), want) << t->name;
        EXPECT_EQ(dot_row_rounded(t->id, row.data(), x.data(), n, ActRounding::Float), want) << t->name;
    }
}

// ---- quantizers -----------------------------------------------------------------------------------

TEST(FormatsQuant, Q8_0HandCase) {
    float x[32];
    for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 15.5f; // amax 16.5 at i = 0... 31 -> 15.5
    x[0] = -127.0f;                                                    // d = 1, id = 1
    x[1] = 2.5f;                                                       // ties away from zero
    x[2] = -2.5f;
    x[3] = 0.49999997f;
    kpr_block_q8_0 b;
    quantize_q8_0(x, &b, 32);
    EXPECT_EQ(f16_to_f32(b.d), 1.0f);
    EXPECT_EQ(b.qs[0], -127);
    EXPECT_EQ(b.qs[1], 3);
    EXPECT_EQ(b.qs[2], -3);
    EXPECT_EQ(b.qs[3], 0);
    for (int i = 4; i < 32; ++i) EXPECT_EQ(b.qs[i], static_cast<int>(std::roundf(x[i])));
    // All zeros: d = 0, q = 0.
    float z[32] = {};
    quantize_q8_0(z, &b, 32);
    EXPECT_EQ(b.d, 0);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(b.qs[i], 0);
    EXPECT_THROW(quantize_q8_0(x, &b, 31), kpr::Error);
}

TEST(FormatsQuant, Q8_0WeightQuantizerRoundTripsRandomBlocks) {
    const uint64_t nb = 4096;
    std::vector<kpr_block_q8_0> blocks(nb), again(nb);
    fill_random_blocks(KPR_TYPE_Q8_0, 11, blocks.data(), nb);
    // A ggml-quantized block always holds +-127 somewhere (the element of largest magnitude).
    for (uint64_t i = 0; i < nb; ++i) blocks[i].qs[i % 32] = (i & 1) ? 127 : -127;
    std::vector<float> w(nb * 32);
    dequantize_row(KPR_TYPE_Q8_0, blocks.data(), w.data(), w.size());
    quantize_row_q8_0(w.data(), again.data(), w.size());
    ASSERT_EQ(std::memcmp(blocks.data(), again.data(), nb * sizeof(kpr_block_q8_0)), 0);
}

TEST(FormatsQuant, Q8_1) {
    float x[32];
    fill_random_floats(3, x, 32);
    kpr_block_q8_1 b;
    quantize_q8_1(x, &b, 32);
    float amax = 0, sum = 0;
    for (float v : x) {
        amax = std::max(amax, std::fabs(v));
        sum += v;
    }
    const float d = amax / 127.0f;
    EXPECT_EQ(b.d, f32_to_f16(d));
    EXPECT_EQ(b.s, f32_to_f16(sum));
    for (int i = 0; i < 32; ++i) EXPECT_EQ(b.qs[i], static_cast<int8_t>(std::roundf(x[i] / d)));
}

TEST(FormatsQuant, Q8_KProperties) {
    std::vector<float> x(256 * 64);
    fill_random_floats(17, x.data(), x.size());
    x[256 * 3 + 5] = 0.0f;
    std::fill(x.begin() + 256 * 7, x.begin() + 256 * 8, 0.0f); // an all-zero block
    std::vector<kpr_block_q8_K> q(64);
    quantize_q8_K(x.data(), q.data(), x.size());
    for (int b = 0; b < 64; ++b) {
        const float *xb = x.data() + 256 * b;
        if (b == 7) {
            EXPECT_EQ(q[b].d, 0.0f);
            for (int j = 0; j < 256; ++j) EXPECT_EQ(q[b].qs[j], 0);
            for (int g = 0; g < 16; ++g) EXPECT_EQ(q[b].bsums[g], 0);
            continue;
        }
        int imax = 0;
        for (int j = 1; j < 256; ++j)
            if (std::fabs(xb[j]) > std::fabs(xb[imax])) imax = j;
        EXPECT_EQ(q[b].qs[imax], -127) << "the largest element maps to -127";
        EXPECT_EQ(q[b].d, 1.0f / (-127.0f / xb[imax]));
        EXPECT_EQ(q[b].d < 0, xb[imax] > 0);
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += q[b].qs[16 * g + i];
            EXPECT_EQ(q[b].bsums[g], sum);
        }
        for (int j = 0; j < 256; ++j) {
            EXPECT_LE(std::abs(q[b].qs[j]), 127);
            EXPECT_LE(std::fabs(q[b].d * q[b].qs[j] - xb[j]), std::fabs(q[b].d) * 0.5f * 1.0001f);
        }
    }
}

TEST(FormatsQuant, Q8_KTiesGoToEven) {
    float x[256] = {};
    x[0] = -127.0f; // max = -127: iscale = 1, d = 1
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    kpr_block_q8_K q;
    quantize_q8_K(x, &q, 256);
    EXPECT_EQ(q.d, 1.0f);
    EXPECT_EQ(q.qs[0], -127);
    EXPECT_EQ(q.qs[1], 2);
    EXPECT_EQ(q.qs[2], 4);
    EXPECT_EQ(q.qs[3], -2);
}

TEST(FormatsQuant, RoundedReferenceUsesTheStoredScale) {
    std::vector<float> x(512), r(512);
    fill_random_floats(23, x.data(), x.size());
    round_activations(ActRounding::Q8_0, x.data(), r.data(), 512);
    std::vector<kpr_block_q8_0> q0(16);
    quantize_q8_0(x.data(), q0.data(), 512);
    for (int i = 0; i < 512; ++i) EXPECT_EQ(r[i], q0[i / 32].qs[i % 32] * f16_to_f32(q0[i / 32].d));
    round_activations(ActRounding::Q8_K, x.data(), r.data(), 512);
    std::vector<kpr_block_q8_K> qk(2);
    quantize_q8_K(x.data(), qk.data(), 512);
    for (int i = 0; i < 512; ++i) EXPECT_EQ(r[i], qk[i / 256].qs[i % 256] * qk[i / 256].d);
    round_activations(ActRounding::F16, x.data(), r.data(), 512);
    for (int i = 0; i < 512; ++i) EXPECT_EQ(r[i], f16_to_f32(f32_to_f16(x[i])));
    EXPECT_THROW(round_activations(ActRounding::Q8_K, x.data(), r.data(), 288), kpr::Error);

    std::vector<uint8_t> row(row_bytes(KPR_TYPE_Q4_K, 512));
    fill_random_blocks(KPR_TYPE_Q4_K, 1, row.data(), 2);
    round_activations(ActRounding::Q8_K, x.data(), r.data(), 512);
    EXPECT_EQ(dot_row_rounded(KPR_TYPE_Q4_K, row.data(), x.data(), 512, ActRounding::Q8_K),
              dot_row(KPR_TYPE_Q4_K, row.data(), r.data(), 512));
    // The rounding changes the result a little, not a lot.
    const double exact = dot_row(KPR_TYPE_Q4_K, row.data(), x.data(), 512);
    const double q8k = dot_row_rounded(KPR_TYPE_Q4_K, row.data(), x.data(), 512, ActRounding::Q8_K);
    const double q81 = dot_row_rounded(KPR_TYPE_Q4_K, row.data(), x.data(), 512, ActRounding::Q8_1);
    EXPECT_NE(exact, q8k);
    EXPECT_NEAR(exact, q8k, 0.05 * std::fabs(exact) + 1e-3);
    EXPECT_NEAR(exact, q81, 0.05 * std::fabs(exact) + 1e-3);
}

TEST(FormatsQuant, GgmlCpuActivationTypes) {
    EXPECT_EQ(ggml_cpu_act_rounding(KPR_TYPE_Q8_0), ActRounding::Q8_0);
    EXPECT_EQ(ggml_cpu_act_rounding(KPR_TYPE_Q4_0), ActRounding::Q8_0);
    EXPECT_EQ(ggml_cpu_act_rounding(KPR_TYPE_IQ4_NL), ActRounding::Q8_0);
    EXPECT_EQ(ggml_cpu_act_rounding(KPR_TYPE_Q4_K), ActRounding::Q8_K);
    EXPECT_EQ(ggml_cpu_act_rounding(KPR_TYPE_IQ3_S), ActRounding::Q8_K);
    EXPECT_EQ(ggml_cpu_act_rounding(KPR_TYPE_F16), ActRounding::F16);
    EXPECT_EQ(ggml_cpu_act_rounding(KPR_TYPE_F32), ActRounding::Float);
    // The enum agrees with the ABI's.
    EXPECT_EQ(static_cast<uint32_t>(ActRounding::Q8_1), static_cast<uint32_t>(KPR_ACT_Q8_1));
    EXPECT_EQ(static_cast<uint32_t>(ActRounding::Q8_K), static_cast<uint32_t>(KPR_ACT_Q8_K));
}

// ---- random data ----------------------------------------------------------------------------------

TEST(FormatsRandom, DeterministicFiniteAndSensiblySized) {
    for (const TypeInfo *t : supported_types()) {
        const uint64_t nb = t->block_size == 1 ? 8192 : 8192 / t->block_size;
        const uint64_t n = nb * t->block_size;
        std::vector<uint8_t> a(nb * t->block_bytes), b(a.size()), c(a.size());
        fill_random_blocks(t->id, 42, a.data(), nb);
        fill_random_blocks(t->id, 42, b.data(), nb);
        fill_random_blocks(t->id, 43, c.data(), nb);
        EXPECT_EQ(a, b) << t->name;
        EXPECT_NE(a, c) << t->name;
        std::vector<float> w(n);
        dequantize_row(t->id, a.data(), w.data(), n);
        double ss = 0, amax = 0;
        for (float v : w) {
            ASSERT_TRUE(std::isfinite(v)) << t->name;
            ss += static_cast<double>(v) * v;
            amax = std::max(amax, static_cast<double>(std::fabs(v)));
        }
        const double rms = std::sqrt(ss / static_cast<double>(n));
        EXPECT_GT(rms, 2e-3) << t->name;
        EXPECT_LT(rms, 0.1) << t->name;
        EXPECT_LT(amax, 0.5) << t->name;
    }
}

TEST(FormatsRandom, Floats) {
    std::vector<float> x(1 << 16), y(1 << 16);
    fill_random_floats(1, x.data(), x.size());
    fill_random_floats(1, y.data(), y.size());
    EXPECT_EQ(x, y);
    double s = 0, ss = 0;
    for (float v : x) {
        s += v;
        ss += static_cast<double>(v) * v;
    }
    const double mean = s / x.size(), var = ss / x.size() - mean * mean;
    EXPECT_NEAR(mean, 0.0, 0.02);
    EXPECT_NEAR(var, 1.0, 0.03);
}

// ---- tables ---------------------------------------------------------------------------------------

TEST(FormatsTables, Crc32) {
    EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
    EXPECT_EQ(crc32("", 0), 0u);
    EXPECT_NO_THROW(verify_tables());
    EXPECT_EQ(crc32(kpr_kvalues_iq4nl, sizeof kpr_kvalues_iq4nl), KPR_KVALUES_IQ4NL_CRC32);
    EXPECT_EQ(crc32(kpr_ksigns_iq2xs, sizeof kpr_ksigns_iq2xs), KPR_KSIGNS_IQ2XS_CRC32);
    for (int i = 0; i < 128; ++i) EXPECT_EQ(kpr_ksigns_iq2xs[i], i | ((__builtin_popcount(i) & 1) << 7));
}

// ---- golden values ---------------------------------------------------------------------------------
// CRC-32 of fill_random_blocks(type, 1000 + id) (64 blocks; 16384 values for F32/F16/BF16) and of its
// dequantization. The dequantized values were checked bit for bit against PyPI gguf's gguf.quants
// (GgufPython.DequantizationAgreesWithGgufQuants, the same data), so this test carries that check to
// machines without Python. If fill_random_blocks changes on purpose, regenerate both columns and rerun
// kpr_gguf_python_tests.
TEST(FormatsGolden, DequantizationOfSeededBlocks) {
    struct Golden {
        uint32_t id, blocks_crc, values_crc;
    } const golden[] = {
        {0, 0x612fbcacu, 0x612fbcacu},  {1, 0xec4b6dfau, 0x96a16fd0u},  {2, 0x61d41c70u, 0xb5e1d4fdu},
        {3, 0xc961e598u, 0x49b2224fu},  {6, 0x2c71bc99u, 0x8c54a092u},  {7, 0xd333243du, 0x34b30638u},
        {8, 0x532ce4e9u, 0xb9f4d2ddu},  {10, 0x2b5b73bdu, 0x5221a0f8u}, {11, 0x413a5befu, 0x2a9a9322u},
        {12, 0xa7a01763u, 0xd92b3208u}, {13, 0x5df406b8u, 0xc982b714u}, {14, 0x0e63e74fu, 0xd198f242u},
        {18, 0xc2b32c78u, 0x33cc84e1u}, {20, 0xd4ccbca4u, 0x0162a821u}, {21, 0xa3d0969eu, 0x43647e1au},
        {23, 0xd27c2574u, 0x55355431u}, {30, 0x95da4dbbu, 0x96284737u},
    };
    EXPECT_EQ(std::size(golden), supported_types().size());
    for (const Golden &g : golden) {
        const TypeInfo *t = type_info(g.id);
        ASSERT_NE(t, nullptr);
        const uint64_t n = 64 * (t->block_size == 1 ? 256 : t->block_size);
        std::vector<uint8_t> data(row_bytes(t->id, n));
        fill_random_blocks(t->id, 1000 + t->id, data.data(), data.size() / t->block_bytes);
        ASSERT_EQ(crc32(data.data(), data.size()), g.blocks_crc)
            << t->name << ": fill_random_blocks no longer makes the same blocks for the same seed";
        std::vector<float> w(n);
        dequantize_row(t->id, data.data(), w.data(), n);
        EXPECT_EQ(crc32(w.data(), n * 4), g.values_crc) << t->name << ": dequantization changed";
    }
}

// Type table, half-precision conversions, CRC-32 and the table check.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <string>

namespace kpr::formats {
namespace {

constexpr uint32_t kQK = KPR_QK;
constexpr uint32_t kQK_K = KPR_QK_K;

// id, name, block, bytes, supported. Ids ggml retired (4, 5, 31..33, 36..38) are absent.
// (PyPI gguf lists Q8_1 as 40 bytes, an old layout; ggml's block_q8_1 is 36.)
constexpr TypeInfo kTypes[] = {
    {KPR_TYPE_F32, "f32", 1, 4, true},
    {KPR_TYPE_F16, "f16", 1, 2, true},
    {KPR_TYPE_Q4_0, "q4_0", kQK, 18, true},
    {KPR_TYPE_Q4_1, "q4_1", kQK, 20, true},
    {KPR_TYPE_Q5_0, "q5_0", kQK, 22, true},
    {KPR_TYPE_Q5_1, "q5_1", kQK, 24, true},
    {KPR_TYPE_Q8_0, "q8_0", kQK, 34, true},
    {KPR_TYPE_Q8_1, "q8_1", kQK, 36, false},
    {KPR_TYPE_Q2_K, "q2_K", kQK_K, 84, true},
    {KPR_TYPE_Q3_K, "q3_K", kQK_K, 110, true},
    {KPR_TYPE_Q4_K, "q4_K", kQK_K, 144, true},
    {KPR_TYPE_Q5_K, "q5_K", kQK_K, 176, true},
    {KPR_TYPE_Q6_K, "q6_K", kQK_K, 210, true},
    {KPR_TYPE_Q8_K, "q8_K", kQK_K, 292, false},
    {KPR_TYPE_IQ2_XXS, "iq2_xxs", kQK_K, 66, false},
    {KPR_TYPE_IQ2_XS, "iq2_xs", kQK_K, 74, false},
    {KPR_TYPE_IQ3_XXS, "iq3_xxs", kQK_K, 98, true},
    {KPR_TYPE_IQ1_S, "iq1_s", kQK_K, 50, false},
    {KPR_TYPE_IQ4_NL, "iq4_nl", kQK, 18, true},
    {KPR_TYPE_IQ3_S, "iq3_s", kQK_K, 110, true},
    {KPR_TYPE_IQ2_S, "iq2_s", kQK_K, 82, false},
    {KPR_TYPE_IQ4_XS, "iq4_xs", kQK_K, 136, true},
    {KPR_TYPE_I8, "i8", 1, 1, false},
    {KPR_TYPE_I16, "i16", 1, 2, false},
    {KPR_TYPE_I32, "i32", 1, 4, false},
    {KPR_TYPE_I64, "i64", 1, 8, false},
    {KPR_TYPE_F64, "f64", 1, 8, false},
    {KPR_TYPE_IQ1_M, "iq1_m", kQK_K, 56, false},
    {KPR_TYPE_BF16, "bf16", 1, 2, true},
    {34, "tq1_0", kQK_K, 54, false},
    {35, "tq2_0", kQK_K, 66, false},
    {39, "mxfp4", kQK, 17, false},
    {40, "nvfp4", 64, 36, false},
    {41, "q1_0", 128, 18, false},
};

constexpr uint32_t kMaxId = 42;

constexpr std::array<const TypeInfo *, kMaxId> make_index() {
    std::array<const TypeInfo *, kMaxId> idx{};
    for (const TypeInfo &t : kTypes) idx[t.id] = &t;
    return idx;
}
constexpr std::array<const TypeInfo *, kMaxId> kIndex = make_index();

std::array<uint32_t, 256> make_crc_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
        t[i] = c;
    }
    return t;
}

} // namespace

const TypeInfo *type_info(uint32_t id) { return id < kMaxId ? kIndex[id] : nullptr; }

std::optional<uint32_t> type_from_name(std::string_view name) {
    for (const TypeInfo &t : kTypes) {
        std::string_view tn = t.name;
        if (tn.size() != name.size()) continue;
        bool eq = true;
        for (size_t i = 0; i < tn.size() && eq; ++i)
            eq = std::tolower(static_cast<unsigned char>(tn[i])) == std::tolower(static_cast<unsigned char>(name[i]));
        if (eq) return t.id;
    }
    return std::nullopt;
}

std::vector<const TypeInfo *> supported_types() {
    std::vector<const TypeInfo *> out;
    for (const TypeInfo *t : kIndex)
        if (t && t->supported) out.push_back(t);
    return out;
}

std::string type_name(uint32_t id) {
    const TypeInfo *t = type_info(id);
    return t ? std::string(t->name) : "type#" + std::to_string(id);
}

uint64_t row_bytes(uint32_t type, uint64_t cols) {
    const TypeInfo *t = type_info(type);
    if (!t) throw Error("row_bytes: unknown GGML type id " + std::to_string(type));
    if (cols % t->block_size != 0)
        throw Error("row_bytes: " + std::string(t->name) + " row of " + std::to_string(cols) +
                    " elements is not a multiple of the block size " + std::to_string(t->block_size));
    uint64_t out = 0;
    if (__builtin_mul_overflow(cols / t->block_size, static_cast<uint64_t>(t->block_bytes), &out))
        throw Error("row_bytes: " + std::string(t->name) + " row of " + std::to_string(cols) +
                    " elements overflows 64-bit byte counts");
    return out;
}

// ---- half precision -------------------------------------------------------------------------------

static inline uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static inline float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu;
    const uint32_t m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return float_of(sign);
        const float v = static_cast<float>(m) * 0x1p-24f; // exact
        return float_of(sign | bits_of(v));
    }
    if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t f32_to_f16(float f) {
    const uint32_t x = bits_of(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); // NaN, quiet
    if (ax >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);                       // >= 65536, inf
    const int e = static_cast<int>(ax >> 23) - 127;
    const uint32_t m = ax & 0x7fffffu;
    if (e >= -14) { // a normal half (or rounds up to infinity)
        uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (m >> 13);
        const uint32_t rem = m & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
        return static_cast<uint16_t>(sign | h);
    }
    if (e < -25) return static_cast<uint16_t>(sign); // below half the smallest subnormal
    const uint32_t M = m | 0x800000u;
    const int shift = -(e + 1); // 14..24: units of 2^-24
    uint32_t h = M >> shift;
    const uint32_t rem = M & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
}

float bf16_to_f32(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_bf16(float f) {
    const uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u); // NaN, quiet
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- CRC-32 ---------------------------------------------------------------------------------------

uint32_t crc32(const void *data, uint64_t bytes, uint32_t crc) {
    static const std::array<uint32_t, 256> table = make_crc_table();
    const auto *p = static_cast<const uint8_t *>(data);
    crc = ~crc;
    for (uint64_t i = 0; i < bytes; ++i) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

namespace {
template <typename T, size_t N>
uint32_t crc_le(const T (&table)[N]) {
    std::vector<uint8_t> bytes;
    bytes.reserve(N * sizeof(T));
    for (size_t i = 0; i < N; ++i) {
        const uint64_t v = static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(table[i]));
        for (size_t b = 0; b < sizeof(T); ++b) bytes.push_back(static_cast<uint8_t>(v >> (8 * b)));
    }
    return crc32(bytes.data(), bytes.size());
}
void check_crc(const char *name, uint32_t got, uint32_t want) {
    if (got != want) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "ggml_blocks.h: table %s has CRC32 0x%08x, expected 0x%08x", name, got, want);
        throw Error(buf);
    }
}
} // namespace

void verify_tables() {
    check_crc("kpr_iq3xxs_grid", crc_le(kpr_iq3xxs_grid), KPR_IQ3XXS_GRID_CRC32);
    check_crc("kpr_iq3s_grid", crc_le(kpr_iq3s_grid), KPR_IQ3S_GRID_CRC32);
    check_crc("kpr_ksigns_iq2xs", crc_le(kpr_ksigns_iq2xs), KPR_KSIGNS_IQ2XS_CRC32);
    check_crc("kpr_kvalues_iq4nl", crc_le(kpr_kvalues_iq4nl), KPR_KVALUES_IQ4NL_CRC32);
    for (uint32_t j = 0; j < 8; ++j)
        if (kpr_kmask_iq2xs[j] != (1u << j)) throw Error("ggml_blocks.h: table kpr_kmask_iq2xs is not 1 << j");
}

const char *act_rounding_name(ActRounding r) {
    switch (r) {
    case ActRounding::Float: return "float";
    case ActRounding::Q8_0: return "q8_0";
    case ActRounding::Q8_1: return "q8_1";
    case ActRounding::Q8_K: return "q8_K";
    case ActRounding::F16: return "f16";
    }
    return "unknown";
}

} // namespace kpr::formats

// Activation quantizers (q8_0, q8_1, q8_K), the Q8_0 weight quantizer, rounded references, random data.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <cstring>
#include <string>

namespace kpr::formats {
namespace {

void check_multiple(const char *what, uint64_t n, uint64_t block) {
    if (n % block != 0)
        throw Error(std::string(what) + ": length " + std::to_string(n) + " is not a multiple of " +
                    std::to_string(block));
}

// ggml's nearest_int: round to nearest, ties to even, through the float adder (|v| < 2^22).
inline int nearest_int(float v) {
    const float t = v + 12582912.f;
    int32_t i;
    std::memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

struct SplitMix64 {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // (0, 1]
    double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1p-53; }
    double normal() {
        if (have_spare) {
            have_spare = false;
            return spare;
        }
        const double u1 = uniform(), u2 = uniform();
        const double r = std::sqrt(-2.0 * std::log(u1));
        spare = r * std::sin(2.0 * std::numbers::pi * u2);
        have_spare = true;
        return r * std::cos(2.0 * std::numbers::pi * u2);
    }
    void bytes(uint8_t *dst, size_t n) {
        while (n >= 8) {
            const uint64_t v = next();
            std::memcpy(dst, &v, 8);
            dst += 8;
            n -= 8;
        }
        if (n) {
            const uint64_t v = next();
            std::memcpy(dst, &v, n);
        }
    }
    // An approximate normal: the sum of four 16-bit uniforms (Irwin-Hall), scaled to variance 1, in
    // [-3.46, 3.46]. Fast, for filling weight tensors.
    float approx_normal() {
        const uint64_t r = next();
        const int64_t sum = static_cast<int64_t>(r & 0xffff) + static_cast<int64_t>((r >> 16) & 0xffff) +
                          static_cast<int64_t>((r >> 32) & 0xffff) + static_cast<int64_t>(r >> 48) - 2 * 65535;
        // Variance of the sum: 4 * (65536^2 - 1) / 12.
        return static_cast<float>(static_cast<double>(sum) * (1.0 / 37837.2));
    }
    bool have_spare = false;
    double spare = 0.0;
};

} // namespace

void quantize_q8_0(const float *x, kpr_block_q8_0 *dst, uint64_t n) {
    check_multiple("quantize_q8_0", n, KPR_QK);
    for (uint64_t b = 0; b < n / KPR_QK; ++b) {
        const float *xb = x + b * KPR_QK;
        float amax = 0.0f;
        for (int j = 0; j < KPR_QK; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        kpr_block_q8_0 out;
        out.d = f32_to_f16(d);
        for (int j = 0; j < KPR_QK; ++j) out.qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
        std::memcpy(&dst[b], &out, sizeof out);
    }
}

void quantize_row_q8_0(const float *x, void *dst, uint64_t n) {
    quantize_q8_0(x, static_cast<kpr_block_q8_0 *>(dst), n);
}

void quantize_q8_1(const float *x, kpr_block_q8_1 *dst, uint64_t n) {
    check_multiple("quantize_q8_1", n, KPR_QK);
    for (uint64_t b = 0; b < n / KPR_QK; ++b) {
        const float *xb = x + b * KPR_QK;
        float amax = 0.0f, sum = 0.0f;
        for (int j = 0; j < KPR_QK; ++j) {
            amax = std::max(amax, std::fabs(xb[j]));
            sum += xb[j];
        }
        const float d = amax / 127.0f;
        kpr_block_q8_1 out;
        out.d = f32_to_f16(d);
        out.s = f32_to_f16(sum);
        for (int j = 0; j < KPR_QK; ++j)
            out.qs[j] = static_cast<int8_t>(amax == 0.0f ? 0.0f : std::roundf(xb[j] / d));
        std::memcpy(&dst[b], &out, sizeof out);
    }
}

void quantize_q8_K(const float *x, kpr_block_q8_K *dst, uint64_t n) {
    check_multiple("quantize_q8_K", n, KPR_QK_K);
    for (uint64_t b = 0; b < n / KPR_QK_K; ++b) {
        const float *xb = x + b * KPR_QK_K;
        kpr_block_q8_K out;
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < KPR_QK_K; ++j) {
            const float ax = std::fabs(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax == 0.0f) {
            std::memset(&out, 0, sizeof out);
        } else {
            const float iscale = -127.0f / max;
            for (int j = 0; j < KPR_QK_K; ++j) out.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * xb[j])));
            for (int g = 0; g < KPR_QK_K / 16; ++g) {
                int sum = 0;
                for (int i = 0; i < 16; ++i) sum += out.qs[16 * g + i];
                out.bsums[g] = static_cast<int16_t>(sum);
            }
            out.d = 1.0f / iscale;
        }
        std::memcpy(&dst[b], &out, sizeof out);
    }
}

void round_activations(ActRounding r, const float *x, float *dst, uint64_t n) {
    switch (r) {
    case ActRounding::Float: std::memmove(dst, x, n * sizeof(float)); return;
    case ActRounding::F16:
        for (uint64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(f32_to_f16(x[i]));
        return;
    case ActRounding::Q8_0:
        check_multiple("round_activations(q8_0)", n, KPR_QK);
        for (uint64_t b = 0; b < n / KPR_QK; ++b) {
            kpr_block_q8_0 q;
            quantize_q8_0(x + b * KPR_QK, &q, KPR_QK);
            const float d = f16_to_f32(q.d);
            for (int j = 0; j < KPR_QK; ++j) dst[b * KPR_QK + j] = static_cast<float>(q.qs[j]) * d;
        }
        return;
    case ActRounding::Q8_1:
        check_multiple("round_activations(q8_1)", n, KPR_QK);
        for (uint64_t b = 0; b < n / KPR_QK; ++b) {
            kpr_block_q8_1 q;
            quantize_q8_1(x + b * KPR_QK, &q, KPR_QK);
            const float d = f16_to_f32(q.d);
            for (int j = 0; j < KPR_QK; ++j) dst[b * KPR_QK + j] = static_cast<float>(q.qs[j]) * d;
        }
        return;
    case ActRounding::Q8_K:
        check_multiple("round_activations(q8_K)", n, KPR_QK_K);
        for (uint64_t b = 0; b < n / KPR_QK_K; ++b) {
            kpr_block_q8_K q;
            quantize_q8_K(x + b * KPR_QK_K, &q, KPR_QK_K);
            for (int j = 0; j < KPR_QK_K; ++j) dst[b * KPR_QK_K + j] = static_cast<float>(q.qs[j]) * q.d;
        }
        return;
    }
    throw Error("round_activations: unknown rounding " + std::to_string(static_cast<uint32_t>(r)));
}

double dot_row_rounded(uint32_t type, const void *row, const float *x, uint64_t n, ActRounding r) {
    if (r == ActRounding::Float) return dot_row(type, row, x, n);
    std::vector<float> xr(n);
    round_activations(r, x, xr.data(), n);
    return dot_row(type, row, xr.data(), n);
}

ActRounding ggml_cpu_act_rounding(uint32_t type) {
    switch (type) {
    case KPR_TYPE_Q8_0:
    case KPR_TYPE_Q4_0:
    case KPR_TYPE_Q4_1:
    case KPR_TYPE_Q5_0:
    case KPR_TYPE_Q5_1:
    case KPR_TYPE_IQ4_NL: return ActRounding::Q8_0;
    case KPR_TYPE_Q2_K:
    case KPR_TYPE_Q3_K:
    case KPR_TYPE_Q4_K:
    case KPR_TYPE_Q5_K:
    case KPR_TYPE_Q6_K:
    case KPR_TYPE_IQ4_XS:
    case KPR_TYPE_IQ3_XXS:
    case KPR_TYPE_IQ3_S: return ActRounding::Q8_K;
    case KPR_TYPE_F16: return ActRounding::F16;
    default: return ActRounding::Float;
    }
}

// ---- random data ----------------------------------------------------------------------------------

void fill_random_floats(uint64_t seed, float *dst, uint64_t n) {
    SplitMix64 rng{seed};
    for (uint64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(rng.normal());
}

namespace {

// A positive f16 scale such that (largest multiplier) * d is about 0.05 (the largest weight of a row of
// N(0, 0.02) weights), varied by a factor in [0.5, 1.5).
inline kpr_f16 scale_for(SplitMix64 &rng, double max_multiplier, bool allow_negative = false) {
    const double u = 0.5 + static_cast<double>(rng.next() >> 11) * 0x1p-53;
    double d = 0.05 / max_multiplier * u;
    if (allow_negative && (rng.next() & 1)) d = -d;
    return f32_to_f16(static_cast<float>(d));
}

template <typename B>
inline void store(uint8_t *dst, const B &b) {
    std::memcpy(dst, &b, sizeof(B));
}

} // namespace

void fill_random_blocks(uint32_t type, uint64_t seed, void *dst_v, uint64_t n_blocks) {
    const TypeInfo *t = type_info(type);
    if (!t || !t->supported)
        throw Error("fill_random_blocks: type " + type_name(type) + " is not supported by the reference");
    SplitMix64 rng{seed ^ (0xA5A5A5A5ull * (type + 1))};
    auto *dst = static_cast<uint8_t *>(dst_v);
    switch (type) {
    case KPR_TYPE_F32:
        for (uint64_t i = 0; i < n_blocks; ++i) {
            const float v = rng.approx_normal() * 0.02f;
            std::memcpy(dst + 4 * i, &v, 4);
        }
        return;
    case KPR_TYPE_F16:
    case KPR_TYPE_BF16:
        for (uint64_t i = 0; i < n_blocks; ++i) {
            const float v = rng.approx_normal() * 0.02f;
            const uint16_t h = type == KPR_TYPE_F16 ? f32_to_f16(v) : f32_to_bf16(v);
            std::memcpy(dst + 2 * i, &h, 2);
        }
        return;
    default: break;
    }
    for (uint64_t i = 0; i < n_blocks; ++i) {
        uint8_t *p = dst + i * t->block_bytes;
        switch (type) {
        case KPR_TYPE_Q8_0: {
            kpr_block_q8_0 b;
            rng.bytes(reinterpret_cast<uint8_t *>(b.qs), sizeof b.qs);
            for (int8_t &q : b.qs)
                if (q == -128) q = -127; // ggml never writes -128
            b.d = scale_for(rng, 127);
            store(p, b);
            break;
        }
        case KPR_TYPE_Q4_0: {
            kpr_block_q4_0 b;
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 8, true);
            store(p, b);
            break;
        }
        case KPR_TYPE_Q4_1: {
            kpr_block_q4_1 b;
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 30);
            b.m = f32_to_f16(-f16_to_f32(scale_for(rng, 1)));
            store(p, b);
            break;
        }
        case KPR_TYPE_Q5_0: {
            kpr_block_q5_0 b;
            rng.bytes(b.qh, sizeof b.qh);
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 16, true);
            store(p, b);
            break;
        }
        case KPR_TYPE_Q5_1: {
            kpr_block_q5_1 b;
            rng.bytes(b.qh, sizeof b.qh);
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 62);
            b.m = f32_to_f16(-f16_to_f32(scale_for(rng, 1)));
            store(p, b);
            break;
        }
        case KPR_TYPE_IQ4_NL: {
            kpr_block_iq4_nl b;
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 127, true);
            store(p, b);
            break;
        }
        case KPR_TYPE_Q2_K: {
            kpr_block_q2_K b;
            rng.bytes(b.scales, sizeof b.scales);
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 15 * 3);
            b.dmin = scale_for(rng, 15 * 2);
            store(p, b);
            break;
        }
        case KPR_TYPE_Q3_K: {
            kpr_block_q3_K b;
            rng.bytes(b.hmask, sizeof b.hmask);
            rng.bytes(b.qs, sizeof b.qs);
            rng.bytes(b.scales, sizeof b.scales);
            b.d = scale_for(rng, 32 * 4, true);
            store(p, b);
            break;
        }
        case KPR_TYPE_Q4_K: {
            kpr_block_q4_K b;
            rng.bytes(b.scales, sizeof b.scales);
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 63 * 15);
            b.dmin = scale_for(rng, 63 * 2);
            store(p, b);
            break;
        }
        case KPR_TYPE_Q5_K: {
            kpr_block_q5_K b;
            rng.bytes(b.scales, sizeof b.scales);
            rng.bytes(b.qh, sizeof b.qh);
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 63 * 31);
            b.dmin = scale_for(rng, 63 * 2);
            store(p, b);
            break;
        }
        case KPR_TYPE_Q6_K: {
            kpr_block_q6_K b;
            rng.bytes(b.ql, sizeof b.ql);
            rng.bytes(b.qh, sizeof b.qh);
            rng.bytes(reinterpret_cast<uint8_t *>(b.scales), sizeof b.scales);
            b.d = scale_for(rng, 128 * 32);
            store(p, b);
            break;
        }
        case KPR_TYPE_IQ4_XS: {
            kpr_block_iq4_xs b;
            rng.bytes(b.scales_l, sizeof b.scales_l);
            rng.bytes(b.qs, sizeof b.qs);
            b.scales_h = static_cast<uint16_t>(rng.next());
            b.d = scale_for(rng, 32 * 127);
            store(p, b);
            break;
        }
        case KPR_TYPE_IQ3_XXS: {
            kpr_block_iq3_xxs b;
            rng.bytes(b.qs, sizeof b.qs);
            b.d = scale_for(rng, 31.0 / 4 * 62);
            store(p, b);
            break;
        }
        case KPR_TYPE_IQ3_S: {
            kpr_block_iq3_s b;
            rng.bytes(b.qs, sizeof b.qs);
            rng.bytes(b.qh, sizeof b.qh);
            rng.bytes(b.signs, sizeof b.signs);
            rng.bytes(b.scales, sizeof b.scales);
            b.d = scale_for(rng, 31 * 15);
            store(p, b);
            break;
        }
        default: throw Error("fill_random_blocks: no generator for " + type_name(type));
        }
    }
}

} // namespace kpr::formats

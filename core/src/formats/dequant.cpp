// Dequantization exactly as ggml's to_float, and the double-precision reference dot product.
//
// The float expressions below keep ggml's evaluation order (e.g. `dl * q - ml` with dl = d * sc computed
// first), so the float results are the ones ggml's scalar code produces without FMA contraction.
#include <kpr/error.hpp>
#include <kpr/formats.hpp>

#include <cstring>
#include <string>

namespace kpr::formats {
namespace {

template <typename B>
inline B load(const uint8_t *p) {
    B b;
    std::memcpy(&b, p, sizeof(B));
    return b;
}

inline float h2f(kpr_f16 h) { return f16_to_f32(h); }

void deq_q4_0(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q4_0>(p);
    const float d = h2f(b.d);
    for (int j = 0; j < 16; ++j) {
        const int x0 = (b.qs[j] & 0x0F) - 8;
        const int x1 = (b.qs[j] >> 4) - 8;
        y[j] = static_cast<float>(x0) * d;
        y[j + 16] = static_cast<float>(x1) * d;
    }
}

void deq_q4_1(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q4_1>(p);
    const float d = h2f(b.d), m = h2f(b.m);
    for (int j = 0; j < 16; ++j) {
        const int x0 = b.qs[j] & 0x0F;
        const int x1 = b.qs[j] >> 4;
        y[j] = static_cast<float>(x0) * d + m;
        y[j + 16] = static_cast<float>(x1) * d + m;
    }
}

void deq_q5_0(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q5_0>(p);
    const float d = h2f(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < 16; ++j) {
        const uint8_t xh0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
        const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
        const int x0 = ((b.qs[j] & 0x0F) | xh0) - 16;
        const int x1 = ((b.qs[j] >> 4) | xh1) - 16;
        y[j] = static_cast<float>(x0) * d;
        y[j + 16] = static_cast<float>(x1) * d;
    }
}

void deq_q5_1(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q5_1>(p);
    const float d = h2f(b.d), m = h2f(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < 16; ++j) {
        const uint8_t xh0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
        const uint8_t xh1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
        const int x0 = (b.qs[j] & 0x0F) | xh0;
        const int x1 = (b.qs[j] >> 4) | xh1;
        y[j] = static_cast<float>(x0) * d + m;
        y[j + 16] = static_cast<float>(x1) * d + m;
    }
}

void deq_q8_0(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q8_0>(p);
    const float d = h2f(b.d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

void deq_iq4_nl(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_iq4_nl>(p);
    const float d = h2f(b.d);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(kpr_kvalues_iq4nl[b.qs[j] & 0x0F]);
        y[j + 16] = d * static_cast<float>(kpr_kvalues_iq4nl[b.qs[j] >> 4]);
    }
}

void deq_q2_K(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q2_K>(p);
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    const uint8_t *q = b.qs;
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
            uint8_t sc = b.scales[is++];
            float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
            for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
            sc = b.scales[is++];
            dl = d * static_cast<float>(sc & 0xF);
            ml = dmin * static_cast<float>(sc >> 4);
            for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16] >> shift) & 3) - ml;
            shift += 2;
        }
        q += 32;
    }
}

void deq_q3_K(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q3_K>(p);
    const float d_all = h2f(b.d);
    // Unpack the 16 6-bit scales: low 4 bits from bytes 0..7 (low then high nibbles), high 2 bits
    // from bytes 8..11.
    int8_t sc[16];
    for (int i = 0; i < 16; ++i) {
        const int low = (i < 8) ? (b.scales[i] & 0x0F) : (b.scales[i - 8] >> 4);
        const int high = (b.scales[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
        sc[i] = static_cast<int8_t>((low | (high << 4)) - 32);
    }
    const uint8_t *q = b.qs;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
            float dl = d_all * static_cast<float>(sc[is++]);
            for (int l = 0; l < 16; ++l)
                *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4));
            dl = d_all * static_cast<float>(sc[is++]);
            for (int l = 0; l < 16; ++l)
                *y++ = dl * static_cast<float>(((q[l + 16] >> shift) & 3) - ((b.hmask[l + 16] & m) ? 0 : 4));
            shift += 2;
            m = static_cast<uint8_t>(m << 1);
        }
        q += 32;
    }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block.
inline void scale_min_k4(int j, const uint8_t *q, uint8_t &sc, uint8_t &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void deq_q4_K(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q4_K>(p);
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    const uint8_t *q = b.qs;
    int is = 0;
    for (int j = 0; j < 256; j += 64) {
        uint8_t sc, m;
        scale_min_k4(is, b.scales, sc, m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        scale_min_k4(is + 1, b.scales, sc, m);
        const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        q += 32;
        is += 2;
    }
}

void deq_q5_K(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q5_K>(p);
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    const uint8_t *ql = b.qs;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
        uint8_t sc, m;
        scale_min_k4(is, b.scales, sc, m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        scale_min_k4(is + 1, b.scales, sc, m);
        const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l)
            *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l)
            *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        is += 2;
        u1 = static_cast<uint8_t>(u1 << 2);
        u2 = static_cast<uint8_t>(u2 << 2);
    }
}

void deq_q6_K(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_q6_K>(p);
    const float d = h2f(b.d);
    const uint8_t *ql = b.ql;
    const uint8_t *qh = b.qh;
    const int8_t *sc = b.scales;
    for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
            y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
            y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
            y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

void deq_iq4_xs(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_iq4_xs>(p);
    const float d = h2f(b.d);
    const uint8_t *qs = b.qs;
    for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
        const float dl = d * static_cast<float>(ls - 32);
        for (int j = 0; j < 16; ++j) {
            y[j] = dl * static_cast<float>(kpr_kvalues_iq4nl[qs[j] & 0xF]);
            y[j + 16] = dl * static_cast<float>(kpr_kvalues_iq4nl[qs[j] >> 4]);
        }
        y += 32;
        qs += 16;
    }
}

void deq_iq3_xxs(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_iq3_xxs>(p);
    const float d = h2f(b.d);
    const uint8_t *qs = b.qs;
    const uint8_t *ss = b.qs + 64;
    for (int ib = 0; ib < 8; ++ib) {
        const uint32_t aux = static_cast<uint32_t>(ss[4 * ib]) | (static_cast<uint32_t>(ss[4 * ib + 1]) << 8) |
                             (static_cast<uint32_t>(ss[4 * ib + 2]) << 16) |
                             (static_cast<uint32_t>(ss[4 * ib + 3]) << 24);
        const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
        for (int l = 0; l < 4; ++l) {
            const uint8_t signs = kpr_ksigns_iq2xs[(aux >> (7 * l)) & 127];
            const uint32_t g1 = kpr_iq3xxs_grid[qs[2 * l + 0]];
            const uint32_t g2 = kpr_iq3xxs_grid[qs[2 * l + 1]];
            for (int j = 0; j < 4; ++j) {
                y[j + 0] = db * static_cast<float>((g1 >> (8 * j)) & 0xFF) *
                           ((signs & kpr_kmask_iq2xs[j + 0]) ? -1.f : 1.f);
                y[j + 4] = db * static_cast<float>((g2 >> (8 * j)) & 0xFF) *
                           ((signs & kpr_kmask_iq2xs[j + 4]) ? -1.f : 1.f);
            }
            y += 8;
        }
        qs += 8;
    }
}

void deq_iq3_s(const uint8_t *p, float *y) {
    const auto b = load<kpr_block_iq3_s>(p);
    const float d = h2f(b.d);
    for (int ib = 0; ib < 8; ++ib) {
        const int ls = (b.scales[ib / 2] >> (4 * (ib & 1))) & 0xF;
        const float db = d * static_cast<float>(1 + 2 * ls);
        const uint8_t *qs = b.qs + 8 * ib;
        const uint8_t *signs = b.signs + 4 * ib;
        const uint8_t qh = b.qh[ib];
        for (int l = 0; l < 4; ++l) {
            const uint32_t g1 = kpr_iq3s_grid[qs[2 * l + 0] | (((qh >> (2 * l + 0)) & 1) << 8)];
            const uint32_t g2 = kpr_iq3s_grid[qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1) << 8)];
            for (int j = 0; j < 4; ++j) {
                y[j + 0] = db * static_cast<float>((g1 >> (8 * j)) & 0xFF) *
                           ((signs[l] & kpr_kmask_iq2xs[j + 0]) ? -1.f : 1.f);
                y[j + 4] = db * static_cast<float>((g2 >> (8 * j)) & 0xFF) *
                           ((signs[l] & kpr_kmask_iq2xs[j + 4]) ? -1.f : 1.f);
            }
            y += 8;
        }
    }
}

using BlockFn = void (*)(const uint8_t *, float *);

BlockFn block_fn(uint32_t type) {
    switch (type) {
    case KPR_TYPE_Q4_0: return deq_q4_0;
    case KPR_TYPE_Q4_1: return deq_q4_1;
    case KPR_TYPE_Q5_0: return deq_q5_0;
    case KPR_TYPE_Q5_1: return deq_q5_1;
    case KPR_TYPE_Q8_0: return deq_q8_0;
    case KPR_TYPE_IQ4_NL: return deq_iq4_nl;
    case KPR_TYPE_Q2_K: return deq_q2_K;
    case KPR_TYPE_Q3_K: return deq_q3_K;
    case KPR_TYPE_Q4_K: return deq_q4_K;
    case KPR_TYPE_Q5_K: return deq_q5_K;
    case KPR_TYPE_Q6_K: return deq_q6_K;
    case KPR_TYPE_IQ4_XS: return deq_iq4_xs;
    case KPR_TYPE_IQ3_XXS: return deq_iq3_xxs;
    case KPR_TYPE_IQ3_S: return deq_iq3_s;
    default: return nullptr;
    }
}

const TypeInfo &checked(uint32_t type, uint64_t n, const char *what) {
    const TypeInfo *t = type_info(type);
    if (!t || !t->supported)
        throw Error(std::string(what) + ": type " + type_name(type) + " is not supported by the reference");
    if (n % t->block_size != 0)
        throw Error(std::string(what) + ": " + t->name + " length " + std::to_string(n) +
                    " is not a multiple of the block size " + std::to_string(t->block_size));
    return *t;
}

} // namespace

void dequantize_row(uint32_t type, const void *src, float *dst, uint64_t n) {
    const TypeInfo &t = checked(type, n, "dequantize_row");
    const auto *p = static_cast<const uint8_t *>(src);
    switch (type) {
    case KPR_TYPE_F32: std::memcpy(dst, p, n * 4); return;
    case KPR_TYPE_F16:
        for (uint64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        return;
    case KPR_TYPE_BF16:
        for (uint64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            dst[i] = bf16_to_f32(h);
        }
        return;
    default: break;
    }
    const BlockFn fn = block_fn(type);
    const uint64_t nb = n / t.block_size;
    for (uint64_t b = 0; b < nb; ++b) fn(p + b * t.block_bytes, dst + b * t.block_size);
}

double dot_row(uint32_t type, const void *row, const float *x, uint64_t n) {
    const TypeInfo &t = checked(type, n, "dot_row");
    const auto *p = static_cast<const uint8_t *>(row);
    double sum = 0.0;
    if (type == KPR_TYPE_F32) {
        for (uint64_t i = 0; i < n; ++i) {
            float w;
            std::memcpy(&w, p + 4 * i, 4);
            sum += static_cast<double>(w) * static_cast<double>(x[i]);
        }
        return sum;
    }
    if (type == KPR_TYPE_F16 || type == KPR_TYPE_BF16) {
        const bool bf = type == KPR_TYPE_BF16;
        for (uint64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            const float w = bf ? bf16_to_f32(h) : f16_to_f32(h);
            sum += static_cast<double>(w) * static_cast<double>(x[i]);
        }
        return sum;
    }
    const BlockFn fn = block_fn(type);
    float buf[KPR_QK_K];
    const uint64_t nb = n / t.block_size;
    for (uint64_t b = 0; b < nb; ++b) {
        fn(p + b * t.block_bytes, buf);
        const float *xb = x + b * t.block_size;
        for (uint32_t i = 0; i < t.block_size; ++i) sum += static_cast<double>(buf[i]) * static_cast<double>(xb[i]);
    }
    return sum;
}

} // namespace kpr::formats

// ref.hpp -- a deliberately plain CPU reference for the GPU tests: scalar dequantization of every
// weight type straight from the format description (abi/include/kpr/ggml_blocks.h), q8_1 activation
// rounding, random blocks with sane scales. Written independently of the kernels' decoding code.
#pragma once

#include <kpr/ggml_blocks.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kpr::gputest {

inline float h2f(uint16_t h) {
    _Float16 f;
    std::memcpy(&f, &h, 2);
    return static_cast<float>(f);
}
inline uint16_t f2h(float v) {
    _Float16 f = static_cast<_Float16>(v);
    uint16_t h;
    std::memcpy(&h, &f, 2);
    return h;
}
inline float bf2f(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint16_t f2bf(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

struct TypeInfo {
    uint32_t id;
    const char *name;
    uint32_t qk, bytes;
};
inline const TypeInfo *tinfo(uint32_t id) {
    static const TypeInfo t[] = {
        {KPR_TYPE_F32, "f32", 1, 4},           {KPR_TYPE_F16, "f16", 1, 2},          {KPR_TYPE_BF16, "bf16", 1, 2},
        {KPR_TYPE_Q8_0, "q8_0", 32, 34},       {KPR_TYPE_Q4_0, "q4_0", 32, 18},      {KPR_TYPE_Q4_1, "q4_1", 32, 20},
        {KPR_TYPE_Q5_0, "q5_0", 32, 22},       {KPR_TYPE_Q5_1, "q5_1", 32, 24},      {KPR_TYPE_Q2_K, "q2_K", 256, 84},
        {KPR_TYPE_Q3_K, "q3_K", 256, 110},     {KPR_TYPE_Q4_K, "q4_K", 256, 144},    {KPR_TYPE_Q5_K, "q5_K", 256, 176},
        {KPR_TYPE_Q6_K, "q6_K", 256, 210},     {KPR_TYPE_IQ4_NL, "iq4_nl", 32, 18},  {KPR_TYPE_IQ4_XS, "iq4_xs", 256, 136},
        {KPR_TYPE_IQ3_XXS, "iq3_xxs", 256, 98}, {KPR_TYPE_IQ3_S, "iq3_s", 256, 110},
    };
    for (const auto &e : t)
        if (e.id == id) return &e;
    return nullptr;
}

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    float uni() { return static_cast<float>((next() >> 40) * (1.0 / 16777216.0)); } // [0,1)
    float sym() { return 2.0f * uni() - 1.0f; }
};

// Random blocks: random bytes, then every f16 scale field set to a sane value.
inline void fill_blocks(uint32_t type, uint64_t seed, uint8_t *dst, uint64_t n_values) {
    const TypeInfo *t = tinfo(type);
    Rng r(seed);
    const uint64_t nb = n_values / t->qk, bytes = nb * t->bytes;
    if (type == KPR_TYPE_F32) {
        for (uint64_t i = 0; i < n_values; ++i) {
            float v = r.sym();
            std::memcpy(dst + 4 * i, &v, 4);
        }
        return;
    }
    if (type == KPR_TYPE_F16 || type == KPR_TYPE_BF16) {
        for (uint64_t i = 0; i < n_values; ++i) {
            uint16_t h = type == KPR_TYPE_F16 ? f2h(r.sym()) : f2bf(r.sym());
            std::memcpy(dst + 2 * i, &h, 2);
        }
        return;
    }
    for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t v = r.next();
        std::memcpy(dst + i, &v, 8);
    }
    for (uint64_t i = bytes / 8 * 8; i < bytes; ++i) dst[i] = static_cast<uint8_t>(r.next());
    auto put = [&](uint8_t *b, int off, float v) {
        uint16_t h = f2h(v);
        std::memcpy(b + off, &h, 2);
    };
    for (uint64_t b = 0; b < nb; ++b) {
        uint8_t *p = dst + b * t->bytes;
        const float d = (0.5f + r.uni()) * (1.0f / 64.0f);
        const float m = r.sym() * (1.0f / 32.0f);
        switch (type) {
        case KPR_TYPE_Q4_1:
        case KPR_TYPE_Q5_1: put(p, 0, d); put(p, 2, m); break;
        case KPR_TYPE_Q2_K: put(p, 80, d); put(p, 82, std::fabs(m)); break;
        case KPR_TYPE_Q3_K: put(p, 108, d); break;
        case KPR_TYPE_Q4_K:
        case KPR_TYPE_Q5_K: put(p, 0, d); put(p, 2, std::fabs(m)); break;
        case KPR_TYPE_Q6_K: put(p, 208, d); break;
        default: put(p, 0, d); break;
        }
    }
}

inline void dequant_block(uint32_t type, const uint8_t *p, float *w) {
    auto f16 = [&](int off) {
        uint16_t h;
        std::memcpy(&h, p + off, 2);
        return h2f(h);
    };
    static const int8_t kv[16] = KPR_KVALUES_IQ4NL_INIT;
    switch (type) {
    case KPR_TYPE_F32: std::memcpy(w, p, 4); return;
    case KPR_TYPE_F16: { uint16_t h; std::memcpy(&h, p, 2); w[0] = h2f(h); return; }
    case KPR_TYPE_BF16: { uint16_t h; std::memcpy(&h, p, 2); w[0] = bf2f(h); return; }
    case KPR_TYPE_Q8_0:
        for (int i = 0; i < 32; ++i) w[i] = f16(0) * static_cast<int8_t>(p[2 + i]);
        return;
    case KPR_TYPE_Q4_0:
        for (int j = 0; j < 16; ++j) {
            w[j] = f16(0) * ((p[2 + j] & 0xF) - 8);
            w[j + 16] = f16(0) * ((p[2 + j] >> 4) - 8);
        }
        return;
    case KPR_TYPE_IQ4_NL:
        for (int j = 0; j < 16; ++j) {
            w[j] = f16(0) * kv[p[2 + j] & 0xF];
            w[j + 16] = f16(0) * kv[p[2 + j] >> 4];
        }
        return;
    case KPR_TYPE_Q4_1:
        for (int j = 0; j < 16; ++j) {
            w[j] = f16(0) * (p[4 + j] & 0xF) + f16(2);
            w[j + 16] = f16(0) * (p[4 + j] >> 4) + f16(2);
        }
        return;
    case KPR_TYPE_Q5_0:
    case KPR_TYPE_Q5_1: {
        const bool one = type == KPR_TYPE_Q5_1;
        uint32_t qh;
        std::memcpy(&qh, p + (one ? 4 : 2), 4);
        const uint8_t *qs = p + (one ? 8 : 6);
        for (int j = 0; j < 16; ++j) {
            const int lo = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
            const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            if (one) {
                w[j] = f16(0) * lo + f16(2);
                w[j + 16] = f16(0) * hi + f16(2);
            } else {
                w[j] = f16(0) * (lo - 16);
                w[j + 16] = f16(0) * (hi - 16);
            }
        }
        return;
    }
    case KPR_TYPE_Q2_K: {
        const float d = f16(80), dmin = f16(82);
        for (int h = 0; h < 2; ++h)
            for (int t = 0; t < 4; ++t)
                for (int part = 0; part < 2; ++part) {
                    const int s = 8 * h + 2 * t + part;
                    for (int l = 0; l < 16; ++l) {
                        const int q = (p[16 + 32 * h + 16 * part + l] >> (2 * t)) & 3;
                        w[128 * h + 32 * t + 16 * part + l] = d * (p[s] & 0xF) * q - dmin * (p[s] >> 4);
                    }
                }
        return;
    }
    case KPR_TYPE_Q3_K: {
        const float d = f16(108);
        const uint8_t *hm = p, *qs = p + 32, *sc = p + 96;
        int scales[16];
        for (int i = 0; i < 16; ++i) {
            const int lo = i < 8 ? (sc[i] & 0xF) : (sc[i - 8] >> 4);
            const int hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
            scales[i] = (lo | (hi << 4)) - 32;
        }
        for (int h = 0; h < 2; ++h)
            for (int j = 0; j < 4; ++j)
                for (int l = 0; l < 32; ++l) {
                    const int q = (qs[32 * h + l] >> (2 * j)) & 3;
                    const int hb = (hm[l] >> (4 * h + j)) & 1;
                    const int e = 128 * h + 32 * j + l;
                    w[e] = d * scales[e / 16] * (q - (hb ? 0 : 4));
                }
        return;
    }
    case KPR_TYPE_Q4_K:
    case KPR_TYPE_Q5_K: {
        const bool five = type == KPR_TYPE_Q5_K;
        const float d = f16(0), dmin = f16(2);
        const uint8_t *q = p + 4;
        const uint8_t *qh = p + 16;
        const uint8_t *qs = p + (five ? 48 : 16);
        auto scm = [&](int j, int &sc, int &m) {
            if (j < 4) {
                sc = q[j] & 63;
                m = q[j + 4] & 63;
            } else {
                sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
                m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
            }
        };
        for (int c = 0; c < 4; ++c) {
            int s0, m0, s1, m1;
            scm(2 * c, s0, m0);
            scm(2 * c + 1, s1, m1);
            for (int l = 0; l < 32; ++l) {
                int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
                if (five) {
                    lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                    hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
                }
                w[64 * c + l] = d * s0 * lo - dmin * m0;
                w[64 * c + 32 + l] = d * s1 * hi - dmin * m1;
            }
        }
        return;
    }
    case KPR_TYPE_Q6_K: {
        const float d = f16(208);
        for (int h = 0; h < 2; ++h) {
            const uint8_t *L = p + 64 * h, *H = p + 128 + 32 * h;
            const int8_t *S = reinterpret_cast<const int8_t *>(p + 192 + 8 * h);
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                w[128 * h + l] = d * S[is] * (((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32);
                w[128 * h + l + 32] = d * S[is + 2] * (((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32);
                w[128 * h + l + 64] = d * S[is + 4] * (((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32);
                w[128 * h + l + 96] = d * S[is + 6] * (((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32);
            }
        }
        return;
    }
    case KPR_TYPE_IQ4_XS: {
        const float d = f16(0);
        uint16_t sh;
        std::memcpy(&sh, p + 2, 2);
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = ((p[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; ++j) {
                w[32 * ib + j] = dl * kv[p[8 + 16 * ib + j] & 0xF];
                w[32 * ib + 16 + j] = dl * kv[p[8 + 16 * ib + j] >> 4];
            }
        }
        return;
    }
    case KPR_TYPE_IQ3_XXS: {
        const float d = f16(0);
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t aux;
            std::memcpy(&aux, p + 66 + 4 * ib, 4);
            const float sc = d * (0.5f + (aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; ++l) {
                const uint32_t s7 = (aux >> (7 * l)) & 127;
                const uint32_t signs = s7 | ((__builtin_popcount(s7) & 1) << 7);
                for (int k = 0; k < 2; ++k) {
                    static const uint32_t grid[256] = KPR_IQ3XXS_GRID_INIT;
                    const uint32_t g = grid[p[2 + 8 * ib + 2 * l + k]];
                    for (int j = 0; j < 4; ++j) {
                        const float v = static_cast<float>((g >> (8 * j)) & 0xFF);
                        w[32 * ib + 8 * l + 4 * k + j] = sc * (((signs >> (4 * k + j)) & 1) ? -v : v);
                    }
                }
            }
        }
        return;
    }
    case KPR_TYPE_IQ3_S: {
        const float d = f16(0);
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = (p[106 + ib / 2] >> (4 * (ib & 1))) & 0xF;
            const float sc = d * (1 + 2 * ls);
            for (int k = 0; k < 8; ++k) {
                const uint32_t idx = p[2 + 8 * ib + k] | (((p[66 + ib] >> k) & 1) << 8);
                static const uint32_t grid[512] = KPR_IQ3S_GRID_INIT;
                const uint32_t g = grid[idx];
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * k + j; // = 8m + jj
                    const int neg = (p[74 + 4 * ib + e / 8] >> (e % 8)) & 1;
                    const float v = static_cast<float>((g >> (8 * j)) & 0xFF);
                    w[32 * ib + e] = sc * (neg ? -v : v);
                }
            }
        }
        return;
    }
    default: return;
    }
}

inline void dequant_row(uint32_t type, const uint8_t *row, float *w, uint64_t cols) {
    const TypeInfo *t = tinfo(type);
    for (uint64_t b = 0; b < cols / t->qk; ++b) dequant_block(type, row + b * t->bytes, w + b * t->qk);
}

// q8_1 rounding as the ecosystem does it: d = amax / 127 (float), q = round(x / d), d stored as f16.
inline void round_q8_1(const float *x, float *out, uint64_t n) {
    for (uint64_t b = 0; b < n / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[32 * b + i]));
        const float d = amax / 127.0f;
        const float dh = h2f(f2h(d));
        for (int i = 0; i < 32; ++i) {
            const float q = amax == 0.0f ? 0.0f : std::round(x[32 * b + i] / d);
            out[32 * b + i] = dh * q;
        }
    }
}

} // namespace kpr::gputest

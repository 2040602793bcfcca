// The tests' own scalar reference: dequantize a GGUF block row to float, straight from the format's
// definition (abi/include/kpr/ggml_blocks.h and ggml's documented layouts), plus ggml's activation
// quantizers. Deliberately simple and independent of the provider's code.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kpr/ggml_blocks.h"

namespace kpr_test {

inline float h2f(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = std::ldexp((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp((float)(m | 1024), e - 25);
    return s ? -v : v;
}
inline uint16_t f2h(float f) { // round to nearest even via double arithmetic (fine for the test's values)
    if (f == 0.0f) return std::signbit(f) ? 0x8000 : 0;
    uint16_t best = 0;
    // search by construction: exponent then rounding
    const uint16_t sign = f < 0 ? 0x8000 : 0;
    const double a = std::fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    int e;
    std::frexp(a, &e); // a = m * 2^e, m in [0.5,1)
    int ex = e - 1 + 15;   // biased exponent for 1.m form
    if (ex <= 0) {         // subnormal: unit 2^-24
        double q = std::nearbyint(a / std::ldexp(1.0, -24));
        best = (uint16_t)q;
        return sign | best;
    }
    double unit = std::ldexp(1.0, e - 1 - 10);
    double q = std::nearbyint(a / unit); // in [1024, 2048]
    uint32_t mant = (uint32_t)q;
    if (mant == 2048) {
        mant = 1024;
        ++ex;
    }
    if (ex >= 31) return sign | 0x7c00;
    return (uint16_t)(sign | (ex << 10) | (mant - 1024));
}
inline float bf2f(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

struct TypeDesc {
    uint32_t type;
    const char *name;
    uint32_t block, bytes;
    int act; // 0 float, 1 q8_0, 2 q8_K
};

inline const std::vector<TypeDesc> &all_types() {
    static const std::vector<TypeDesc> t = {
        {KPR_TYPE_F32, "f32", 1, 4, 0},          {KPR_TYPE_F16, "f16", 1, 2, 0},
        {KPR_TYPE_BF16, "bf16", 1, 2, 0},        {KPR_TYPE_Q8_0, "q8_0", 32, 34, 1},
        {KPR_TYPE_Q4_0, "q4_0", 32, 18, 1},      {KPR_TYPE_Q4_1, "q4_1", 32, 20, 1},
        {KPR_TYPE_Q5_0, "q5_0", 32, 22, 1},      {KPR_TYPE_Q5_1, "q5_1", 32, 24, 1},
        {KPR_TYPE_IQ4_NL, "iq4_nl", 32, 18, 1},  {KPR_TYPE_Q2_K, "q2_K", 256, 84, 2},
        {KPR_TYPE_Q3_K, "q3_K", 256, 110, 2},    {KPR_TYPE_Q4_K, "q4_K", 256, 144, 2},
        {KPR_TYPE_Q5_K, "q5_K", 256, 176, 2},    {KPR_TYPE_Q6_K, "q6_K", 256, 210, 2},
        {KPR_TYPE_IQ4_XS, "iq4_xs", 256, 136, 2}, {KPR_TYPE_IQ3_XXS, "iq3_xxs", 256, 98, 2},
        {KPR_TYPE_IQ3_S, "iq3_s", 256, 110, 2},
    };
    return t;
}

inline uint16_t u16at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
inline void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

// Dequantize one block of `t` into out[block].
inline void dequant_block(uint32_t type, const uint8_t *b, float *y) {
    switch (type) {
    case KPR_TYPE_F32: std::memcpy(y, b, 4); return;
    case KPR_TYPE_F16: y[0] = h2f(u16at(b)); return;
    case KPR_TYPE_BF16: y[0] = bf2f(u16at(b)); return;
    case KPR_TYPE_Q8_0: {
        const float d = h2f(u16at(b));
        for (int i = 0; i < 32; ++i) y[i] = d * (float)(int8_t)b[2 + i];
        return;
    }
    case KPR_TYPE_Q4_0:
    case KPR_TYPE_IQ4_NL: {
        const float d = h2f(u16at(b));
        for (int j = 0; j < 16; ++j) {
            const int lo = b[2 + j] & 15, hi = b[2 + j] >> 4;
            if (type == KPR_TYPE_Q4_0) {
                y[j] = d * (float)(lo - 8);
                y[j + 16] = d * (float)(hi - 8);
            } else {
                y[j] = d * (float)kpr_kvalues_iq4nl[lo];
                y[j + 16] = d * (float)kpr_kvalues_iq4nl[hi];
            }
        }
        return;
    }
    case KPR_TYPE_Q4_1: {
        const float d = h2f(u16at(b)), m = h2f(u16at(b + 2));
        for (int j = 0; j < 16; ++j) {
            y[j] = d * (float)(b[4 + j] & 15) + m;
            y[j + 16] = d * (float)(b[4 + j] >> 4) + m;
        }
        return;
    }
    case KPR_TYPE_Q5_0:
    case KPR_TYPE_Q5_1: {
        const bool one = type == KPR_TYPE_Q5_1;
        const float d = h2f(u16at(b)), m = one ? h2f(u16at(b + 2)) : 0.0f;
        const uint8_t *qhp = b + (one ? 4 : 2);
        const uint32_t qh = qhp[0] | qhp[1] << 8 | qhp[2] << 16 | (uint32_t)qhp[3] << 24;
        const uint8_t *qs = qhp + 4;
        for (int j = 0; j < 16; ++j) {
            const int x0 = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            const int x1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            if (one) {
                y[j] = d * (float)x0 + m;
                y[j + 16] = d * (float)x1 + m;
            } else {
                y[j] = d * (float)(x0 - 16);
                y[j + 16] = d * (float)(x1 - 16);
            }
        }
        return;
    }
    case KPR_TYPE_Q2_K: {
        const uint8_t *sc = b, *qs = b + 16;
        const float d = h2f(u16at(b + 80)), dmin = h2f(u16at(b + 82));
        for (int h = 0; h < 2; ++h)
            for (int t = 0; t < 4; ++t)
                for (int part = 0; part < 2; ++part) {
                    const int s = 8 * h + 2 * t + part;
                    for (int l = 0; l < 16; ++l)
                        y[128 * h + 32 * t + 16 * part + l] =
                            d * (float)(sc[s] & 15) * (float)((qs[32 * h + 16 * part + l] >> (2 * t)) & 3) -
                            dmin * (float)(sc[s] >> 4);
                }
        return;
    }
    case KPR_TYPE_Q3_K: {
        const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
        const float d = h2f(u16at(b + 108));
        int scales[16];
        for (int j = 0; j < 16; ++j) {
            int low = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
            int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
            scales[j] = (low | high << 4) - 32;
        }
        int is = 0;
        for (int n = 0; n < 2; ++n) {
            for (int j = 0; j < 4; ++j) {
                for (int half = 0; half < 2; ++half) {
                    const float dl = d * (float)scales[is++];
                    for (int l = 0; l < 16; ++l) {
                        const int li = 16 * half + l;
                        const int q = (qs[32 * n + li] >> (2 * j)) & 3;
                        const int hb = (hm[li] >> (4 * n + j)) & 1;
                        y[128 * n + 32 * j + li] = dl * (float)(q - (hb ? 0 : 4));
                    }
                }
            }
        }
        return;
    }
    case KPR_TYPE_Q4_K:
    case KPR_TYPE_Q5_K: {
        const bool five = type == KPR_TYPE_Q5_K;
        const float d = h2f(u16at(b)), dmin = h2f(u16at(b + 2));
        const uint8_t *q = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
        auto scm = [&](int j, int &sc, int &m) {
            if (j < 4) {
                sc = q[j] & 63;
                m = q[j + 4] & 63;
            } else {
                sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
                m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
            }
        };
        for (int c = 0; c < 4; ++c) {
            int s0, m0, s1, m1;
            scm(2 * c, s0, m0);
            scm(2 * c + 1, s1, m1);
            for (int l = 0; l < 32; ++l) {
                int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
                if (five) {
                    lo += (qh[l] >> (2 * c) & 1) * 16;
                    hi += (qh[l] >> (2 * c + 1) & 1) * 16;
                }
                y[64 * c + l] = d * (float)s0 * (float)lo - dmin * (float)m0;
                y[64 * c + 32 + l] = d * (float)s1 * (float)hi - dmin * (float)m1;
            }
        }
        return;
    }
    case KPR_TYPE_Q6_K: {
        const float d = h2f(u16at(b + 208));
        for (int h = 0; h < 2; ++h) {
            const uint8_t *L = b + 64 * h, *H = b + 128 + 32 * h;
            const int8_t *S = (const int8_t *)(b + 192 + 8 * h);
            float *o = y + 128 * h;
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                o[l] = d * S[is] * (float)(((L[l] & 15) | ((H[l] & 3) << 4)) - 32);
                o[l + 32] = d * S[is + 2] * (float)(((L[l + 32] & 15) | (((H[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = d * S[is + 4] * (float)(((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = d * S[is + 6] * (float)(((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32);
            }
        }
        return;
    }
    case KPR_TYPE_IQ4_XS: {
        const float d = h2f(u16at(b));
        const uint16_t sh = u16at(b + 2);
        const uint8_t *sl = b + 4, *qs = b + 8;
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = ((sl[ib / 2] >> 4 * (ib % 2)) & 15) | (((sh >> 2 * ib) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[32 * ib + j] = dl * kpr_kvalues_iq4nl[qs[16 * ib + j] & 15];
                y[32 * ib + j + 16] = dl * kpr_kvalues_iq4nl[qs[16 * ib + j] >> 4];
            }
        }
        return;
    }
    case KPR_TYPE_IQ3_XXS: {
        const float d = h2f(u16at(b));
        const uint8_t *qs = b + 2;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t aux;
            std::memcpy(&aux, b + 66 + 4 * ib, 4);
            const int ls = (int)(aux >> 28);
            const float db = d * (0.5f + (float)ls) * 0.5f;
            for (int l = 0; l < 4; ++l) {
                const uint8_t signs = kpr_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                for (int k = 0; k < 2; ++k) {
                    const uint32_t g = kpr_iq3xxs_grid[qs[8 * ib + 2 * l + k]];
                    for (int j = 0; j < 4; ++j) {
                        const float v = (float)((g >> (8 * j)) & 255);
                        y[32 * ib + 8 * l + 4 * k + j] = db * v * ((signs & kpr_kmask_iq2xs[4 * k + j]) ? -1.f : 1.f);
                    }
                }
            }
        }
        return;
    }
    case KPR_TYPE_IQ3_S: {
        const float d = h2f(u16at(b));
        const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *scales = b + 106;
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = (scales[ib / 2] >> (4 * (ib & 1))) & 15;
            const float db = d * (float)(1 + 2 * ls);
            for (int k = 0; k < 8; ++k) {
                const uint32_t g = kpr_iq3s_grid[qs[8 * ib + k] | (((qh[ib] >> k) & 1) << 8)];
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * k + j;
                    const bool neg = (signs[4 * ib + e / 8] >> (e % 8)) & 1;
                    y[32 * ib + e] = db * (float)((g >> (8 * j)) & 255) * (neg ? -1.f : 1.f);
                }
            }
        }
        return;
    }
    default: return;
    }
}

inline std::vector<float> dequant_row(const TypeDesc &t, const uint8_t *row, size_t cols) {
    std::vector<float> out(cols);
    for (size_t b = 0; b < cols / t.block; ++b) dequant_block(t.type, row + b * t.bytes, out.data() + b * t.block);
    return out;
}

// Random weights: random bytes, then sane f16 scales where the format has them.
inline std::vector<uint8_t> random_weights(const TypeDesc &t, size_t nblocks, std::mt19937_64 &rng) {
    std::vector<uint8_t> w(nblocks * t.bytes);
    for (auto &b : w) b = (uint8_t)rng();
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.002f, 0.02f);
    for (size_t i = 0; i < nblocks; ++i) {
        uint8_t *b = w.data() + i * t.bytes;
        switch (t.type) {
        case KPR_TYPE_F32: {
            const float f = u(rng);
            std::memcpy(b, &f, 4);
            break;
        }
        case KPR_TYPE_F16: put16(b, f2h(u(rng))); break;
        case KPR_TYPE_BF16: {
            const float f = u(rng);
            uint32_t bits;
            std::memcpy(&bits, &f, 4);
            put16(b, (uint16_t)(bits >> 16));
            break;
        }
        case KPR_TYPE_Q8_0: case KPR_TYPE_Q4_0: case KPR_TYPE_Q5_0: case KPR_TYPE_IQ4_NL:
        case KPR_TYPE_IQ4_XS: case KPR_TYPE_IQ3_XXS: case KPR_TYPE_IQ3_S:
            put16(b, f2h(pos(rng) * (u(rng) < 0 ? -1.f : 1.f)));
            break;
        case KPR_TYPE_Q4_1: case KPR_TYPE_Q5_1:
            put16(b, f2h(pos(rng)));
            put16(b + 2, f2h(-pos(rng) * 8));
            break;
        case KPR_TYPE_Q2_K: put16(b + 80, f2h(pos(rng))); put16(b + 82, f2h(pos(rng))); break;
        case KPR_TYPE_Q3_K: put16(b + 108, f2h(pos(rng))); break;
        case KPR_TYPE_Q4_K: case KPR_TYPE_Q5_K: put16(b, f2h(pos(rng))); put16(b + 2, f2h(pos(rng))); break;
        case KPR_TYPE_Q6_K: put16(b + 208, f2h(pos(rng))); break;
        default: break;
        }
    }
    return w;
}

// ggml's activation quantizers, producing the dequantized values the kernel effectively multiplies by.
inline std::vector<double> round_q8_0(const float *x, size_t n) {
    std::vector<double> out(n);
    for (size_t b = 0; b < n / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[32 * b + i]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const double dh = h2f(f2h(d));
        for (int i = 0; i < 32; ++i) out[32 * b + i] = dh * (double)std::roundf(x[32 * b + i] * id);
    }
    return out;
}
inline std::vector<double> round_q8_K(const float *x, size_t n) {
    std::vector<double> out(n, 0.0);
    for (size_t b = 0; b < n / 256; ++b) {
        float amax = 0, mx = 0;
        for (int i = 0; i < 256; ++i)
            if (std::fabs(x[256 * b + i]) > amax) {
                amax = std::fabs(x[256 * b + i]);
                mx = x[256 * b + i];
            }
        if (amax == 0) continue;
        const float iscale = -127.0f / mx;
        const float d = 1.0f / iscale;
        for (int i = 0; i < 256; ++i) {
            const int v = std::min(127, (int)std::nearbyintf(iscale * x[256 * b + i]));
            out[256 * b + i] = (double)d * v;
        }
    }
    return out;
}

} // namespace kpr_test

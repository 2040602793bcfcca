// Portable C++ kernels (no ISA flags), the type table and the activation quantizers.
//
// Every quantized type is computed in the integer form its block format allows: the activations are
// quantized once per call (q8_0 per 32 or q8_K per 256, exactly as ggml's CPU path does), each weight block
// is decoded once into small integers plus its scales, and the dot products with all ncols columns are
// exact integer sums; floats only enter once per block (legacy) or super-block (K / IQ).
#include <algorithm>
#include <cmath>

#include "cpu_common.h"

namespace kpr_cpu {

namespace {
const TypeInfo kTypes[] = {
    {KPR_TYPE_F32, "f32", 1, 4, Act::Float},
    {KPR_TYPE_F16, "f16", 1, 2, Act::Float},
    {KPR_TYPE_BF16, "bf16", 1, 2, Act::Float},
    {KPR_TYPE_Q8_0, "q8_0", 32, 34, Act::Q8_0},
    {KPR_TYPE_Q4_0, "q4_0", 32, 18, Act::Q8_0},
    {KPR_TYPE_Q4_1, "q4_1", 32, 20, Act::Q8_0},
    {KPR_TYPE_Q5_0, "q5_0", 32, 22, Act::Q8_0},
    {KPR_TYPE_Q5_1, "q5_1", 32, 24, Act::Q8_0},
    {KPR_TYPE_IQ4_NL, "iq4_nl", 32, 18, Act::Q8_0},
    {KPR_TYPE_Q2_K, "q2_K", 256, 84, Act::Q8_K},
    {KPR_TYPE_Q3_K, "q3_K", 256, 110, Act::Q8_K},
    {KPR_TYPE_Q4_K, "q4_K", 256, 144, Act::Q8_K},
    {KPR_TYPE_Q5_K, "q5_K", 256, 176, Act::Q8_K},
    {KPR_TYPE_Q6_K, "q6_K", 256, 210, Act::Q8_K},
    {KPR_TYPE_IQ4_XS, "iq4_xs", 256, 136, Act::Q8_K},
    {KPR_TYPE_IQ3_XXS, "iq3_xxs", 256, 98, Act::Q8_K},
    {KPR_TYPE_IQ3_S, "iq3_s", 256, 110, Act::Q8_K},
};
} // namespace

const TypeInfo *type_info(uint32_t type) {
    for (const TypeInfo &t : kTypes)
        if (t.type == type) return &t;
    return nullptr;
}

const char *ggml_type_name(uint32_t type) {
    static const char *const names[KPR_TYPE_COUNT] = {
        "f32",    "f16",     "q4_0",   "q4_1",  "type 4", "type 5", "q5_0",   "q5_1",
        "q8_0",   "q8_1",    "q2_K",   "q3_K",  "q4_K",   "q5_K",   "q6_K",   "q8_K",
        "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s",  "iq2_s",  "iq4_xs",
        "i8",     "i16",     "i32",    "i64",   "f64",    "iq1_m",  "bf16"};
    return type < KPR_TYPE_COUNT ? names[type] : nullptr;
}

// ---- activation quantizers ----------------------------------------------------------------------

void quantize_q8_0(const float *x, size_t n, int8_t *q, float *d, int16_t *s) {
    for (size_t b = 0; b < n / 32; ++b) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
        const float dd = amax / 127.0f;
        const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
            const int v = (int)std::roundf(xb[i] * id);
            q[32 * b + i] = (int8_t)v;
            sum += v;
        }
        d[b] = fp16_to_fp32(fp32_to_fp16(dd));
        s[b] = (int16_t)sum;
    }
}

void quantize_q8_K(const float *x, size_t n, int8_t *q, float *d, int16_t *s) {
    for (size_t b = 0; b < n / 256; ++b) {
        const float *xb = x + 256 * b;
        int8_t *qb = q + 256 * b;
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < 256; ++i) {
            const float ax = std::fabs(xb[i]);
            if (ax > amax) {
                amax = ax;
                max = xb[i];
            }
        }
        if (amax == 0.0f) {
            d[b] = 0.0f;
            std::memset(qb, 0, 256);
            for (int g = 0; g < 16; ++g) s[16 * b + g] = 0;
            continue;
        }
        const float iscale = -127.0f / max;
        for (int i = 0; i < 256; ++i) {
            const int v = (int)std::nearbyintf(iscale * xb[i]);
            qb[i] = (int8_t)std::min(127, v);
        }
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += qb[16 * g + i];
            s[16 * b + g] = (int16_t)sum;
        }
        d[b] = 1.0f / iscale;
    }
}

// ---- portable kernels ---------------------------------------------------------------------------

namespace {

// Float weights: x kept in float.
template <uint32_t T> inline float load_w(const uint8_t *p, size_t i) {
    if constexpr (T == KPR_TYPE_F32) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    } else if constexpr (T == KPR_TYPE_F16) {
        return fp16_to_fp32(rd16(p + 2 * i));
    } else {
        return bf16_to_fp32(rd16(p + 2 * i));
    }
}

template <uint32_t T> void gemv_float(const Job &job, size_t r0, size_t r1) {
    const uint32_t nc = job.ncols;
    for (size_t r = r0; r < r1; ++r) {
        const uint8_t *row = job.w + r * job.row_bytes;
        float acc[KPR_MAX_NCOLS][4] = {};
        size_t k = 0;
        for (; k + 4 <= job.cols; k += 4) {
            float w[4];
            for (int u = 0; u < 4; ++u) w[u] = load_w<T>(row, k + u);
            for (uint32_t j = 0; j < nc; ++j)
                for (int u = 0; u < 4; ++u) acc[j][u] += w[u] * job.xf[j][k + u];
        }
        for (; k < job.cols; ++k) {
            const float w = load_w<T>(row, k);
            for (uint32_t j = 0; j < nc; ++j) acc[j][0] += w * job.xf[j][k];
        }
        for (uint32_t j = 0; j < nc; ++j) job.y[j][r] = (acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]);
    }
}

// Legacy (32-weight) blocks: decode to q[32] (int), a = scale of sum(q*x), b = coefficient of sum(x).
// contribution to column j = dx_j * (a * sum(q*xq_j) + b * sum(xq_j)).
template <uint32_t T> inline void decode_legacy(const uint8_t *blk, int q[32], float &a, float &b) {
    if constexpr (T == KPR_TYPE_Q8_0) {
        a = fp16_to_fp32(rd16(blk));
        b = 0.0f;
        for (int i = 0; i < 32; ++i) q[i] = (int8_t)blk[2 + i];
    } else if constexpr (T == KPR_TYPE_Q4_0 || T == KPR_TYPE_IQ4_NL) {
        a = fp16_to_fp32(rd16(blk));
        b = 0.0f;
        for (int i = 0; i < 16; ++i) {
            const int lo = blk[2 + i] & 0xF, hi = blk[2 + i] >> 4;
            if constexpr (T == KPR_TYPE_Q4_0) {
                q[i] = lo - 8;
                q[i + 16] = hi - 8;
            } else {
                q[i] = kpr_kvalues_iq4nl[lo];
                q[i + 16] = kpr_kvalues_iq4nl[hi];
            }
        }
    } else if constexpr (T == KPR_TYPE_Q4_1) {
        a = fp16_to_fp32(rd16(blk));
        b = fp16_to_fp32(rd16(blk + 2));
        for (int i = 0; i < 16; ++i) {
            q[i] = blk[4 + i] & 0xF;
            q[i + 16] = blk[4 + i] >> 4;
        }
    } else if constexpr (T == KPR_TYPE_Q5_0 || T == KPR_TYPE_Q5_1) {
        constexpr int off = T == KPR_TYPE_Q5_1 ? 2 : 0;
        a = fp16_to_fp32(rd16(blk));
        b = T == KPR_TYPE_Q5_1 ? fp16_to_fp32(rd16(blk + 2)) : 0.0f;
        const uint32_t qh = rd32(blk + 2 + off);
        const uint8_t *qs = blk + 6 + off;
        constexpr int bias = T == KPR_TYPE_Q5_0 ? 16 : 0;
        for (int i = 0; i < 16; ++i) {
            q[i] = ((qs[i] & 0xF) | (((qh >> i) & 1) << 4)) - bias;
            q[i + 16] = ((qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4)) - bias;
        }
    }
}

template <uint32_t T> void gemv_legacy(const Job &job, size_t r0, size_t r1) {
    constexpr size_t bytes = T == KPR_TYPE_Q8_0   ? 34
                             : T == KPR_TYPE_Q4_1 ? 20
                             : T == KPR_TYPE_Q5_0 ? 22
                             : T == KPR_TYPE_Q5_1 ? 24
                                                  : 18;
    const uint32_t nc = job.ncols;
    const size_t nb = job.cols / 32;
    for (size_t r = r0; r < r1; ++r) {
        const uint8_t *row = job.w + r * job.row_bytes;
        float acc[KPR_MAX_NCOLS] = {};
        for (size_t ib = 0; ib < nb; ++ib) {
            int q[32];
            float a, b;
            decode_legacy<T>(row + ib * bytes, q, a, b);
            for (uint32_t j = 0; j < nc; ++j) {
                const int8_t *xq = job.xq[j] + 32 * ib;
                int sum = 0;
                for (int i = 0; i < 32; ++i) sum += q[i] * xq[i];
                acc[j] += job.xd[j][ib] * (a * (float)sum + b * (float)job.xs[j][ib]);
            }
        }
        for (uint32_t j = 0; j < nc; ++j) job.y[j][r] = acc[j];
    }
}

// K / IQ super-blocks (256 weights): q[256] small ints, sc[16] integer scale per 16 weights,
// mn[16] integer coefficient of each 16-sum of x, d and dm float:
// contribution to column j = dx_j * (d * sum_s sc[s] * sum_{i in s} q[i]*xq_j[i] + dm * sum_s mn[s] * bsum_j[s]).
struct KDec {
    int q[256];
    int sc[16];
    int mn[16];
    float d, dm;
    bool has_mn;
};

template <uint32_t T> inline void decode_k(const uint8_t *blk, KDec &o) {
    o.has_mn = false;
    o.dm = 0.0f;
    if constexpr (T == KPR_TYPE_Q2_K) {
        const uint8_t *scales = blk, *qs = blk + 16;
        o.d = fp16_to_fp32(rd16(blk + 80));
        o.dm = -fp16_to_fp32(rd16(blk + 82));
        o.has_mn = true;
        for (int s = 0; s < 16; ++s) {
            o.sc[s] = scales[s] & 0xF;
            o.mn[s] = scales[s] >> 4;
        }
        for (int h = 0; h < 2; ++h)
            for (int t = 0; t < 4; ++t)
                for (int l = 0; l < 32; ++l) o.q[128 * h + 32 * t + l] = (qs[32 * h + l] >> (2 * t)) & 3;
    } else if constexpr (T == KPR_TYPE_Q3_K) {
        const uint8_t *hm = blk, *qs = blk + 32, *scales = blk + 96;
        o.d = fp16_to_fp32(rd16(blk + 108));
        for (int s = 0; s < 16; ++s) o.sc[s] = q3k_scale(scales, s) - 32;
        for (int n = 0; n < 2; ++n)
            for (int j = 0; j < 4; ++j)
                for (int l = 0; l < 32; ++l) {
                    const int v = (qs[32 * n + l] >> (2 * j)) & 3;
                    const int hb = (hm[l] >> (4 * n + j)) & 1;
                    o.q[128 * n + 32 * j + l] = v - (hb ? 0 : 4);
                }
    } else if constexpr (T == KPR_TYPE_Q4_K || T == KPR_TYPE_Q5_K) {
        const uint8_t *scales = blk + 4;
        const uint8_t *qh = blk + 16;
        const uint8_t *qs = T == KPR_TYPE_Q4_K ? blk + 16 : blk + 48;
        o.d = fp16_to_fp32(rd16(blk));
        o.dm = -fp16_to_fp32(rd16(blk + 2));
        o.has_mn = true;
        for (int s = 0; s < 8; ++s) {
            uint8_t sc, m;
            k4_scale_min(scales, s, sc, m);
            o.sc[2 * s] = o.sc[2 * s + 1] = sc;
            o.mn[2 * s] = o.mn[2 * s + 1] = m;
        }
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l) {
                int lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
                if constexpr (T == KPR_TYPE_Q5_K) {
                    lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                    hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
                }
                o.q[64 * c + l] = lo;
                o.q[64 * c + 32 + l] = hi;
            }
    } else if constexpr (T == KPR_TYPE_Q6_K) {
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t *scales = (const int8_t *)(blk + 192);
        o.d = fp16_to_fp32(rd16(blk + 208));
        for (int s = 0; s < 16; ++s) o.sc[s] = scales[s];
        for (int h = 0; h < 2; ++h) {
            const uint8_t *L = ql + 64 * h, *H = qh + 32 * h;
            int *q = o.q + 128 * h;
            for (int l = 0; l < 32; ++l) {
                q[l] = ((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32;
                q[l + 32] = ((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32;
                q[l + 64] = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32;
                q[l + 96] = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32;
            }
        }
    } else if constexpr (T == KPR_TYPE_IQ4_XS) {
        o.d = fp16_to_fp32(rd16(blk));
        const uint16_t sh = rd16(blk + 2);
        const uint8_t *sl = blk + 4, *qs = blk + 8;
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            o.sc[2 * ib] = o.sc[2 * ib + 1] = ls - 32;
            for (int j = 0; j < 16; ++j) {
                o.q[32 * ib + j] = kpr_kvalues_iq4nl[qs[16 * ib + j] & 0xF];
                o.q[32 * ib + j + 16] = kpr_kvalues_iq4nl[qs[16 * ib + j] >> 4];
            }
        }
    } else if constexpr (T == KPR_TYPE_IQ3_XXS) {
        o.d = 0.25f * fp16_to_fp32(rd16(blk));
        const uint8_t *qs = blk + 2;
        for (int ib = 0; ib < 8; ++ib) {
            const uint32_t aux = rd32(blk + 66 + 4 * ib);
            o.sc[2 * ib] = o.sc[2 * ib + 1] = 2 * (int)(aux >> 28) + 1;
            for (int l = 0; l < 4; ++l) {
                const uint8_t signs = kpr_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                for (int k = 0; k < 2; ++k) {
                    const uint32_t g = kpr_iq3xxs_grid[qs[8 * ib + 2 * l + k]];
                    for (int j = 0; j < 4; ++j) {
                        const int v = (g >> (8 * j)) & 0xFF;
                        o.q[32 * ib + 8 * l + 4 * k + j] = (signs >> (4 * k + j)) & 1 ? -v : v;
                    }
                }
            }
        }
    } else if constexpr (T == KPR_TYPE_IQ3_S) {
        o.d = fp16_to_fp32(rd16(blk));
        const uint8_t *qs = blk + 2, *qh = blk + 66, *signs = blk + 74, *scales = blk + 106;
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = (scales[ib / 2] >> (4 * (ib & 1))) & 0xF;
            o.sc[2 * ib] = o.sc[2 * ib + 1] = 1 + 2 * ls;
            for (int k = 0; k < 8; ++k) {
                const uint32_t g = kpr_iq3s_grid[qs[8 * ib + k] | (((qh[ib] >> k) & 1) << 8)];
                for (int j = 0; j < 4; ++j) {
                    const int e = 4 * k + j; // weight within the sub-block
                    const int v = (g >> (8 * j)) & 0xFF;
                    o.q[32 * ib + e] = (signs[4 * ib + e / 8] >> (e % 8)) & 1 ? -v : v;
                }
            }
        }
    }
}

template <uint32_t T> void gemv_k(const Job &job, size_t r0, size_t r1) {
    constexpr size_t bytes = T == KPR_TYPE_Q2_K      ? 84
                             : T == KPR_TYPE_Q3_K    ? 110
                             : T == KPR_TYPE_Q4_K    ? 144
                             : T == KPR_TYPE_Q5_K    ? 176
                             : T == KPR_TYPE_Q6_K    ? 210
                             : T == KPR_TYPE_IQ4_XS  ? 136
                             : T == KPR_TYPE_IQ3_XXS ? 98
                                                     : 110;
    const uint32_t nc = job.ncols;
    const size_t nb = job.cols / 256;
    KDec dec;
    for (size_t r = r0; r < r1; ++r) {
        const uint8_t *row = job.w + r * job.row_bytes;
        float acc[KPR_MAX_NCOLS] = {};
        for (size_t ib = 0; ib < nb; ++ib) {
            decode_k<T>(row + ib * bytes, dec);
            for (uint32_t j = 0; j < nc; ++j) {
                const int8_t *xq = job.xq[j] + 256 * ib;
                int isum = 0;
                for (int s = 0; s < 16; ++s) {
                    int part = 0;
                    for (int i = 0; i < 16; ++i) part += dec.q[16 * s + i] * xq[16 * s + i];
                    isum += dec.sc[s] * part;
                }
                float v = dec.d * (float)isum;
                if (dec.has_mn) {
                    int msum = 0;
                    for (int s = 0; s < 16; ++s) msum += dec.mn[s] * job.xs[j][16 * ib + s];
                    v += dec.dm * (float)msum;
                }
                acc[j] += job.xd[j][ib] * v;
            }
        }
        for (uint32_t j = 0; j < nc; ++j) job.y[j][r] = acc[j];
    }
}

KernelTable make_portable() {
    KernelTable t{};
    t.isa = "portable";
    t.fn[KPR_TYPE_F32] = gemv_float<KPR_TYPE_F32>;
    t.fn[KPR_TYPE_F16] = gemv_float<KPR_TYPE_F16>;
    t.fn[KPR_TYPE_BF16] = gemv_float<KPR_TYPE_BF16>;
    t.fn[KPR_TYPE_Q8_0] = gemv_legacy<KPR_TYPE_Q8_0>;
    t.fn[KPR_TYPE_Q4_0] = gemv_legacy<KPR_TYPE_Q4_0>;
    t.fn[KPR_TYPE_Q4_1] = gemv_legacy<KPR_TYPE_Q4_1>;
    t.fn[KPR_TYPE_Q5_0] = gemv_legacy<KPR_TYPE_Q5_0>;
    t.fn[KPR_TYPE_Q5_1] = gemv_legacy<KPR_TYPE_Q5_1>;
    t.fn[KPR_TYPE_IQ4_NL] = gemv_legacy<KPR_TYPE_IQ4_NL>;
    t.fn[KPR_TYPE_Q2_K] = gemv_k<KPR_TYPE_Q2_K>;
    t.fn[KPR_TYPE_Q3_K] = gemv_k<KPR_TYPE_Q3_K>;
    t.fn[KPR_TYPE_Q4_K] = gemv_k<KPR_TYPE_Q4_K>;
    t.fn[KPR_TYPE_Q5_K] = gemv_k<KPR_TYPE_Q5_K>;
    t.fn[KPR_TYPE_Q6_K] = gemv_k<KPR_TYPE_Q6_K>;
    t.fn[KPR_TYPE_IQ4_XS] = gemv_k<KPR_TYPE_IQ4_XS>;
    t.fn[KPR_TYPE_IQ3_XXS] = gemv_k<KPR_TYPE_IQ3_XXS>;
    t.fn[KPR_TYPE_IQ3_S] = gemv_k<KPR_TYPE_IQ3_S>;
    return t;
}

} // namespace

const KernelTable &portable_kernels() {
    static const KernelTable t = make_portable();
    return t;
}

} // namespace kpr_cpu

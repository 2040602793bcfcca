// kpr_cuda_blocks.cuh -- GGUF block decoding and block dot products against q8_1 (or float)
// activations, one struct per weight type. Every CUDA provider that reads GGUF blocks uses these.
//
// A type T describes how a warp walks a row: the row is cut into chunks of T::CB blocks (T::CB * T::BS
// bytes, staged in shared memory); each block is split into T::PARTS items of T::EPI consecutive
// weights; a lane computes T::ITEMS items per chunk. T::item<NC, R>(w, part, x, k0, tab, acc) adds the
// item's dot products for R rows (w[r] = the block in shared memory) and NC activation columns into
// acc[r][j]. The order of every floating-point operation is fixed here, so two providers that use the
// same T with the same table values produce bitwise identical results (iq_stage_tables vs generic_cuda).
#pragma once

#include "kpr_cuda_util.cuh"

#include <kpr/ggml_blocks.h>

#include <cstdint>

namespace kpr::cuda {

// Activations as the kernels see them: q8_1 planes (see kpr_cuda_act.cuh) or float, plus the index of
// the vector that column 0 uses (column j reads vector vbase + j).
struct XView {
    const int8_t *q;
    const float *d;
    const float *s;
    const float *f;
    uint32_t cols;
    uint32_t vbase;

    template <int N>
    __device__ __forceinline__ void words(int j, uint32_t k0, int (&w)[N]) const {
        static_assert(N % 4 == 0);
        const int4 *p = reinterpret_cast<const int4 *>(q + static_cast<size_t>(vbase + j) * cols + k0);
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const int4 t = __ldg(p + i);
            w[4 * i + 0] = t.x;
            w[4 * i + 1] = t.y;
            w[4 * i + 2] = t.z;
            w[4 * i + 3] = t.w;
        }
    }
    __device__ __forceinline__ float dq(int j, uint32_t k) const {
        return __ldg(d + static_cast<size_t>(vbase + j) * (cols / 32) + k / 32);
    }
    __device__ __forceinline__ float sq(int j, uint32_t k) const {
        return __ldg(s + static_cast<size_t>(vbase + j) * (cols / 32) + k / 32);
    }
    template <int N>
    __device__ __forceinline__ void floats(int j, uint32_t k0, float (&v)[N]) const {
        static_assert(N % 4 == 0);
        const float4 *p = reinterpret_cast<const float4 *>(f + static_cast<size_t>(vbase + j) * cols + k0);
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const float4 t = __ldg(p + i);
            v[4 * i + 0] = t.x;
            v[4 * i + 1] = t.y;
            v[4 * i + 2] = t.z;
            v[4 * i + 3] = t.w;
        }
    }
};

template <int N, bool EMU = false>
__device__ __forceinline__ int dot_words(const uint32_t *w, const int *x, int c = 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) c = dp4a<EMU>(static_cast<int>(w[i]), x[i], c);
    return c;
}

template <int N>
__device__ __forceinline__ int sum_words(const int *x) {
    int c = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) c = dp4a(0x01010101, x[i], c);
    return c;
}

// IQ4_NL / IQ4_XS's values as prmt tables, split by the index's top bit: those of indices 0..7 (signed), their
// negations and those of 8..15 (all positive: TQ4Like's one- and two-column lookups), and those of 15..8, as they are
// and plus one (the tile kernels' lookups of index 15 - n, kpr_cuda_mma.cuh iq4_xs_product and iq4_nl_product).
constexpr uint32_t kIq4Lo0 = 0xBFAD9881u;    // -127 -104 -83 -65 (kvalues[0..3], bytes 0..3, little-endian)
constexpr uint32_t kIq4Lo1 = 0xF6EADDCFu;    // -49 -35 -22 -10
constexpr uint32_t kIq4NegLo0 = 0x4153687Fu; // 127 104 83 65 (= -kvalues[0..3])
constexpr uint32_t kIq4NegLo1 = 0x0A162331u; // 49 35 22 10
constexpr uint32_t kIq4Hi0 = 0x26190D01u;    // 1 13 25 38
constexpr uint32_t kIq4Hi1 = 0x71594535u;    // 53 69 89 113
constexpr uint32_t kIq4HiRev0 = 0x35455971u;    // 113 89 69 53 (kvalues[15 - j], j = 0..3)
constexpr uint32_t kIq4HiRev1 = 0x010D1926u;    // 38 25 13 1 (j = 4..7)
constexpr uint32_t kIq4HiRevP1_0 = 0x36465A72u; // 114 90 70 54 (kvalues[15 - j] + 1, j = 0..3)
constexpr uint32_t kIq4HiRevP1_1 = 0x020E1A27u; // 39 26 14 2 (j = 4..7)

// IQ4_NL / IQ4_XS: four nibbles (one per byte, values 0..15) -> four kvalues bytes, with byte permutes. The
// tables' register words lo0 (kIq4Lo0) and hi0 (kIq4Hi0) come from the caller (Iq4Words).
__device__ __forceinline__ uint32_t kvalues4(uint32_t idx, uint32_t lo0, uint32_t hi0) {
    uint32_t sel = (idx & 0x07070707u) | ((idx & 0x07070707u) >> 4); // nibble pairs in bytes 0 and 2
    sel = __byte_perm(sel, 0, 0x0020);                                    // bytes 0, 2 -> selector bits 0..15
    const uint32_t lo = __byte_perm(lo0, kIq4Lo1, sel);
    const uint32_t hi = __byte_perm(hi0, kIq4Hi1, sel);
    const uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
    return (lo & ~m) | (hi & m);
}

// ---- legacy 32-weight types ---------------------------------------------------------------------

struct TQ8_0 {
    static constexpr uint32_t TYPE = KPR_TYPE_Q8_0, QK = 32, BS = 34, CB = 64, PARTS = 1;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, bool EMU = false, class X = XView>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t, const X &x,
                                                uint32_t k0, const Tab &, float (&acc)[R][NC]) {
        uint32_t q[R][8];
        float d[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            d[r] = f16_to_float(load_u16(w[r]));
            load_words_a2<8>(w[r] + 2, q[r]);
        }
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            int xw[8];
            x.template words<8>(j, k0, xw);
            const float dx = x.dq(j, k0);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int s = dot_words<8, EMU>(q[r], xw);
                acc[r][j] = __fmaf_rn(static_cast<float>(s), __fmul_rn(d[r], dx), acc[r][j]);
            }
        }
    }
};

// The IQ4 lookups' table words that a prmt takes in a register (the table's other word is its immediate), loaded
// from memory once per thread (TabGlobal::prologue, the tile kernel's prologue) and passed to the decoders. Written
// as constants, ptxas keeps them in uniform registers and copies one into a register before nearly every lookup
// (an IMAD per prmt: the one-column IQ4_NL row kernel's chunk loop 826 -> 703 instructions without the copies;
// docs/cuda-tuning-log.md, fortieth session). The load goes through PTX (ldg_opaque_u32), so that neither compiler
// folds it back into the constant it was initialised with; where a kernel uses none of them, they are dead code.
static __device__ const uint32_t g_iq4_words[7] = {kIq4Hi0, kIq4NegLo0, kIq4Lo0, kIq4HiRevP1_0, kIq4HiRev0, 0xFFFFFFFFu, 0x10000u};
__device__ __forceinline__ uint32_t ldg_opaque_u32(const uint32_t *p) {
    uint32_t v;
    asm("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
struct Iq4Words {
    uint32_t hi0;     // kIq4Hi0
    uint32_t neg_lo0; // kIq4NegLo0
    uint32_t lo0;     // kIq4Lo0
    uint32_t hirev_p1_0; // kIq4HiRevP1_0
    uint32_t hirev0;     // kIq4HiRev0
    // 0xFFFFFFFF and 0x10000, always loaded: the multipliers of the tile kernels' complements 0xFFFF - s and high
    // halves s >> 16 (iq4_nl_product, iq4_xs_product), which ptxas keeps as IMADs (the FMA pipe) only while it
    // cannot see what they multiply by
    uint32_t ones, sh16;
    // the table words as constants: for kernels whose registers are too few to keep five more live (ptxas then
    // copies the constants as before)
    __device__ __forceinline__ static Iq4Words constants() {
        return Iq4Words{kIq4Hi0, kIq4NegLo0, kIq4Lo0, kIq4HiRevP1_0, kIq4HiRev0, ldg_opaque_u32(&g_iq4_words[5]),
                        ldg_opaque_u32(&g_iq4_words[6])};
    }
    __device__ __forceinline__ static Iq4Words load() {
        return Iq4Words{ldg_opaque_u32(&g_iq4_words[0]), ldg_opaque_u32(&g_iq4_words[1]), ldg_opaque_u32(&g_iq4_words[2]),
                        ldg_opaque_u32(&g_iq4_words[3]), ldg_opaque_u32(&g_iq4_words[4]), ldg_opaque_u32(&g_iq4_words[5]),
                        ldg_opaque_u32(&g_iq4_words[6])};
    }
};

// IQ4_NL / IQ4_XS at one and two columns: the lookups of a 32-weight unit's four raw words q[0..3], straight from
// the nibble pairs (weights i and i + 16 share a byte; the quantizer wrote the activations in that order,
// act_nibble_order). Word i covers activations 4i..4i+3 of the nibble order, word 4 + i activations 16 + 4i... v
// holds the values of indices 8..15 (the selector flipped with ^ 0x8888 zeroes 0..7), nu the negated values of
// indices 0..7 (the selector's top bit zeroes 8..15); the unit's dot is dot(v, x) - dot(nu, x).
__device__ __forceinline__ void iq4_nibble_order_lookups(const uint32_t (&q)[4], const Iq4Words &words,
                                                         uint32_t (&v)[8], uint32_t (&nu)[8]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t qx = q[i] ^ 0x88888888u;
        v[i] = prmt(words.hi0, kIq4Hi1, qx);
        v[4 + i] = prmt(words.hi0, kIq4Hi1, qx >> 16);
        nu[i] = prmt(words.neg_lo0, kIq4NegLo1, q[i]);
        nu[4 + i] = prmt(words.neg_lo0, kIq4NegLo1, q[i] >> 16);
    }
}

// Whether the row kernel of `type` at `ncols` columns reads its activations with each 32-value block in the
// tile layout's order (tile_perm_pos: x[i], x[i + 16], x[i + 1], x[i + 17], ...), which the quantizer then
// writes (quantize_act_q8_1<true>, launch_gemv_nc): IQ4_NL's and IQ4_XS's one- and two-column lookups take a
// weight byte's two nibbles (weights i and i + 16 of a 32-weight unit) together.
constexpr bool act_nibble_order(uint32_t type, int ncols) {
    return (type == KPR_TYPE_IQ4_NL || type == KPR_TYPE_IQ4_XS) && ncols <= 2;
}

template <uint32_t TYPE_ID>
struct TQ4Like { // Q4_0 and IQ4_NL: d, then 16 bytes of nibbles (low = weights 0..15, high = 16..31)
    static constexpr uint32_t TYPE = TYPE_ID, QK = 32, BS = 18, CB = 128, PARTS = 1;
    static constexpr bool FLOAT_X = false;
    static constexpr bool NL = TYPE_ID == KPR_TYPE_IQ4_NL;
    // One or two columns (the decode is paid per weight, not per column):
    // Q4_0 feeds the nibbles (0..15) to the byte dot products unsigned and takes the -8 offset out with
    // the activations' block sum s = d_x * sum(q_x): sum((q - 8) x) = d_x * dot(q, q_x) - 8 s.
    // IQ4_NL: the nibble pairs of a weight byte (weights i and i + 16) index two prmt tables straight
    // from the raw word (iq4_nibble_order_lookups); dot = dot(values of 8..15) - dot(negated values of 0..7).
    // Three columns and more: signed weight bytes decoded once per row and shared by the columns.
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t, const X &x,
                                                uint32_t k0, const Tab &tab, float (&acc)[R][NC]) {
        constexpr bool FEW = NC <= 2;
        uint32_t v[R][8], u[R][8];
        float d[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            d[r] = f16_to_float(load_u16(w[r]));
            uint32_t q[4];
            load_words_a2<4>(w[r] + 2, q);
            if constexpr (NL && FEW) {
                iq4_nibble_order_lookups(q, tab.iq4, v[r], u[r]);
                continue; // the rest of the loop body is the other decodes
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if constexpr (NL) {
                    v[r][i] = kvalues4(q[i] & 0x0F0F0F0Fu, tab.iq4.lo0, tab.iq4.hi0);
                    v[r][4 + i] = kvalues4((q[i] >> 4) & 0x0F0F0F0Fu, tab.iq4.lo0, tab.iq4.hi0);
                    u[r][i] = u[r][4 + i] = 0;
                } else if constexpr (FEW) {
                    v[r][i] = q[i] & 0x0F0F0F0Fu;
                    v[r][4 + i] = (q[i] >> 4) & 0x0F0F0F0Fu;
                    u[r][i] = u[r][4 + i] = 0;
                } else {
                    v[r][i] = bytes_sub(q[i] & 0x0F0F0F0Fu, 0x08080808u);
                    v[r][4 + i] = bytes_sub((q[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
                    u[r][i] = u[r][4 + i] = 0;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            int xw[8];
            x.template words<8>(j, k0, xw);
            const float dx = x.dq(j, k0);
            if constexpr (NL && FEW) {
                static_assert(act_nibble_order(TYPE, NC), "the activations come in the nibble order");
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int s = dot_words<8>(v[r], xw) - dot_words<8>(u[r], xw);
                    acc[r][j] = __fmaf_rn(static_cast<float>(s), __fmul_rn(d[r], dx), acc[r][j]);
                }
            } else if constexpr (!NL && FEW) {
                const float sx = x.sq(j, k0);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int s = dot_words<8>(v[r], xw);
                    const float t = __fmaf_rn(-8.0f, sx, __fmul_rn(dx, static_cast<float>(s)));
                    acc[r][j] = __fmaf_rn(d[r], t, acc[r][j]);
                }
            } else {
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int s = dot_words<8>(v[r], xw);
                    acc[r][j] = __fmaf_rn(static_cast<float>(s), __fmul_rn(d[r], dx), acc[r][j]);
                }
            }
        }
    }
};
using TQ4_0 = TQ4Like<KPR_TYPE_Q4_0>;
using TIQ4_NL = TQ4Like<KPR_TYPE_IQ4_NL>;

// Q4_1 / Q5_0 / Q5_1: w = d * q + m (Q5_0: d * (q - 16)); the 5th bit comes from qh.
template <uint32_t TYPE_ID>
struct TQ45 {
    static constexpr bool HAS_M = TYPE_ID != KPR_TYPE_Q5_0;
    static constexpr bool HAS_H = TYPE_ID != KPR_TYPE_Q4_1;
    static constexpr uint32_t TYPE = TYPE_ID, QK = 32;
    static constexpr uint32_t BS = TYPE_ID == KPR_TYPE_Q4_1 ? 20 : TYPE_ID == KPR_TYPE_Q5_0 ? 22 : 24;
    static constexpr uint32_t CB = 64, PARTS = 1;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t, const X &x,
                                                uint32_t k0, const Tab &, float (&acc)[R][NC]) {
        uint32_t v[R][8];
        float d[R], m[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *p = w[r];
            d[r] = f16_to_float(load_u16(p));
            m[r] = HAS_M ? f16_to_float(load_u16(p + 2)) : 0.0f;
            uint32_t q[4];
            uint32_t qh = 0;
            if constexpr (TYPE_ID == KPR_TYPE_Q4_1) {
                load_words_a2<4>(p + 4, q);
            } else if constexpr (TYPE_ID == KPR_TYPE_Q5_0) {
                uint32_t h[1];
                load_words_a2<1>(p + 2, h);
                qh = h[0];
                load_words_a2<4>(p + 6, q);
            } else {
                uint32_t h[1];
                load_words_a2<1>(p + 4, h);
                qh = h[0];
                load_words_a2<4>(p + 8, q);
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                uint32_t lo = q[i] & 0x0F0F0F0Fu;
                uint32_t hi = (q[i] >> 4) & 0x0F0F0F0Fu;
                if constexpr (HAS_H) {
                    lo |= nibble_to_bytebits((qh >> (4 * i)) & 0xFu) << 4;
                    hi |= nibble_to_bytebits((qh >> (16 + 4 * i)) & 0xFu) << 4;
                }
                if constexpr (TYPE_ID == KPR_TYPE_Q5_0) {
                    lo = bytes_sub(lo, 0x10101010u);
                    hi = bytes_sub(hi, 0x10101010u);
                }
                v[r][i] = lo;
                v[r][4 + i] = hi;
            }
        }
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            int xw[8];
            x.template words<8>(j, k0, xw);
            const float dx = x.dq(j, k0);
            const float sx = HAS_M ? x.sq(j, k0) : 0.0f;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int s = dot_words<8>(v[r], xw);
                float t = __fmaf_rn(static_cast<float>(s), __fmul_rn(d[r], dx), acc[r][j]);
                if constexpr (HAS_M) t = __fmaf_rn(m[r], sx, t);
                acc[r][j] = t;
            }
        }
    }
};
using TQ4_1 = TQ45<KPR_TYPE_Q4_1>;
using TQ5_0 = TQ45<KPR_TYPE_Q5_0>;
using TQ5_1 = TQ45<KPR_TYPE_Q5_1>;

// ---- K quants (256 weights): an item is a quarter block, 64 consecutive weights -------------------

__device__ __forceinline__ void k4_scale_min(const uint8_t *s, int j, int &sc, int &m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// The scales and mins of sub-blocks 2c and 2c + 1 (c = 0..3), without branches: all eight 6-bit scales
// and mins assembled as bytes from the three 4-byte-aligned words of the 12 packed bytes, then the two
// wanted bytes picked with prmt (the same values as k4_scale_min).
__device__ __forceinline__ void k4_scale_min_pair(const uint8_t *s, uint32_t c, int &sc0, int &m0, int &sc1,
                                                  int &m1) {
    uint32_t w[3];
    load_words_a2<3>(s, w);
    const uint32_t sc_lo = w[0] & 0x3F3F3F3Fu, m_lo = w[1] & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (w[2] & 0x0F0F0F0Fu) | (((w[0] >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0Fu) | (((w[1] >> 6) & 0x03030303u) << 4);
    const uint32_t sel = (2 * c) | ((2 * c + 1) << 4);
    const uint32_t scp = prmt(sc_lo, sc_hi, sel), mp = prmt(m_lo, m_hi, sel);
    sc0 = static_cast<int>(scp & 0xFFu);
    sc1 = static_cast<int>((scp >> 8) & 0xFFu);
    m0 = static_cast<int>(mp & 0xFFu);
    m1 = static_cast<int>((mp >> 8) & 0xFFu);
}

template <uint32_t TYPE_ID>
struct TQ45K { // Q4_K and Q5_K
    static constexpr bool Q5 = TYPE_ID == KPR_TYPE_Q5_K;
    static constexpr uint32_t TYPE = TYPE_ID, QK = 256, BS = Q5 ? 176 : 144, CB = 16, PARTS = 4;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t c, const X &x,
                                                uint32_t k0, const Tab &, float (&acc)[R][NC]) {
        uint32_t lo[R][8], hi[R][8];
        float d0[R], d1[R], m0[R], m1[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *p = w[r];
            const float d = f16_to_float(load_u16(p));
            const float dmin = f16_to_float(load_u16(p + 2));
            int sc0, mm0, sc1, mm1;
            k4_scale_min_pair(p + 4, c, sc0, mm0, sc1, mm1);
            d0[r] = __fmul_rn(d, static_cast<float>(sc0));
            d1[r] = __fmul_rn(d, static_cast<float>(sc1));
            m0[r] = __fmul_rn(dmin, static_cast<float>(mm0));
            m1[r] = __fmul_rn(dmin, static_cast<float>(mm1));
            uint32_t q[8];
            if constexpr (Q5) {
                // 176-byte blocks: the chunk is 16-byte aligned, so qs (offset 48 + 32c) is too
                load_words_a16<8>(p + 48 + 32 * c, q);
                uint32_t h[8];
                load_words_a16<8>(p + 16, h);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    lo[r][i] = (q[i] & 0x0F0F0F0Fu) | (((h[i] >> (2 * c)) & 0x01010101u) << 4);
                    hi[r][i] = ((q[i] >> 4) & 0x0F0F0F0Fu) | (((h[i] >> (2 * c + 1)) & 0x01010101u) << 4);
                }
            } else {
                load_words_a16<8>(p + 16 + 32 * c, q);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    lo[r][i] = q[i] & 0x0F0F0F0Fu;
                    hi[r][i] = (q[i] >> 4) & 0x0F0F0F0Fu;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            int xw[16];
            x.template words<16>(j, k0, xw);
            const float dx0 = x.dq(j, k0), dx1 = x.dq(j, k0 + 32);
            const float sx0 = x.sq(j, k0), sx1 = x.sq(j, k0 + 32);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int s0 = dot_words<8>(lo[r], xw);
                const int s1 = dot_words<8>(hi[r], xw + 8);
                float t = acc[r][j];
                t = __fmaf_rn(static_cast<float>(s0), __fmul_rn(d0[r], dx0), t);
                t = __fmaf_rn(static_cast<float>(s1), __fmul_rn(d1[r], dx1), t);
                t = __fmaf_rn(-m0[r], sx0, t);
                t = __fmaf_rn(-m1[r], sx1, t);
                acc[r][j] = t;
            }
        }
    }
};
using TQ4_K = TQ45K<KPR_TYPE_Q4_K>;
using TQ5_K = TQ45K<KPR_TYPE_Q5_K>;

struct TQ2_K {
    static constexpr uint32_t TYPE = KPR_TYPE_Q2_K, QK = 256, BS = 84, CB = 16, PARTS = 4;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t part, const X &x,
                                                uint32_t k0, const Tab &, float (&acc)[R][NC]) {
        const uint32_t h = part / 2, t0 = 2 * (part % 2);
        uint32_t v[R][16];
        float ds[R][4], ms[R][4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *p = w[r];
            const float d = f16_to_float(load_u16(p + 80));
            const float dmin = f16_to_float(load_u16(p + 82));
            uint32_t q[8];
            load_words_a4<8>(p + 16 + 32 * h, q);
#pragma unroll
            for (int tt = 0; tt < 2; ++tt) {
#pragma unroll
                for (int i = 0; i < 8; ++i) v[r][8 * tt + i] = (q[i] >> (2 * (t0 + tt))) & 0x03030303u;
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const uint8_t sc = p[8 * h + 2 * (t0 + tt) + hf];
                    ds[r][2 * tt + hf] = __fmul_rn(d, static_cast<float>(sc & 0xF));
                    ms[r][2 * tt + hf] = __fmul_rn(dmin, static_cast<float>(sc >> 4));
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            int xw[16];
            x.template words<16>(j, k0, xw);
            float dx[2];
            int sx[4];
            dx[0] = x.dq(j, k0);
            dx[1] = x.dq(j, k0 + 32);
#pragma unroll
            for (int g = 0; g < 4; ++g) sx[g] = sum_words<4>(xw + 4 * g);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float t = acc[r][j];
#pragma unroll
                for (int g = 0; g < 4; ++g) {
                    const int s = dot_words<4>(v[r] + 4 * g, xw + 4 * g);
                    const float inner = __fmaf_rn(ds[r][g], static_cast<float>(s),
                                                  -__fmul_rn(ms[r][g], static_cast<float>(sx[g])));
                    t = __fmaf_rn(inner, dx[g / 2], t);
                }
                acc[r][j] = t;
            }
        }
    }
};

__device__ __forceinline__ int q3k_scale(const uint8_t *s, int i) {
    const int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
    const int hi = (s[8 + (i % 4)] >> (2 * (i / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

// acc[r][j] += the dot products of four 16-weight groups' signed bytes v[r][4g..4g+3] with column j's activations
// at k0 (groups 0, 1: the first 32-value activation block; 2, 3: the next), scaled by ds[r][g] and the activations'
// block scales (Q3_K, Q6_K). Apart from add_two_units on purpose: one template for both compiled the IQ3 and IQ4_XS
// kernels differently (docs/cuda-tuning-log.md, forty-second session).
template <int NC, int R, class X>
__device__ __forceinline__ void add_four_groups(const uint32_t (&v)[R][16], const float (&ds)[R][4], const X &x, uint32_t k0,
                                                float (&acc)[R][NC]) {
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        int xw[16];
        x.template words<16>(j, k0, xw);
        const float dx0 = x.dq(j, k0), dx1 = x.dq(j, k0 + 32);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float t = acc[r][j];
#pragma unroll
            for (int g = 0; g < 4; ++g) {
                const int s = dot_words<4>(v[r] + 4 * g, xw + 4 * g);
                t = __fmaf_rn(static_cast<float>(s), __fmul_rn(ds[r][g], g < 2 ? dx0 : dx1), t);
            }
            acc[r][j] = t;
        }
    }
}

struct TQ3_K {
    static constexpr uint32_t TYPE = KPR_TYPE_Q3_K, QK = 256, BS = 110, CB = 16, PARTS = 4;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t part, const X &x,
                                                uint32_t k0, const Tab &, float (&acc)[R][NC]) {
        const uint32_t h = part / 2, j0 = 2 * (part % 2);
        uint32_t v[R][16];
        float ds[R][4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *p = w[r];
            const float d = f16_to_float(load_u16(p + 108));
            uint32_t q[8], hm[8];
            load_words_a2<8>(p + 32 + 32 * h, q);
            load_words_a2<8>(p, hm);
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const uint32_t jb = j0 + jj;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const uint32_t qv = (q[i] >> (2 * jb)) & 0x03030303u;
                    const uint32_t hb = (hm[i] >> (4 * h + jb)) & 0x01010101u;
                    v[r][8 * jj + i] = bytes_sub(qv | (hb << 2), 0x04040404u);
                }
#pragma unroll
                for (int hf = 0; hf < 2; ++hf)
                    ds[r][2 * jj + hf] =
                        __fmul_rn(d, static_cast<float>(q3k_scale(p + 96, 8 * h + 2 * jb + hf)));
            }
        }
        add_four_groups<NC, R>(v, ds, x, k0, acc);
    }
};

struct TQ6_K {
    static constexpr uint32_t TYPE = KPR_TYPE_Q6_K, QK = 256, BS = 210, CB = 8, PARTS = 4;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t part, const X &x,
                                                uint32_t k0, const Tab &, float (&acc)[R][NC]) {
        const uint32_t h = part / 2, hi = part % 2;
        uint32_t v[R][16];
        float ds[R][4];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *p = w[r];
            const float d = f16_to_float(load_u16(p + 208));
            uint32_t L[16], H[8];
            load_words_a2<16>(p + 64 * h, L);
            load_words_a2<8>(p + 128 + 32 * h, H);
#pragma unroll
            for (int tt = 0; tt < 2; ++tt) {
                const uint32_t t = 2 * hi + tt;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const uint32_t lv = (L[8 * tt + i] >> (4 * hi)) & 0x0F0F0F0Fu;
                    const uint32_t hv = (H[i] >> (2 * t)) & 0x03030303u;
                    v[r][8 * tt + i] = bytes_sub(lv | (hv << 4), 0x20202020u);
                }
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int8_t sc = static_cast<int8_t>(p[192 + 8 * h + 2 * t + hf]);
                    ds[r][2 * tt + hf] = __fmul_rn(d, static_cast<float>(sc));
                }
            }
        }
        add_four_groups<NC, R>(v, ds, x, k0, acc);
    }
};

// acc[r][j] += the dot products of two 32-weight units' signed bytes v[r][0..7], v[r][8..15] with column j's
// activations at k0, k0 + 32, scaled by ds[r][u] and the activations' block scales (IQ4_XS from three columns on,
// IQ3_XXS, IQ3_S)
template <int NC, int R, class X>
__device__ __forceinline__ void add_two_units(const uint32_t (&v)[R][16], const float (&ds)[R][2], const X &x, uint32_t k0,
                                              float (&acc)[R][NC]) {
#pragma unroll
    for (int j = 0; j < NC; ++j) {
        int xw[16];
        x.template words<16>(j, k0, xw);
        const float dx0 = x.dq(j, k0), dx1 = x.dq(j, k0 + 32);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float t = acc[r][j];
            t = __fmaf_rn(static_cast<float>(dot_words<8>(v[r], xw)), __fmul_rn(ds[r][0], dx0), t);
            t = __fmaf_rn(static_cast<float>(dot_words<8>(v[r] + 8, xw + 8)), __fmul_rn(ds[r][1], dx1), t);
            acc[r][j] = t;
        }
    }
}

struct TIQ4_XS {
    static constexpr uint32_t TYPE = KPR_TYPE_IQ4_XS, QK = 256, BS = 136, CB = 16, PARTS = 4;
    static constexpr bool FLOAT_X = false;
    // One or two columns: IQ4_NL's lookups of a unit's raw words (TQ4Like), the activations in the nibble order
    // (act_nibble_order), one unit at a time (both units' lookups live at once spill on 6.0 at two columns);
    // three and more: signed bytes (kvalues4) decoded once per row, shared by the columns.
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t part, const X &x,
                                                uint32_t k0, const Tab &tab, float (&acc)[R][NC]) {
        constexpr bool FEW = NC <= 2;
        static_assert(FEW == act_nibble_order(TYPE, NC), "the activations come in the nibble order");
        float ds[R][2];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *p = w[r];
            const float d = f16_to_float(load_u16(p));
            const uint32_t sh = load_u16(p + 2);
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const uint32_t ib = 2 * part + u;
                const int ls = ((p[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
                ds[r][u] = __fmul_rn(d, static_cast<float>(ls - 32));
            }
        }
        if constexpr (FEW) {
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const uint32_t ib = 2 * part + u;
                uint32_t v[R][8], nu[R][8]; // the values of indices 8..15, the negated values of 0..7
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    uint32_t q[4];
                    load_words_a4<4>(w[r] + 8 + 16 * ib, q);
                    iq4_nibble_order_lookups(q, tab.iq4, v[r], nu[r]);
                }
#pragma unroll
                for (int j = 0; j < NC; ++j) {
                    int xw[8];
                    x.template words<8>(j, k0 + 32u * u, xw);
                    const float dx = x.dq(j, k0 + 32u * u);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const int s = dot_words<8>(v[r], xw) - dot_words<8>(nu[r], xw);
                        acc[r][j] = __fmaf_rn(static_cast<float>(s), __fmul_rn(ds[r][u], dx), acc[r][j]);
                    }
                }
            }
        } else {
            uint32_t v[R][16];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    uint32_t q[4];
                    load_words_a4<4>(w[r] + 8 + 16 * (2 * part + u), q);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        v[r][8 * u + i] = kvalues4(q[i] & 0x0F0F0F0Fu, tab.iq4.lo0, tab.iq4.hi0);
                        v[r][8 * u + 4 + i] = kvalues4((q[i] >> 4) & 0x0F0F0F0Fu, tab.iq4.lo0, tab.iq4.hi0);
                    }
                }
            add_two_units<NC, R>(v, ds, x, k0, acc);
        }
    }
};

// ---- IQ3 types: table lookups go through a Tab policy ------------------------------------------
// Tab provides grid_xxs_byte(w, k) (the IQ3_XXS grid word whose index is byte k of w), grid_s(i) and
// sgn_xxs(g, sign7, half), sgn_s(g, signbyte, half): the grid word with the signs of its four weights
// applied (every policy yields the same integers). TabGlobal (generic_cuda) reads the grids through the
// read-only cache and computes the sign masks (a multiply and a prmt); TabLaneGrid / TabLaneGridS
// (generic_cuda's one-column 16-warp IQ3 kernels) keep the grid once per lane in shared memory;
// iq_stage_tables stages grids and masks in shared memory. The integers are the same, so the same
// arithmetic follows.

// One item of IQ3_XXS, in GGUF's blocks (SPELLED false: each sub-block's aux word holds 4 x 7 sign bits and its 4-bit
// scale; 2-byte aligned) or in sign_copy's (true: TIQ3_XXS_Signs below; 8-byte aligned). The integers and the float
// arithmetic are the same, so the results are the same bits.
template <bool SPELLED, int NC, int R, class Tab, class X>
__device__ __forceinline__ void iq3_xxs_item(const uint8_t *const (&w)[R], uint32_t part, const X &x, uint32_t k0,
                                             const Tab &tab, float (&acc)[R][NC]) {
    uint32_t v[R][16];
    float ds[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const uint8_t *p = w[r];
        float d;
        uint32_t idx[4], sw[2], sc = 0;
        if constexpr (SPELLED) {
            uint32_t dw[1];
            load_words_a8<4>(p + 16 * part, idx);
            load_words_a8<2>(p + 64 + 8 * part, sw);
            load_words_a4<1>(p + 96 + 4 * (part / 2), dw);
            d = f16_to_float(static_cast<uint16_t>(dw[0]));
            sc = dw[0] >> (16 + 8 * (part % 2)); // the scales of sub-blocks 2 part, 2 part + 1
        } else {
            d = f16_to_float(load_u16(p));
            load_words_a2<4>(p + 2 + 16 * part, idx);
            load_words_a2<2>(p + 66 + 8 * part, sw);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const uint32_t a = sw[u];
            const uint32_t ls = SPELLED ? (sc >> (4 * u)) & 0xFu : a >> 28;
            ds[r][u] = __fmul_rn(d, static_cast<float>(2 * ls + 1) * 0.25f);
            if constexpr (SPELLED) {
#pragma unroll
                for (int m = 0; m < 8; ++m) {
                    const uint32_t sm = a << m; // lookup m's signs on the bytes' top bits
                    v[r][8 * u + m] = select_neg(tab.grid_xxs_byte(idx[2 * u + m / 4], m % 4), prmt(sm, 0u, 0xBA98u));
                }
            } else {
#pragma unroll
                for (int l = 0; l < 4; ++l) {
                    const uint32_t sg = (a >> (7 * l)) & 127u;
                    const uint32_t iw = idx[2 * u + l / 2];
                    v[r][8 * u + 2 * l] = tab.sgn_xxs(tab.grid_xxs_byte(iw, 2 * (l % 2)), sg, 0);
                    v[r][8 * u + 2 * l + 1] = tab.sgn_xxs(tab.grid_xxs_byte(iw, 2 * (l % 2) + 1), sg, 1);
                }
            }
        }
    }
    add_two_units<NC, R>(v, ds, x, k0, acc);
}

struct TIQ3_XXS {
    static constexpr uint32_t TYPE = KPR_TYPE_IQ3_XXS, QK = 256, BS = 98, CB = 16, PARTS = 4;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t part, const X &x,
                                                uint32_t k0, const Tab &tab, float (&acc)[R][NC]) {
        iq3_xxs_item<false, NC, R>(w, part, x, k0, tab, acc);
    }
};

// IQ3_XXS repacked with its signs spelled out (generic_cuda's sign_copy): 104-byte blocks of
//   qs, the 64 grid indices (bytes 0-63) | 8 sign words (bytes 64-95) | two words (bytes 96-103): word h holds d
//   (f16, bits 0-15) and the 4-bit scales of sub-blocks 4h..4h+3 (bits 16-31, the first lowest)
// qs is GGUF's bytes. Sub-block ib's sign word holds all 32 signs, the four of its lookup m (0..7, weights
// 4m..4m+3 of the sub-block) at bits 7 - m, 15 - m, 23 - m, 31 - m, so a lookup's byte mask is one prmt in
// sign-replicate mode of the word shifted by m: no 7-bit field, multiply or parity (popc) as in TIQ3_XXS. The
// blocks are 8-byte aligned (d is stored twice for it), so every read is one 64- or 32-bit load with no funnel
// shift. The integers and the float arithmetic are TIQ3_XXS's, so the results are the same bits.
// docs/cuda-tuning-log.md "IQ3_XXS signs spelled out in a copy": the 16-warp one-column loop 910 -> 798 instructions,
// 1.04-1.07x on the H200 where the copy serves; "The sign copy's blocks 8-byte aligned": 798 -> 691 instructions,
// 1.03-1.13x on an H100 (102-byte blocks before).
__host__ __device__ constexpr uint32_t iq3_xxs_spelled_signs(uint32_t aux) {
    uint32_t out = 0;
    for (uint32_t l = 0; l < 4; ++l) {
        uint32_t s8 = (aux >> (7 * l)) & 127u;
        uint32_t parity = 0;
        for (uint32_t j = 0; j < 7; ++j) parity ^= (s8 >> j) & 1u;
        s8 |= parity << 7; // ksigns_iq2xs: the eighth sign is the parity of the seven
        for (uint32_t j = 0; j < 8; ++j) {
            const uint32_t m = 2 * l + j / 4, b = j % 4; // weight j of group l: byte b of lookup m
            out |= ((s8 >> j) & 1u) << (8 * b + 7 - m);
        }
    }
    return out;
}

struct TIQ3_XXS_Signs {
    static constexpr uint32_t TYPE = KPR_TYPE_IQ3_XXS, QK = 256, BS = 104, CB = 16, PARTS = 4;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t part, const X &x,
                                                uint32_t k0, const Tab &tab, float (&acc)[R][NC]) {
        iq3_xxs_item<true, NC, R>(w, part, x, k0, tab, acc);
    }
};
static_assert(iq3_xxs_spelled_signs(0) == 0 && iq3_xxs_spelled_signs(1u) == ((1u << 7) | (1u << 30)),
              "sign 0 of group 0 and its parity (weight 7: byte 3 of lookup 1)");
static_assert(iq3_xxs_spelled_signs(0xF0000000u) == 0, "the scale bits are not signs");

struct TIQ3_S {
    static constexpr uint32_t TYPE = KPR_TYPE_IQ3_S, QK = 256, BS = 110, CB = 16, PARTS = 4;
    static constexpr bool FLOAT_X = false;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t part, const X &x,
                                                uint32_t k0, const Tab &tab, float (&acc)[R][NC]) {
        uint32_t v[R][16];
        float ds[R][2];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t *p = w[r];
            const float d = f16_to_float(load_u16(p));
            uint32_t idx[4], sg[2];
            load_words_a2<4>(p + 2 + 16 * part, idx);
            load_words_a2<2>(p + 74 + 8 * part, sg);
            const uint32_t qh2 = load_u16(p + 66 + 2 * part); // qh[ib] for ib = 2 part, 2 part + 1
            const uint32_t scb = p[106 + part];               // scales[ib / 2] for both
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const uint32_t ls = (scb >> (4 * u)) & 0xFu;
                ds[r][u] = __fmul_rn(d, static_cast<float>(1 + 2 * ls));
                // byte j of hb[h]: the ninth index bit of lookup 4h + j (bit 4h + j of qh[ib]), 0 or 1
                const uint32_t hb[2] = {nibble_to_bytebits((qh2 >> (8 * u)) & 0xFu), nibble_to_bytebits((qh2 >> (8 * u + 4)) & 0xFu)};
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    // the 9-bit index in one prmt: byte k % 4 of the index word, byte k % 4 of hb, then two zero
                    // bytes (the sign of a byte of hb, which is 0 or 1)
                    const uint32_t gi = prmt(idx[2 * u + k / 4], hb[k / 4], 0xCC00u | ((4u + k % 4) << 4) | (k % 4));
                    const uint32_t sb = (sg[u] >> (8 * (k / 2))) & 0xFFu; // (a prmt here spills on sm_60)
                    v[r][8 * u + k] = tab.sgn_s(tab.grid_s(gi), sb, k % 2);
                }
            }
        }
        add_two_units<NC, R>(v, ds, x, k0, acc);
    }
};

// ---- float types: activations stay float ---------------------------------------------------------

template <uint32_t TYPE_ID>
struct TFloat {
    static constexpr bool F32 = TYPE_ID == KPR_TYPE_F32;
    static constexpr uint32_t TYPE = TYPE_ID, QK = 32, BS = F32 ? 128 : 64;
    static constexpr uint32_t CB = F32 ? 16 : 32, PARTS = F32 ? 4 : 2; // an item is 8 (f32) or 16 weights
    static constexpr bool FLOAT_X = true;
    static constexpr int EPI = QK / PARTS;
    template <int NC, int R, class Tab, class X>
    __device__ __forceinline__ static void item(const uint8_t *const (&w)[R], uint32_t part, const X &x,
                                                uint32_t k0, const Tab &, float (&acc)[R][NC]) {
        float wv[R][EPI];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            uint32_t q[8];
            load_words_a16<8>(w[r] + 32 * part, q);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if constexpr (F32) {
                    wv[r][i] = __uint_as_float(q[i]);
                } else if constexpr (TYPE_ID == KPR_TYPE_F16) {
                    wv[r][2 * i] = f16_to_float(q[i] & 0xFFFFu);
                    wv[r][2 * i + 1] = f16_to_float(q[i] >> 16);
                } else {
                    wv[r][2 * i] = bf16_to_float(q[i] & 0xFFFFu);
                    wv[r][2 * i + 1] = bf16_to_float(q[i] >> 16);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            float xv[EPI];
            x.template floats<EPI>(j, k0, xv);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float t = acc[r][j];
#pragma unroll
                for (int i = 0; i < EPI; ++i) t = __fmaf_rn(wv[r][i], xv[i], t);
                acc[r][j] = t;
            }
        }
    }
};
using TF32 = TFloat<KPR_TYPE_F32>;
using TF16 = TFloat<KPR_TYPE_F16>;
using TBF16 = TFloat<KPR_TYPE_BF16>;

// Tables in global memory, read through the read-only cache; sign masks computed.
static __device__ const uint32_t g_iq3xxs_grid[256] = KPR_IQ3XXS_GRID_INIT;
static __device__ const uint32_t g_iq3s_grid[512] = KPR_IQ3S_GRID_INIT;

// Sign application shared by the policies that compute the masks: byte masks (0x00 / 0xFF per weight)
// from the sign bits, then a per-byte select between g and -g. Gives the same integers as
// apply_sign_mask(g, mask table entry) (the staged tables of iq_stage_tables).
// IQ3_XXS: a 7-bit sign field s7 (ksigns_iq2xs: the 8th sign is the parity of the 7). s7 * 0x10204080
// puts bit j (j < 4) on bit 8j + 7: the four copies of s7 are 7 bits apart and 7 bits wide, so none
// overlaps, nothing carries and s7 needs no mask; s7 * 0x20408 puts bits 4..6 on 7, 15, 23 the same
// way, and the parity goes to bit 31. The prmt replicates each byte's top bit. (12 instructions per 8
// weights against 15 for the nibble extraction of the eighth-bit byte; docs/cuda-tuning-log.md, twelfth session.)
__device__ __forceinline__ uint32_t xxs_sign_mask(uint32_t s7, uint32_t half) {
    const uint32_t t = half == 0 ? s7 * 0x10204080u : s7 * 0x00020408u + (__popc(s7) << 31);
    return prmt(t, 0u, 0xBA98u);
}
__device__ __forceinline__ uint32_t sgn_xxs_computed(uint32_t g, uint32_t s7, uint32_t half) {
    return select_neg(g, xxs_sign_mask(s7, half));
}
__device__ __forceinline__ uint32_t sgn_s_computed(uint32_t g, uint32_t b, uint32_t half) {
    return select_neg(g, byte_half_to_bytemask(b, half));
}

struct TabGlobal {
    Iq4Words iq4; // TQ4Like's one- and two-column IQ4_NL lookups, kvalues4 (IQ4_NL and IQ4_XS)
    __device__ __forceinline__ static TabGlobal prologue() { return TabGlobal{Iq4Words::load()}; }
    __device__ __forceinline__ uint32_t grid_xxs_byte(uint32_t w, int k) const {
        return __ldg(&g_iq3xxs_grid[(w >> (8 * k)) & 0xFFu]);
    }
    __device__ __forceinline__ uint32_t grid_s(uint32_t i) const { return __ldg(&g_iq3s_grid[i]); }
    __device__ __forceinline__ uint32_t sgn_xxs(uint32_t g, uint32_t s7, uint32_t half) const {
        return sgn_xxs_computed(g, s7, half);
    }
    __device__ __forceinline__ uint32_t sgn_s(uint32_t g, uint32_t b, uint32_t half) const {
        return sgn_s_computed(g, b, half);
    }
};

// A word of a table that is constant after the prologue's barrier: no volatile, no memory clobber, so
// that the reads schedule freely among the decoder's other loads.
__device__ __forceinline__ uint32_t lds_table_u32(uint32_t a) {
    uint32_t v;
    asm("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}

// Fills dst (shared memory) with grid[i] once per lane: entry i at byte entry_bytes * i, lane l's copy 4 l
// bytes on (entry_bytes >= 128), 16 bytes a store (lanes 4 (k % 8) .. + 3 of entry k / 8); waits for the block
// and returns dst's shared address. Four loads are issued before their stores: one at a time, each store waited
// a load's latency (ncu on the IQ3_XXS lanes kernel: 12% of its warp stalls were in this loop).
__device__ __forceinline__ uint32_t fill_lane_grid(uint8_t *dst, const uint32_t *grid, uint32_t n, uint32_t entry_bytes) {
    uint4 *const d = reinterpret_cast<uint4 *>(dst);
    const uint32_t total = n * 8, step = blockDim.x;
    uint32_t k = threadIdx.x;
    for (; k + 3 * step < total; k += 4 * step) {
        uint32_t v[4];
#pragma unroll
        for (uint32_t u = 0; u < 4; ++u) v[u] = __ldg(&grid[(k + u * step) / 8]);
#pragma unroll
        for (uint32_t u = 0; u < 4; ++u) {
            const uint32_t kk = k + u * step;
            d[(kk / 8) * (entry_bytes / 16) + kk % 8] = make_uint4(v[u], v[u], v[u], v[u]);
        }
    }
    for (; k < total; k += step) {
        const uint32_t v = __ldg(&grid[k / 8]);
        d[(k / 8) * (entry_bytes / 16) + k % 8] = make_uint4(v, v, v, v);
    }
    __syncthreads();
    return smem_addr(dst);
}

// The IQ3_XXS grid once per lane in dynamic shared memory, entry i of lane l at byte 256 i + 4 l (kDynBytes =
// 64 KiB, of which each entry's first 128 bytes are used): lane l always reads bank (base / 4 + l) % 32, so a
// warp's 32 lookups are one wavefront whatever the indices. The 256-byte entry stride lets one prmt form the
// whole offset: byte 0 is 4 l, byte 1 the index byte, bytes 2-3 zero; the table's base is the same for every
// lane, so a lookup is a prmt and a load (against a prmt, a multiply-add and a load for 128-byte entries, 32 KiB).
// Sign masks as TabGlobal. For kernels of one block per multiprocessor (the table is filled once per block):
// generic_cuda's one-column IQ3_XXS kernel, 16 warps (WholeVectorTab in kpr_cuda_gemv.cuh). Measured on an H100
// against the 32 KiB layout (run 5 of docs/measurements/h100-session39-runs.txt, ten shapes, us per call): 1.00-1.02x
// in L2 and from device memory, never slower (4096 x 11008 12.2 -> 12.0, 3584 x 18944 17.6 -> 17.2 from memory).
struct TabLaneGrid {
    static constexpr uint32_t kDynBytes = 256 * 256;
    uint32_t base;  // shared address of the table (the same in every lane)
    uint32_t lane4; // 4 x this lane's index in its warp
    __device__ __forceinline__ static TabLaneGrid prologue(uint8_t *dyn) {
        return TabLaneGrid{fill_lane_grid(dyn, g_iq3xxs_grid, 256, 256), 4u * (threadIdx.x % 32)};
    }
    __device__ __forceinline__ uint32_t grid_xxs_byte(uint32_t w, int k) const {
        return lds_table_u32(base + prmt(w, lane4, 0x7704u | (static_cast<uint32_t>(k) << 4)));
    }
    __device__ __forceinline__ uint32_t sgn_xxs(uint32_t g, uint32_t s7, uint32_t half) const {
        return sgn_xxs_computed(g, s7, half);
    }
    __device__ __forceinline__ uint32_t grid_s(uint32_t) const { return 0; }
    __device__ __forceinline__ uint32_t sgn_s(uint32_t, uint32_t, uint32_t) const { return 0; }
};

// The IQ3_S grid once per lane ([512][32] words, 64 KiB: more than static shared memory allows, so in
// dynamic shared memory, kDynBytes, which the kernel passes to the prologue), as TabLaneGrid.
struct TabLaneGridS {
    static constexpr uint32_t kDynBytes = 512 * 32 * 4;
    uint32_t base; // shared address of this lane's copy of word 0
    __device__ __forceinline__ static TabLaneGridS prologue(uint8_t *dyn) {
        return TabLaneGridS{fill_lane_grid(dyn, g_iq3s_grid, 512, 128) + 4u * (threadIdx.x % 32)};
    }
    __device__ __forceinline__ uint32_t grid_s(uint32_t i) const { return lds_table_u32(base + (i << 7)); }
    __device__ __forceinline__ uint32_t sgn_s(uint32_t g, uint32_t b, uint32_t half) const {
        return sgn_s_computed(g, b, half);
    }
    __device__ __forceinline__ uint32_t grid_xxs_byte(uint32_t, int) const { return 0; }
    __device__ __forceinline__ uint32_t sgn_xxs(uint32_t, uint32_t, uint32_t) const { return 0; }
};

} // namespace kpr::cuda

namespace kpr::cuda {

// Tables staged in shared memory by every block (iq_stage_tables): the grid and the sign masks as
// words, (g ^ m) + (m & 0x01010101) applied by the same TIQ3_* code as generic_cuda's.
static __device__ const uint8_t g_ksigns_iq2xs[128] = KPR_KSIGNS_IQ2XS_INIT;

struct TabSharedXXS {
    const uint32_t *grid;
    const uint32_t *mask; // [2][128]: half 0 = sign bits 0..3, half 1 = bits 4..7 of ksigns_iq2xs[i]
    __device__ __forceinline__ static TabSharedXXS prologue() {
        __shared__ uint32_t s_grid[256];
        __shared__ uint32_t s_mask[2 * 128];
        for (uint32_t i = threadIdx.x; i < 256; i += blockDim.x) {
            s_grid[i] = g_iq3xxs_grid[i];
            const uint32_t s8 = g_ksigns_iq2xs[i & 127];
            s_mask[i] = nibble_to_bytemask((s8 >> (4 * (i >> 7))) & 0xFu);
        }
        __syncthreads();
        return TabSharedXXS{s_grid, s_mask};
    }
    __device__ __forceinline__ uint32_t grid_xxs_byte(uint32_t w, int k) const {
        return grid[(w >> (8 * k)) & 0xFFu];
    }
    __device__ __forceinline__ uint32_t mask_xxs(uint32_t s7, uint32_t half) const { return mask[half * 128 + s7]; }
    __device__ __forceinline__ uint32_t sgn_xxs(uint32_t g, uint32_t s7, uint32_t half) const {
        return apply_sign_mask(g, mask_xxs(s7, half));
    }
    __device__ __forceinline__ uint32_t grid_s(uint32_t) const { return 0; }
    __device__ __forceinline__ uint32_t sgn_s(uint32_t, uint32_t, uint32_t) const { return 0; }
};

struct TabSharedS {
    const uint32_t *grid;
    const uint32_t *mask; // [2][256]: half 0 = bits 0..3 of the sign byte, half 1 = bits 4..7
    __device__ __forceinline__ static TabSharedS prologue() {
        __shared__ uint32_t s_grid[512];
        __shared__ uint32_t s_mask[2 * 256];
        for (uint32_t i = threadIdx.x; i < 512; i += blockDim.x) {
            s_grid[i] = g_iq3s_grid[i];
            s_mask[i] = nibble_to_bytemask(((i & 255u) >> (4 * (i >> 8))) & 0xFu);
        }
        __syncthreads();
        return TabSharedS{s_grid, s_mask};
    }
    __device__ __forceinline__ uint32_t grid_s(uint32_t i) const { return grid[i]; }
    __device__ __forceinline__ uint32_t mask_s(uint32_t b, uint32_t half) const { return mask[half * 256 + b]; }
    __device__ __forceinline__ uint32_t sgn_s(uint32_t g, uint32_t b, uint32_t half) const {
        return apply_sign_mask(g, mask_s(b, half));
    }
    __device__ __forceinline__ uint32_t grid_xxs_byte(uint32_t, int) const { return 0; }
    __device__ __forceinline__ uint32_t sgn_xxs(uint32_t, uint32_t, uint32_t) const { return 0; }
};

} // namespace kpr::cuda

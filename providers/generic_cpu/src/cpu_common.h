// Internal declarations shared by the generic_cpu translation units (one per ISA plus the provider).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kpr/ggml_blocks.h"
#include "kpr/provider.h"

namespace kpr_cpu {

// How the activations are handed to a kernel.
enum class Act : uint8_t {
    Float = 0, // x kept in float (F32, F16, BF16 weights)
    Q8_0 = 1,  // x quantized per 32 values: int8 + f16-rounded scale + int16 sum per 32
    Q8_K = 2,  // x quantized per 256 values: int8 + f32 scale + int16 sum per 16 (bsums)
};

struct TypeInfo {
    uint32_t type;
    const char *name;
    uint32_t block;  // weights per block
    uint32_t bytes;  // bytes per block
    Act act;
};

// nullptr when the type is not implemented.
const TypeInfo *type_info(uint32_t type);
const char *ggml_type_name(uint32_t type);

// One multi-column GEMV over one matrix: y[j][r] = W[r] . x[j], j < ncols.
struct Job {
    const uint8_t *w = nullptr; // row 0 of the matrix
    size_t row_bytes = 0;
    size_t cols = 0;
    uint32_t ncols = 0;
    const float *xf[KPR_MAX_NCOLS] = {};   // Act::Float
    const int8_t *xq[KPR_MAX_NCOLS] = {};  // quantized: cols int8
    const float *xd[KPR_MAX_NCOLS] = {};   // one scale per 32 (Q8_0) or 256 (Q8_K)
    const int16_t *xs[KPR_MAX_NCOLS] = {}; // sums per 32 (Q8_0) or per 16 (Q8_K)
    float *y[KPR_MAX_NCOLS] = {};          // y[j][r] for r in the matrix
};

using KernelFn = void (*)(const Job &job, size_t row_begin, size_t row_end);

using QuantFn = void (*)(const float *x, size_t n, int8_t *q, float *d, int16_t *s);

struct KernelTable {
    const char *isa;
    KernelFn fn[KPR_TYPE_COUNT];
    QuantFn quant_q8_0; // bit-identical to quantize_q8_0 (null: use the portable one)
    QuantFn quant_q8_K; // bit-identical to quantize_q8_K
    // Per weight type, a quantizer that writes the activations in the layout that type's kernel in this
    // table reads (same values, scales and sums as quant_q8_0 / quant_q8_K, bytes permuted); null: the plain
    // layout of quant_q8_0 / quant_q8_K.
    QuantFn quant_x[KPR_TYPE_COUNT];
};

const KernelTable &portable_kernels();
const KernelTable &avx2_kernels();
const KernelTable &avx512_kernels();      // AVX-512 F/BW/VL/DQ, no VNNI
const KernelTable &avx512vnni_kernels();  // AVX-512 F/BW/VL/DQ + VNNI

// Activation quantization (portable; x is tiny next to the weights).
void quantize_q8_0(const float *x, size_t n, int8_t *q, float *d, int16_t *s);
void quantize_q8_K(const float *x, size_t n, int8_t *q, float *d, int16_t *s);

// IEEE binary16 <-> binary32, round to nearest even.
inline float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { // subnormal: normalise
            int e = -1;
            do {
                ++e;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // rounds to >= 65520: inf
    if (ax < 0x38800000u) {                                  // subnormal or zero in f16
        if (ax < 0x33000000u) return (uint16_t)sign;          // < 2^-25: rounds to 0
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e; // 14 + (113 - e) ... number of bits dropped below f16 subnormal unit
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) ++r;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u; // rebias exponent 127 -> 15 (in the f32 position)
    const uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
    return (uint16_t)(sign | r);
}

inline float bf16_to_fp32(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void k4_scale_min(const uint8_t *q, int j, uint8_t &sc, uint8_t &m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Q3_K 6-bit scale j (0..15), before subtracting 32.
inline int q3k_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return lo | (hi << 4);
}

} // namespace kpr_cpu

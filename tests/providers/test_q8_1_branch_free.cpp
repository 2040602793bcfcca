// The arithmetic behind q8_1_quantize_quad<true> (providers/common/cuda/kpr_cuda_act.cuh), checked on the CPU:
// the block scale d = amax / 127 computed as a product by RN(1/127) and one fused correction must equal the
// IEEE division, or the branch-free quantization would give other quants than the reference's. The device
// code uses __fmul_rn and __fmaf_rn, which round as the host's float product and std::fma do.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace {

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

uint32_t to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

// volatile: keep the compiler from contracting the product and the sum into one fma of its own
float scale_by_product(float amax) {
    constexpr float k127 = 0x1.020408p-7f; // RN(1/127)
    volatile float e0 = amax * k127;
    if (e0 == std::numeric_limits<float>::infinity()) return e0;
    return std::fma(std::fma(-e0, 127.0f, amax), k127, e0);
}

float scale_by_division(float amax) {
    volatile float d = amax / 127.0f;
    return d;
}

// Counts the non-negative floats in [lo, hi] (bit patterns, every step-th) where the two disagree.
uint64_t mismatches(uint32_t lo, uint32_t hi, uint32_t step, uint32_t &first_bad) {
    uint64_t bad = 0;
    for (uint64_t b = lo; b <= hi; b += step) {
        const float a = from_bits(static_cast<uint32_t>(b));
        if (to_bits(scale_by_product(a)) != to_bits(scale_by_division(a)) && bad++ == 0)
            first_bad = static_cast<uint32_t>(b);
    }
    return bad;
}

} // namespace

TEST(Q8_1BranchFree, ConstantIsTheRoundedReciprocal) {
    EXPECT_EQ(0x1.020408p-7f, 1.0f / 127.0f);
}

// Every float of the ranges where the correction is most likely to go wrong: zero, the subnormals and the
// first normal binade (the product underflows), [1, 4) (ordinary activations), and the top four binades up to
// infinity (the product overflows to infinity and passes through).
TEST(Q8_1BranchFree, EqualsTheDivisionOnWholeRanges) {
    uint32_t first = 0;
    EXPECT_EQ(mismatches(0u, 0x01000000u, 1, first), 0u) << "first at " << from_bits(first);
    EXPECT_EQ(mismatches(to_bits(1.0f), to_bits(4.0f) - 1, 1, first), 0u) << "first at " << from_bits(first);
    EXPECT_EQ(mismatches(to_bits(0x1p124f), 0x7f800000u, 1, first), 0u) << "first at " << from_bits(first);
}

// A sample of every binade: every 97th bit pattern of the non-negative floats (22 million). The whole set
// (2^31) was checked once with this arithmetic: 0 mismatches (docs/cuda-tuning-log.md, twenty-fifth session).
TEST(Q8_1BranchFree, EqualsTheDivisionOnASampleOfAllFloats) {
    uint32_t first = 0;
    EXPECT_EQ(mismatches(0u, 0x7f800000u, 97, first), 0u) << "first at " << from_bits(first);
}

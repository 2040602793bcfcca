// kpr_cuda_mma.cuh -- the tensor-core GEMV (compute capability 9.0): int8 `mma.sync` tiles of 16 rows x
// 8 columns x 32 weights.
//
// A block owns one tile of 16 rows (two at one column where mma_two_tiles says so); its W warps split the row
// length into W contiguous slices. A warp streams the tile's rows of its slice chunk by chunk (CB blocks of
// each row) into its ring in shared memory
// with bulk copies, one per row chunk, plus one for the chunk's activations of every column: the
// quantizer writes them in the order a stage holds them (ActTiles, kpr_cuda_act.cuh). For each 32 weights
// a warp issues one mma.m16n8k32 with int32 sums (two for IQ4_NL, IQ4_XS): the A fragment is the 16 rows' weights
// as int8 (or uint8) values, decoded per type from the staged blocks, the B fragment the q8_1 activations
// of up to 8 columns (columns past ncols are zero). The exact integer sums come back in the C fragment;
// each lane scales its four (row, column) sums in float, as the row kernel does per block. At the end the
// W slices are added in shared memory.
//
// Why: in the row kernel every activation load serves one or two rows, so at 8 columns a call reads
// four times its weight bytes in activations through L1; here a B fragment serves 16 rows, and one
// instruction does 16 x 8 x 32 multiply-adds. Launched on 9.0 only (bulk copies, and where it was
// measured), for Q8_0, Q4_0, Q4_K, Q5_K, IQ4_NL and IQ4_XS (MmaFor), where mma_serves says it is faster
// than the row kernels (generic_cuda's option tile_kernel: on / off overrides that). At one column (FX)
// the kernel quantizes the activations itself: the call is one kernel, and reads no scratch.
#pragma once

#include "kpr_cuda_act.cuh"
#include "kpr_cuda_blocks.cuh"
#include "kpr_cuda_gemv_args.cuh"
#include "kpr_cuda_util.cuh"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace kpr::cuda {

#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
#define KPR_MMA_INT8 1
#else
#define KPR_MMA_INT8 0
#endif

// D = A(16x32, rows) * B(32x8, columns) + 0, int8 inputs, int32 sums. Lane l = 4g + t holds
//   a[0]: row g,   k 4t..4t+3      a[1]: row g+8, k 4t..4t+3
//   a[2]: row g,   k 16+4t..+3     a[3]: row g+8, k 16+4t..+3
//   b[0]: column g, k 4t..4t+3     b[1]: column g, k 16+4t..+3
//   d[0], d[1]: row g, columns 2t, 2t+1;  d[2], d[3]: row g+8, columns 2t, 2t+1
// (U8: A unsigned, 0..255.)
#define KPR_MMA_M16N8K32(ATYPE)                                                                                  \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." ATYPE ".s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "  \
                 "{%8, %9}, {%10, %10, %10, %10};"                                                                \
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0))
#define KPR_MMA_M16N8K32_ACC(ATYPE)                                                                              \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." ATYPE ".s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "  \
                 "{%8, %9}, {%0, %1, %2, %3};"                                                                    \
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
template <bool U8>
__device__ __forceinline__ void mma_8bit_16x8x32(const uint32_t (&a)[4], const uint32_t (&b)[2], int (&d)[4]) {
#if KPR_MMA_INT8
    if constexpr (U8) KPR_MMA_M16N8K32("u8");
    else KPR_MMA_M16N8K32("s8");
#else
    d[0] = d[1] = d[2] = d[3] = 0;
#endif
}
// d += A * B (signed A)
__device__ __forceinline__ void mma_s8_16x8x32_acc(const uint32_t (&a)[4], const uint32_t (&b)[2], int (&d)[4]) {
#if KPR_MMA_INT8
    KPR_MMA_M16N8K32_ACC("s8");
#endif
}
#undef KPR_MMA_M16N8K32
#undef KPR_MMA_M16N8K32_ACC
__device__ __forceinline__ void mma_s8_16x8x32(const uint32_t (&a)[4], const uint32_t (&b)[2], int (&d)[4]) {
    mma_8bit_16x8x32<false>(a, b, d);
}
__device__ __forceinline__ void mma_u8s8_16x8x32(const uint32_t (&a)[4], const uint32_t (&b)[2], int (&d)[4]) {
    mma_8bit_16x8x32<true>(a, b, d);
}

// The A fragments of a 16 x 32-byte tile from shared memory in one instruction: ldmatrix.x4 gives lane 4g + t the
// words a[0..3] of mma_*_16x8x32's layout (row g, bytes 4t..4t+3; row g + 8; row g, bytes 16 + 4t..; row g + 8),
// each lane supplying one row address: lanes 0-7 rows 0-7, lanes 8-15 rows 8-15 (bytes 0-15), lanes 16-31 the
// same rows at byte 16 (ldm_lane_offset). Addresses 16-byte aligned.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &a0, uint32_t &a1, uint32_t &a2, uint32_t &a3) {
#if KPR_MMA_INT8
    // volatile and a memory clobber, as lds_u32: the stage it reads is filled by bulk copies behind an mbarrier
    // wait and refilled after the release, so the load must stay between the two
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
                 : "r"(addr)
                 : "memory");
#else
    a0 = a1 = a2 = a3 = addr;
#endif
}
// this lane's row address offset for ldsm_x4 in a tile whose rows are rs bytes apart
__device__ __forceinline__ uint32_t ldm_lane_offset(uint32_t lane, uint32_t rs) {
    return ((lane & 7u) + (lane & 8u)) * rs + 16u * (lane >> 4);
}

// defer_scales (below) of the types whose 32-weight blocks start with one f16 scale d (Q8_0, Q4_0, IQ4_NL):
// the scales of units (blocks) 8p + 2t + j, j = 0, 1, of the row chunk staged at row (BS bytes per block);
// no offsets
template <uint32_t BS>
__device__ __forceinline__ void block_d_scales(uint32_t row, uint32_t p, uint32_t t, float (&dw)[2], float (&mw)[2]) {
#pragma unroll
    for (uint32_t j = 0; j < 2; ++j) {
        dw[j] = f16_to_float(static_cast<uint16_t>(lds_u16(row + (8u * p + 2u * t + j) * BS)));
        mw[j] = 0.0f;
    }
}

// What the tile kernel needs of a block type M:
//   Block          its TQ* struct (BS bytes per block of QK weights)
//   CB             blocks per row chunk (the chunk a multiple of 16 bytes, CB * QK a multiple of 256)
//   SUMS           whether fold needs the activations' block sums s = d_x * sum(q)
//   PERM           whether the activations come permuted within each block (tile_perm_pos)
//   Row, load<B>   what one lane takes from block B of a row chunk in its stage for its A fragments
//                  (words and scales), loaded once per block
//   product<U, X16>  32-weight unit U of two rows' loaded blocks (the lane's rows g and g + 8) times the B
//                  fragment b: the exact integer sums of the C fragment, and each row's scale dw and
//                  offset mw for the unit (A fragment: weights k 4t..4t+3 and 16+4t..16+4t+3 of each row);
//                  X16 (the deferred folds only): odd units' sums may come 2^ODD_SHIFT times too large
//   ODD_SHIFT      0, or: product<U, true> of an odd unit U gives its sums 2^ODD_SHIFT times too large (exact)
//                  plus the even unit U - 1's product<U - 1, true> in the same C columns (2t + 1), which the
//                  kernel subtracts (Q4_K: the odd units go into the mma as the raw qs words, both nibbles)
//   fold           one unit's integer sum into a float accumulator
//   DEFER          whether the one-column kernel may defer the folds (gemv_mma_kernel): then load<B, false>
//                  leaves the scales out and defer_scales gives those of a lane's own two units
//   LDMATRIX       whether load_pair<B> gives the deferred-fold kernels a tile's rows g and g + 8 at once (their
//                  weight words by ldsm_x4: one instruction for four lds_u32); false: two load<B, false>
//   BRANCH_FREE_QUANT  whether the one-column kernel quantizes its float activations with q8_1_quantize_quad's
//                  branch-free form: Q4_0 only (4096 x 14336 10.0 -> 9.9 us, faster or level on ten shapes;
//                  other types level or slower: Q4_K 2048 x 8192 0.92x), docs/cuda-tuning-log.md "The one-column
//                  quantization without a branch for Q4_0"
// Rows of a stage are 4 banks (mod 8) apart and the lanes of a row read 4 consecutive words, so a warp's
// fragment loads hit 32 distinct banks.
//
// Q8_0: an f16 scale and 32 int8. Chunks start 16-byte aligned, so odd blocks have 4-byte-aligned
// weights and even ones sit 2 bytes off (two word loads and a byte permute per word).
struct MmaQ8_0 {
    using Block = TQ8_0;
    static constexpr uint32_t CB = 8; // blocks per chunk: 272 bytes
    static constexpr bool SUMS = false, PERM = false, DEFER = true, BRANCH_FREE_QUANT = false;
    static constexpr uint32_t ODD_SHIFT = 0;
    static constexpr bool LDMATRIX = false;
    struct Row {
        uint32_t lo, hi;
        float d;
    };
    // D: with the block's scale (DEFER kernels take it from block_d instead)
    template <uint32_t B, bool D = true>
    __device__ __forceinline__ static Row load(uint32_t row, uint32_t t) {
        const uint32_t base = row + B * 34u;
        Row r;
        r.d = D ? f16_to_float(static_cast<uint16_t>(lds_u16(base))) : 0.0f;
        if constexpr (B % 2 == 1) {
            r.lo = lds_u32(base + 2u + 4u * t);
            r.hi = lds_u32(base + 18u + 4u * t);
        } else {
            r.lo = prmt(lds_u32(base + 4u * t), lds_u32(base + 4u * t + 4u), 0x5432u);
            r.hi = prmt(lds_u32(base + 16u + 4u * t), lds_u32(base + 20u + 4u * t), 0x5432u);
        }
        return r;
    }
    template <uint32_t U, bool X16 = false>
    __device__ __forceinline__ static void product(const Row &r0, const Row &r8, const uint32_t (&b)[2], int (&sum)[4],
                                                   float &dw0, float &mw0, float &dw1, float &mw1,
                                                   [[maybe_unused]] const Iq4Words &iw) {
        const uint32_t a[4] = {r0.lo, r8.lo, r0.hi, r8.hi};
        mma_s8_16x8x32(a, b, sum);
        dw0 = r0.d;
        dw1 = r8.d;
        mw0 = mw1 = 0.0f;
    }
    __device__ __forceinline__ static void defer_scales(uint32_t row, uint32_t p, uint32_t t, float (&dw)[2], float (&mw)[2]) {
        block_d_scales<Block::BS>(row, p, t, dw, mw);
    }
    // the row kernel's per-block step: sum * (d_w * d_x)
    __device__ __forceinline__ static float fold(int sum, float dw, float, float dx, float, float acc) {
        return __fmaf_rn(static_cast<float>(sum), __fmul_rn(dw, dx), acc);
    }
};

// Q4_0 and IQ4_NL: an f16 scale and 16 bytes of nibbles (low: weights 0..15, high: 16..31); a lane's word
// qs[4t..4t+3] holds both of its k ranges. Chunks of 8 blocks (144 bytes).
// Q4_0 (value (n - 8) d): (n - 8) as a 4-bit two's complement is n ^ 8, and shifted to a byte's top half
// it is the int8 16 (n - 8): one logic op for the high nibbles, one more shift for the low ones. The
// integer sum comes out 16 times too large, exactly; fold scales by 1/16 (exact).
// IQ4_NL (value kvalues[n] d): two signed byte-permute lookups per 16-bit selector, lo (the raw nibbles n) and
// hi (the nibbles 15 - n), into two mmas, the second adding onto the first's sums (its C). lo (table kvalues[0..7])
// gives kvalues[n] for indices 0..7, all negative, and for 8..15 the sign of a negative table byte, -1; hi (table
// kvalues[15 - j] + 1, j = 0..7) gives kvalues[n] + 1 for 8..15, all positive, and for 0..7 the sign of a positive
// table byte, 0. So lo + hi = kvalues[n] in every byte, and lo . x + hi . x is the exact integer sum. A lookup
// takes its four indices from a 16-bit selector (the nibbles of bytes 4t and 4t + 1, or of 4t + 2 and 4t + 3), so
// the activations come permuted to that order (tile_perm_pos) instead of the weights being regrouped. The chain
// (twenty-sixth session, against two unsigned mmas subtracted after, as IQ4_XS's below; runs 1 and 2 of
// h200-session26-runs.txt, us per call on the H200): 4096 x 14336 at 2 and 3 columns 14.6 -> 13.15 and 14.9 -> 13.4,
// at 4 13.8 -> 13.35; its 32-row one-column kernel 102 registers and no spills instead of 128 and 40 bytes spilled.
// Why in this form: the one-column tile kernel is bound by its ALU-pipe instructions (LOP3, SHF, PRMT, IADD3,
// SEL: on 9.0 the ALU pipe takes a warp instruction every second cycle per SM sub-partition, as the FMA-heavy pipe
// does IMAD, while FFMA has two pipes). Each half word's selector is its own shared load (LDS.U16 / LDS.32: no SHF
// for the high half, no byte permute for the blocks 2 bytes off alignment), and 15 - n is one IMAD, 0xFFFF - s (a
// nibble's complement borrows nothing), where s ^ 0x8888 was a LOP3 into a table of kvalues[8..15] + 1. The sm_90
// chunk loop of the one-column two-tile kernel: 859 -> 834 instructions, its ALU-pipe ones about 316 -> 205, 16
// more LDS. Measured on an H100 (docs/cuda-tuning-log.md "IQ4_NL's tile kernel off the ALU pipe").
// (The tables: kIq4Lo0/1, kIq4HiRevP1_0/1, kIq4Hi0/1 and kIq4NegLo0/1 in kpr_cuda_blocks.cuh; their register
// words, and the IMAD's opaque multiplier -1, come in iw.)
// 0xFFFF - s in an IMAD (the FMA pipe): each nibble n of s's low 16 bits -> 15 - n. ones is 0xFFFFFFFF loaded from
// memory (Iq4Words::ones): with a literal -1, ptxas emits an IADD3 or LOP3 (the ALU pipe).
__device__ __forceinline__ uint32_t nibble_complement(uint32_t s, uint32_t ones) {
    uint32_t c;
    asm("mad.lo.u32 %0, %1, %2, 65535;" : "=r"(c) : "r"(s), "r"(ones));
    return c;
}
// IQ4_NL's lookups of one unit (MmaQ4Like): s = {row g's low selector, row g + 8's, row g's high, row g + 8's}.
__device__ __forceinline__ void iq4_nl_product(const uint32_t (&s)[4], const uint32_t (&b)[2], int (&sum)[4],
                                               const Iq4Words &iw) {
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        lo[i] = prmt(iw.lo0, kIq4Lo1, s[i]);
        hi[i] = prmt(iw.hirev_p1_0, kIq4HiRevP1_1, nibble_complement(s[i], iw.ones));
    }
    mma_s8_16x8x32(lo, b, sum);
    mma_s8_16x8x32_acc(hi, b, sum);
}
// IQ4_XS's lookups of one unit: w0, w8 the rows' words qs[4t..4t+3] of the unit, the activations permuted
// (tile_perm_pos); the exact integer sums of the unit. Unsigned lookups of the values of indices 8..15 (selector
// 15 - n into kvalues[15..8]; 0..7 give the sign of a positive byte, 0) and of the negated values of 0..7 (the raw
// selector; 8..15 give 0), in two mmas, subtracted. The selectors off the ALU pipe as IQ4_NL's: the high halves by
// IMAD.HI (s * 0x10000 >> 32), the complements by IMAD, both multipliers opaque (iw). (IQ4_NL's chained signed form
// was measured for IQ4_XS in the twenty-sixth session on the H200: its one-column kernel 0.96-0.97x on five of eight
// shapes, 0.98-1.00x at 2..8 columns with the signed lookups added after; so IQ4_XS keeps this form.)
__device__ __forceinline__ void iq4_xs_product(uint32_t w0, uint32_t w8, const uint32_t (&b)[2], int (&sum)[4],
                                               const Iq4Words &iw) {
    auto high = [&](uint32_t w) {
        uint32_t h;
        asm("mul.hi.u32 %0, %1, %2;" : "=r"(h) : "r"(w), "r"(iw.sh16));
        return h;
    };
    auto cpl = [&](uint32_t w) { return nibble_complement(w, iw.ones); };
    // row g (w0) and row g + 8 (w8), the low then the high half of each word's nibbles (prmt's selector reads the
    // low 16 bits); v: the values of indices 8..15, u: the negated values of 0..7, both unsigned
    const uint32_t h0 = high(w0), h8 = high(w8);
    const uint32_t v[4] = {prmt(iw.hirev0, kIq4HiRev1, cpl(w0)), prmt(iw.hirev0, kIq4HiRev1, cpl(w8)),
                           prmt(iw.hirev0, kIq4HiRev1, cpl(h0)), prmt(iw.hirev0, kIq4HiRev1, cpl(h8))};
    const uint32_t u[4] = {prmt(iw.neg_lo0, kIq4NegLo1, w0), prmt(iw.neg_lo0, kIq4NegLo1, w8),
                           prmt(iw.neg_lo0, kIq4NegLo1, h0), prmt(iw.neg_lo0, kIq4NegLo1, h8)};
    int sv[4], su[4];
    mma_u8s8_16x8x32(v, b, sv);
    mma_u8s8_16x8x32(u, b, su);
#pragma unroll
    for (int i = 0; i < 4; ++i) sum[i] = sv[i] - su[i];
}

template <class T>
struct MmaQ4Like {
    using Block = T;
    static constexpr bool NL = T::TYPE == KPR_TYPE_IQ4_NL;
    static constexpr uint32_t CB = 8;
    static constexpr bool SUMS = false, PERM = NL, DEFER = true, BRANCH_FREE_QUANT = !NL;
    static constexpr uint32_t ODD_SHIFT = 0;
    static constexpr bool LDMATRIX = false;
    struct Row {
        uint32_t w;  // Q4_0: the word qs[4t..4t+3]; IQ4_NL: its low 16 bits are that word's (the higher bits: any)
        uint32_t wh; // IQ4_NL: the word's high 16 bits in the low 16 (iq4_nl_product's selectors)
        float d;
    };
    template <uint32_t B, bool D = true>
    __device__ __forceinline__ static Row load(uint32_t row, uint32_t t) {
        const uint32_t base = row + B * 18u;
        Row r;
        r.d = D ? f16_to_float(static_cast<uint16_t>(lds_u16(base))) : 0.0f;
        r.wh = 0;
        if constexpr (NL) { // the halves as they are in shared memory: odd blocks' qs 4-byte aligned, even ones' 2 off
            r.w = B % 2 == 1 ? lds_u32(base + 2u + 4u * t) : lds_u16(base + 2u + 4u * t);
            r.wh = B % 2 == 1 ? lds_u16(base + 4u + 4u * t) : lds_u32(base + 4u + 4u * t);
        } else if constexpr (B % 2 == 1) {
            r.w = lds_u32(base + 2u + 4u * t);
        } else {
            r.w = prmt(lds_u32(base + 4u * t), lds_u32(base + 4u * t + 4u), 0x5432u);
        }
        return r;
    }
    // the product of the two rows' A fragments (unit U of the rows' loaded blocks) with b, and their scales
    template <uint32_t U, bool X16 = false>
    __device__ __forceinline__ static void product(const Row &r0, const Row &r8, const uint32_t (&b)[2], int (&sum)[4],
                                                   float &dw0, float &mw0, float &dw1, float &mw1,
                                                   [[maybe_unused]] const Iq4Words &iw) {
        if constexpr (NL) {
            iq4_nl_product({r0.w, r8.w, r0.wh, r8.wh}, b, sum, iw);
        } else {
            // three instructions per word (and_xor: ptxas splits the plain expression into four)
            const uint32_t a[4] = {and_xor(r0.w << 4, 0xF0F0F0F0u, 0x80808080u), and_xor(r8.w << 4, 0xF0F0F0F0u, 0x80808080u),
                                   and_xor(r0.w, 0xF0F0F0F0u, 0x80808080u), and_xor(r8.w, 0xF0F0F0F0u, 0x80808080u)};
            mma_s8_16x8x32(a, b, sum);
        }
        dw0 = r0.d;
        dw1 = r8.d;
        mw0 = mw1 = 0.0f;
    }
    __device__ __forceinline__ static void defer_scales(uint32_t row, uint32_t p, uint32_t t, float (&dw)[2], float (&mw)[2]) {
        block_d_scales<Block::BS>(row, p, t, dw, mw);
    }
    __device__ __forceinline__ static float fold(int sum, float dw, float, float dx, float, float acc) {
        const float s = NL ? static_cast<float>(sum) : __fmul_rn(static_cast<float>(sum), 0.0625f);
        return __fmaf_rn(s, __fmul_rn(dw, dx), acc);
    }
};
using MmaQ4_0 = MmaQ4Like<TQ4_0>;
using MmaIQ4_NL = MmaQ4Like<TIQ4_NL>;

// IQ4_XS: IQ4_NL's values in 256-weight blocks (136 bytes: d, the scales' high bits, their low nibbles,
// then 16 bytes of nibbles per 32-weight unit, laid out as IQ4_NL's), unit j scaled by d (ls_j - 32) with
// a 6-bit ls_j. The same lookups and permuted activations as IQ4_NL. Chunks of 2 blocks (272 bytes, the
// smallest multiple of 16).
struct MmaIQ4_XS {
    using Block = TIQ4_XS;
    static constexpr uint32_t CB = 2;
    static constexpr bool SUMS = false, PERM = true, DEFER = true, BRANCH_FREE_QUANT = false;
    static constexpr uint32_t ODD_SHIFT = 0;
    static constexpr bool LDMATRIX = false;
    struct Row {
        float d;
        uint32_t sh, sl; // the scales' high bits (2 per unit), their low nibbles (4 per unit)
        uint32_t q[8];   // per unit, the word qs[16j + 4t..+3]
    };
    template <uint32_t B, bool D = true>
    __device__ __forceinline__ static Row load(uint32_t row, uint32_t t) {
        const uint32_t base = row + B * 136u; // 8-byte aligned
        Row r;
        if constexpr (D) {
            head(base, r.d, r.sh, r.sl);
        } else {
            r.d = 0.0f;
            r.sh = r.sl = 0;
        }
#pragma unroll
        for (uint32_t j = 0; j < 8; ++j) r.q[j] = lds_u32(base + 8u + 16u * j + 4u * t);
        return r;
    }
    template <uint32_t U, bool X16 = false>
    __device__ __forceinline__ static void product(const Row &r0, const Row &r8, const uint32_t (&b)[2], int (&sum)[4],
                                                   float &dw0, float &mw0, float &dw1, float &mw1,
                                                   [[maybe_unused]] const Iq4Words &iw) {
        iq4_xs_product(r0.q[U], r8.q[U], b, sum, iw);
        dw0 = unit_scale(r0.d, r0.sl, r0.sh, U);
        dw1 = unit_scale(r8.d, r8.sl, r8.sh, U);
        mw0 = mw1 = 0.0f;
    }
    // the block at base's d, the scales' high bits sh and their low nibbles sl
    __device__ __forceinline__ static void head(uint32_t base, float &d, uint32_t &sh, uint32_t &sl) {
        const uint32_t dd = lds_u32(base);
        d = f16_to_float(static_cast<uint16_t>(dd & 0xFFFFu));
        sh = dd >> 16;
        sl = lds_u32(base + 4u);
    }
    // unit u's scale d (ls_u - 32), the 6-bit ls_u from the low nibbles sl and high bits sh
    __device__ __forceinline__ static float unit_scale(float d, uint32_t sl, uint32_t sh, uint32_t u) {
        const int ls = static_cast<int>(((sl >> (4u * u)) & 0xFu) | (((sh >> (2u * u)) & 3u) << 4));
        return __fmul_rn(d, static_cast<float>(ls - 32));
    }
    // DEFER: the scales of units 2t, 2t + 1 of block p
    __device__ __forceinline__ static void defer_scales(uint32_t row, uint32_t p, uint32_t t, float (&dw)[2], float (&mw)[2]) {
        float d;
        uint32_t sh, sl;
        head(row + p * 136u, d, sh, sl);
#pragma unroll
        for (uint32_t j = 0; j < 2; ++j) {
            dw[j] = unit_scale(d, sl, sh, 2u * t + j);
            mw[j] = 0.0f;
        }
    }
    __device__ __forceinline__ static float fold(int sum, float dw, float, float dx, float, float acc) {
        return __fmaf_rn(static_cast<float>(sum), __fmul_rn(dw, dx), acc);
    }
};

// Q4_K and Q5_K: 256 weights in 8 units of 32, value d sc_j n - dmin m_j (6-bit sc_j, m_j packed in 12
// bytes); the nibbles of units 2g (low) and 2g + 1 (high) share the 32 bytes qs[32g..32g+31]; Q5_K's fifth
// bit of weight i of unit j is bit j of qh[i]. The values go into the unsigned-by-signed mma and the
// offset comes out with the activation block sums, as in the row kernel: sum_j (d sc_j d_x sum(n q) -
// dmin m_j s_j). Chunks of one block (144 / 176 bytes, 16-byte aligned, so every word is aligned).
template <class T>
struct MmaQ45K {
    using Block = T;
    static constexpr bool Q5 = T::TYPE == KPR_TYPE_Q5_K;
    static constexpr uint32_t CB = 1, QS = Q5 ? 48 : 16; // qs's offset in the block
    // BRANCH_FREE_QUANT measured 0.94x at Q4_K 2048 x 8192 (docs/cuda-tuning-log.md, thirty-seventh session)
    static constexpr bool SUMS = true, PERM = false, DEFER = true, BRANCH_FREE_QUANT = false;
    // ODD_SHIFT (Q4_K): with X16 an odd unit's A fragment is the qs words as they are, n_even + 16 n_odd per byte
    // (unsigned, at most 255). Its column 2t + 1 then holds the even unit's nibbles times the odd unit's activations
    // plus 16 times the odd unit's sum. The even unit's mma (A: n_even) gives that first term in the same column and
    // lane, and the kernel subtracts it: two subtractions per unit pair and tile instead of eight masks (w &
    // 0xF0F0F0F0 before), the same integers. The sm_90 chunk loop of the one-column two-tile kernel: 625 -> 590
    // instructions. Measured on an H100 (the weights in L2, run 2 of docs/measurements/h100-session39-runs.txt, us
    // per call): 4096 x 14336 9.5 -> 9.1, 4096 x 11008 7.7 -> 7.4, 8192 x 8192 10.7 -> 10.4, seven more shapes
    // 1.00-1.02x; from device memory 0.99-1.02x.
    static constexpr uint32_t ODD_SHIFT = Q5 ? 0 : 4;
    // qs's 32-byte groups start 16-byte aligned in a stage row (QS = 16 or 48, BS = 144 or 176, rows 16 + 32 m
    // bytes apart): ldsm_x4 reads their A fragments, 8 rows of 16 bytes per matrix on 32 distinct banks
    static constexpr bool LDMATRIX = true;
    struct Row {
        float d, dmin;
        uint32_t sc[2], m[2];  // the 6-bit scales and mins of units 0..3 and 4..7, one per byte
        uint32_t qa[4], qb[4]; // qs words 32g + 4t and 32g + 16 + 4t, g = 0..3
        uint32_t ha, hb;       // Q5_K: qh words 4t and 16 + 4t
    };
    // the super-block scales d and dmin of the block at base
    __device__ __forceinline__ static void d_dmin(uint32_t base, float &d, float &dmin) {
        const uint32_t dd = lds_u32(base);
        d = f16_to_float(static_cast<uint16_t>(dd & 0xFFFFu));
        dmin = f16_to_float(static_cast<uint16_t>(dd >> 16));
    }
    // the 6-bit scales (sc) and mins (m) of units 0..3 (word 0) and 4..7 (word 1), one per byte, of the block at base
    __device__ __forceinline__ static void scales_mins(uint32_t base, uint32_t (&sc)[2], uint32_t (&m)[2]) {
        const uint32_t w0 = lds_u32(base + 4u), w1 = lds_u32(base + 8u), w2 = lds_u32(base + 12u);
        sc[0] = w0 & 0x3F3F3F3Fu;
        m[0] = w1 & 0x3F3F3F3Fu;
        sc[1] = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
        m[1] = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
    }
    template <uint32_t B, bool D = true>
    __device__ __forceinline__ static Row load(uint32_t row, uint32_t t) {
        const uint32_t base = row + B * T::BS;
        Row r;
        if constexpr (D) {
            d_dmin(base, r.d, r.dmin);
            scales_mins(base, r.sc, r.m);
        } else {
            r.d = r.dmin = 0.0f;
            r.sc[0] = r.sc[1] = r.m[0] = r.m[1] = 0;
        }
#pragma unroll
        for (uint32_t g = 0; g < 4; ++g) {
            r.qa[g] = lds_u32(base + QS + 32u * g + 4u * t);
            r.qb[g] = lds_u32(base + QS + 16u + 32u * g + 4u * t);
        }
        if constexpr (Q5) {
            r.ha = lds_u32(base + 16u + 4u * t);
            r.hb = lds_u32(base + 32u + 4u * t);
        } else {
            r.ha = r.hb = 0;
        }
        return r;
    }
    // load<B, false> of rows g (at row0) and g + 8 (at row8) of a tile; lm: the tile's first row plus this lane's
    // ldm_lane_offset
    template <uint32_t B>
    __device__ __forceinline__ static void load_pair(uint32_t lm, uint32_t row0, uint32_t row8, uint32_t t, Row &r0, Row &r8) {
        r0.d = r0.dmin = r8.d = r8.dmin = 0.0f;
        r0.sc[0] = r0.sc[1] = r0.m[0] = r0.m[1] = r8.sc[0] = r8.sc[1] = r8.m[0] = r8.m[1] = 0;
#pragma unroll
        for (uint32_t g = 0; g < 4; ++g) ldsm_x4(lm + B * T::BS + QS + 32u * g, r0.qa[g], r8.qa[g], r0.qb[g], r8.qb[g]);
        if constexpr (Q5) {
            r0.ha = lds_u32(row0 + B * T::BS + 16u + 4u * t);
            r0.hb = lds_u32(row0 + B * T::BS + 32u + 4u * t);
            r8.ha = lds_u32(row8 + B * T::BS + 16u + 4u * t);
            r8.hb = lds_u32(row8 + B * T::BS + 32u + 4u * t);
        } else {
            r0.ha = r0.hb = r8.ha = r8.hb = 0;
        }
    }
    template <uint32_t U, bool X16 = false>
    __device__ __forceinline__ static void product(const Row &r0, const Row &r8, const uint32_t (&b)[2], int (&sum)[4],
                                                   float &dw0, float &mw0, float &dw1, float &mw1,
                                                   [[maybe_unused]] const Iq4Words &iw) {
        constexpr uint32_t g = U / 2, sh = 4 * (U % 2), h = U / 4, by = 8 * (U % 4);
        auto q = [](uint32_t w, uint32_t hw) {
            if constexpr (X16 && ODD_SHIFT != 0 && U % 2 == 1) return w;
            uint32_t v = (w >> sh) & 0x0F0F0F0Fu;
            if constexpr (Q5) v |= ((hw >> U) & 0x01010101u) << 4;
            return v;
        };
        const uint32_t a[4] = {q(r0.qa[g], r0.ha), q(r8.qa[g], r8.ha), q(r0.qb[g], r0.hb), q(r8.qb[g], r8.hb)};
        mma_u8s8_16x8x32(a, b, sum);
        dw0 = byte_times_cvt(r0.d, r0.sc[h], by);
        mw0 = byte_times_cvt(r0.dmin, r0.m[h], by);
        dw1 = byte_times_cvt(r8.d, r8.sc[h], by);
        mw1 = byte_times_cvt(r8.dmin, r8.m[h], by);
    }
    // a unit's scale d sc_j or offset dmin m_j: f times the byte of w at bit by. The byte goes into the mantissa
    // of 2^23 by a byte permute, and one exact subtraction makes it the float: no conversion instruction (I2F
    // runs at a quarter of the FMA rate on 8.0 and 9.0). Used by the one-column kernels' deferred folds.
    __device__ __forceinline__ static float byte_times(float f, uint32_t w, uint32_t by) {
        const float b = __fsub_rn(__uint_as_float(prmt(w, 0x4B000000u, 0x7540u | (by >> 3))), 8388608.0f);
        return __fmul_rn(f, b);
    }
    // the same value by a conversion (sm_90: I2F.U8 and I2FP.F32.U32), for the 2..8-column kernels (product).
    // There byte_times cost one instruction more per scale (sm_90: 32 more per chunk) and was slower: with this
    // again (the thirty-fourth session's code), an H100 from device memory, us per call, 4096 x 14336 at 2
    // columns 16.5 -> 15.7, 4096 x 11008 13.5 -> 12.9; 140 Q4_K / Q5_K cases of 2..8 columns on ten shapes
    // 0.96-1.05x, geometric mean 1.007 (run 1 of docs/measurements/h100-session43-runs.txt).
    __device__ __forceinline__ static float byte_times_cvt(float f, uint32_t w, uint32_t by) {
        return __fmul_rn(f, static_cast<float>((w >> by) & 0xFFu));
    }
    // DEFER: the scales and offsets of units 2t, 2t + 1 of block p
    __device__ __forceinline__ static void defer_scales(uint32_t row, uint32_t p, uint32_t t, float (&dw)[2], float (&mw)[2]) {
        const uint32_t base = row + p * T::BS;
        float d, dmin;
        d_dmin(base, d, dmin);
        uint32_t sc[2], m[2];
        scales_mins(base, sc, m);
        const uint32_t scw = t < 2 ? sc[0] : sc[1], mm = t < 2 ? m[0] : m[1], by = 16u * (t % 2u);
#pragma unroll
        for (uint32_t j = 0; j < 2; ++j) {
            dw[j] = byte_times(d, scw, by + 8u * j);
            mw[j] = byte_times(dmin, mm, by + 8u * j);
        }
    }
    __device__ __forceinline__ static float fold(int sum, float dw, float mw, float dx, float sx, float acc) {
        return __fmaf_rn(-mw, sx, __fmaf_rn(static_cast<float>(sum), __fmul_rn(dw, dx), acc));
    }
};
using MmaQ4_K = MmaQ45K<TQ4_K>;
using MmaQ5_K = MmaQ45K<TQ5_K>;

// f(integral_constant<uint32_t, I>) for I = 0, 1, ... in order
template <class F, uint32_t... I>
__device__ __forceinline__ void unrolled(F &f, std::integer_sequence<uint32_t, I...>) {
    (f(std::integral_constant<uint32_t, I>{}), ...);
}

// part(0) + ... + part(N - 1) added pairwise: a tree of depth log2 N instead of a chain of N dependent adds
// (the tile kernels' last step, which the block's last warp waits on)
template <int N, class F>
__device__ __forceinline__ float pairwise_sum(F &&part) {
    float v[N];
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = part(i);
#pragma unroll
    for (int s = 1; s < N; s *= 2)
#pragma unroll
        for (int i = 0; i + s < N; i += 2 * s) v[i] += v[i + s];
    return v[0];
}

// Rows that are not 16-byte aligned (GemvKArgs::aligned == 0) have no tensor map and no bulk copies (both
// need 16 bytes). Where a type's blocks are a multiple of 8 bytes (IQ4_XS's 136: rows of an odd number of
// super-blocks, such as 8960 or 11008 weights, are 8-byte aligned), the tile kernel still takes them, in
// chunks of one block (MmaOneBlock: an even count would be aligned, so CB = 2 never divides such a row),
// each lane copying a share of the chunk's 8-byte pieces with cp.async (mma_piece_copies); the stage's
// barrier then counts the 32 lanes' arrivals (cp_async_mbar_arrive) besides lane 0's for the activations.
template <class M>
constexpr bool mma_takes_unaligned_rows() {
    return M::Block::BS % 16 != 0 && M::Block::BS % 8 == 0;
}
template <class M>
struct MmaOneBlock : M {
    static constexpr uint32_t CB = 1;
};
// Whether the tile kernel of M copies its chunks in 8-byte pieces (chunks that are not a multiple of 16 bytes)
template <class M>
constexpr bool mma_piece_copies() {
    return M::CB * M::Block::BS % 16 != 0;
}

// A stage of a warp's ring, for NC columns: the 16 rows' chunks, then CB / 8 runs of the activations'
// tile layout (each: the int8 activations of each column, the block scales d of each column, with
// M::SUMS the block sums s). The layout's column strides put the lanes' reads of 8 columns on distinct
// banks (272 bytes = 4 banks apart; 48 bytes = 12 banks apart). FX (one column, the activations
// quantized in the kernel): the chunk's float activations instead, 128 bytes per 32-weight unit.
template <class M, int NC, bool FX = false, int TR = 1>
struct MmaGeom {
    static constexpr uint32_t ROWS = 16 * TR;               // rows per block: TR tiles of the mma's M (16)
    static constexpr uint32_t CHUNK = M::CB * M::Block::BS;  // bytes of a row chunk
    // a row's stride in the stage: 4 banks (mod 8) apart, so a warp's fragment loads of 8 rows x 4
    // consecutive words hit 32 distinct banks
    static constexpr uint32_t RS = CHUNK + ((12 - (CHUNK / 4) % 8) % 8) * 4;
    static constexpr uint32_t UNITS = M::CB * M::Block::QK / 32; // 32-weight units per row chunk
    static constexpr uint32_t XR = UNITS / 8;                // runs of the tile layout (256 columns) per chunk
    static constexpr uint32_t RUN = ActTiles::run_bytes(NC, M::SUMS);
    static constexpr uint32_t OFF_X = ROWS * RS;
    static constexpr uint32_t XBYTES = FX ? UNITS * 32 * 4 : XR * RUN; // a stage's activations
    // a tensor copy's destination is 128-byte aligned, so every stage is (the padding never changed a stage
    // count, mma_stages)
    static constexpr uint32_t STAGE = (OFF_X + XBYTES + 127) / 128 * 128;
    static_assert((CHUNK % 16 == 0 || mma_piece_copies<M>()) && RS % 16 == 0 && (RS / 4) % 8 == 4 && UNITS % 8 == 0, "stage geometry");
    static_assert(!FX || NC == 1, "activations quantized in the kernel: one column");
};

// The launch shape, measured on the H200 (Q8_0, 4096 x 14336, 8 columns, us per call, with the activations
// still copied column by column): 8 warps per block and 2 stages per warp (two blocks per SM) 25.9; 8
// warps x 3 stages (one block per SM) 34.2; 4 x 3 32.3; 16 x 2 29.6; two tiles (32 rows) per warp 26.9;
// chunks of 16 blocks 26.3-28.1.
constexpr int kMmaWarps = 8;

// Stages per warp: as many as keep two blocks on a multiprocessor of 228 KiB (9.0), about 108 KiB of ring
// per block, at least 2. Measured on the H200 (Q4_0, 144-byte chunks, 4096 x 14336, whole calls): with 2
// stages, 27.5 us at 2 columns (blocks of 47 KiB, up to 4 per SM) and 15.9 at 8 (2 per SM); with the stages
// filling two blocks per SM, 15.7 at 2 and 16.0 at 8. (More bytes in flight per warp, and fewer blocks
// per SM; which of the two matters was not separated.) Over several waves, 2 stages measured faster
// (launch_mma_waves).
template <class M, int NC, int W = kMmaWarps, bool FX = false>
constexpr int mma_stages() {
    constexpr uint32_t kRingPerBlock = 108 * 1024;
    constexpr uint32_t s = kRingPerBlock / (W * MmaGeom<M, NC, FX>::STAGE);
    return s < 2 ? 2 : s > 8 ? 8 : static_cast<int>(s);
}

// Whether the one-column kernel refills a stage as soon as its blocks are in registers (EARLY), so that S
// chunks are in flight while a warp decodes instead of S - 1: measured on the H200 (run 13 of
// h200-session10-runs.txt, against refilling after the decode, alternating twice): Q8_0 4096 x 14336 17.25
// -> 17.0 us, Q4_0 14.65 -> 14.5; not IQ4_XS, whose two blocks of rows take 156 registers that way (one block
// per SM instead of two: 17.2 -> 21.3).
template <class M>
constexpr bool fx_refills_early() {
    return M::Block::TYPE != KPR_TYPE_IQ4_XS;
}

// Whether M has a one-column kernel with two tiles per block (TR = 2: deferred folds, early refills) and its ring
// of 16 warps x 2 stages of 32 rows fits the 227 KiB a block may have on 9.0: Q4_0, IQ4_NL (180 KiB), Q4_K (180
// KiB), Q5_K (208 KiB); not Q8_0 (311 KiB) nor IQ4_XS (no early refills: fx_refills_early).
template <class M>
constexpr bool mma_two_tile_ring_fits() {
    return M::DEFER && fx_refills_early<M>() &&
           2u * kMmaWarps * 2u * (MmaGeom<M, 1, true, 2>::STAGE + 8u) <= 227u * 1024u;
}

// W warps per block (one 16-row tile), S stages per warp, NC columns (1..8). The chunks of a row are
// split into W contiguous runs, one per warp.
// FX (one column): no quantizer kernel before this one. The ring brings each chunk's float activations
// (a.x.f) and the warp quantizes them to q8_1 itself (the arithmetic of q8_1_quantize_lane, so the same
// integers and scales as quantize_act_q8_1): lanes 4g..4g+3 take unit g of each group of 8 units, each lane
// the 8 values of its own B fragment words (k 4t..4t+3, 16+4t..16+4t+3). So column g of the B fragment
// holds unit g, and the mma of unit u is right in column u only: lane t = u / 2 keeps that column's sums
// (C columns 2t, 2t+1). A call is then one kernel; the 16 rows of a tile share each quantization.
// EARLY: a stage is refilled as soon as its blocks are in registers (the decode follows from there), so
// that all S stages are in flight while a warp decodes (fx_refills_early).
// DEFER (FX, types that give their units' scales: M::DEFER, M::defer_scales): a lane keeps the integer sums
// of its own two units per group of 8 (the mma's column u is right only in lane t = u / 2) and folds them
// once per group with their units' scales (and offsets), instead of folding every unit's product and
// discarding 3 of 4 by a select; the same float operations in the same order, so the same results bit for
// bit. Measured on the H200 (run 1 of h200-session11-runs.txt, alternating twice, 4096 x 14336): Q8_0 17.3
// -> 16.95 us, Q4_0 14.5 -> 13.3, IQ4_NL 15.8 -> 15.2. Q4_K, Q5_K and IQ4_XS since the twenty-second session.
// TR (FX with DEFER and EARLY only): TR tiles per block (1 or 2), so that each chunk's activations, quantized
// once, serve 16 * TR rows (mma_two_tiles, mma_two_tile_ring_fits).
// XFIRST (FX with EARLY only): only stage 0's weights are requested before the dependency wait; stages 1.. after
// every stage's activations (mma_x_first).
// PAD (NC = 4 or 8, tile_vectors): the call has fewer columns than NC, a.n_used of them (that field is the
// grouped GEMV's otherwise, which the tile kernel does not serve); the layout's columns past them are zero, and
// only a.n_used columns are written out.
template <class M, int NC, int W, int S, bool FX = false, bool EARLY = false, bool DEFER = false, bool TMA = false, int TR = 1,
          bool XFIRST = false, bool PAD = false>
__global__ void __launch_bounds__(32 * W, (W >= 16 && FX && TR == 1) || (TR == 2 && W <= kMmaWarps) ? 2 : 1) gemv_mma_kernel(const GemvKArgs a, const KPR_GRID_CONSTANT TmaMap wmap) {
#if KPR_MMA_INT8 && KPR_BULK_COPY // launched on 9.0 only (mma_serves)
    using G = MmaGeom<M, NC, FX, TR>;
    static_assert(TR == 1 || (TR == 2 && FX && DEFER && EARLY), "two tiles per block: the one-column deferred-fold kernel");
    static_assert(!XFIRST || (FX && EARLY), "stage 0 alone before the wait: the one-column kernel with early refills");
    extern __shared__ __align__(128) uint8_t mma_ring[]; // [W][S][G::STAGE]
    // a warp's partial sums, [G::ROWS * 8] floats, at the start of its own ring once its chunks are read (all
    // it requested has landed by then), so that the block's static shared memory does not grow with W
    static_assert(S * G::STAGE >= G::ROWS * 8 * sizeof(float), "a warp's ring holds its partial sums");
    auto red = [&](uint32_t w) { return reinterpret_cast<float *>(mma_ring + w * S * G::STAGE); };
    __shared__ alignas(8) uint64_t bar[W][S]; // one mbarrier per stage of a warp's ring

    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t g = lane / 4, t = lane % 4;
    const uint32_t row0 = blockIdx.x * G::ROWS;
    const uint32_t nch = a.nb / M::CB; // the launcher checks a.nb % M::CB == 0
    // the IQ4 types' table words (dead code for the others). The one-column kernels kept them in registers as
    // constants already, and loaded they take registers those kernels lack (IQ4_NL, 16 warps: 770 -> 839
    // instructions per chunk loop); the others copied one before every lookup (2..8 columns: 526 -> 441).
    const Iq4Words iw = FX ? Iq4Words::constants() : Iq4Words::load();
    const uint32_t per = (nch + W - 1) / W;
    const uint32_t c0 = min(nch, warp * per), c1 = min(nch, c0 + per);
    const uint32_t ring = smem_addr(mma_ring) + warp * S * G::STAGE;
    // the tile layout (ActTiles), or FX the float activations
    const uint8_t *const xt = FX ? reinterpret_cast<const uint8_t *>(a.x.f) : reinterpret_cast<const uint8_t *>(a.x.q);

    // PIECES: the weights by 8-byte cp.async copies (mma_piece_copies; never with a tensor map)
    constexpr bool PIECES = !TMA && mma_piece_copies<M>();
    if (lane == 0) {
#pragma unroll
        for (int st = 0; st < S; ++st) mbar_init(smem_addr(&bar[warp][st]), PIECES ? 33 : 1);
        mbar_init_fence();
    }
    __syncwarp();
    // requests the weights of chunk c into stage st (rows past the end repeat the last row): lane 0 arms
    // the stage's barrier for them and for the activations (issue_x), then one bulk copy per row
    static_assert(!TMA || G::RS == G::CHUNK, "a tensor copy fills a dense box");
    static_assert(!PIECES || (G::CHUNK % 8 == 0 && G::RS % 8 == 0), "8-byte pieces");
    auto issue_w = [&](uint32_t c, uint32_t st) {
        const uint64_t off = static_cast<uint64_t>(c) * G::CHUNK;
        const uint32_t b = smem_addr(&bar[warp][st]);
        if constexpr (TMA) { // the tile's rows' chunks in one tensor copy
            if (lane == 0) {
                mbar_arrive_expect(b, G::ROWS * G::CHUNK + G::XBYTES);
                tensor_copy_2d_g2s(ring + st * G::STAGE, &wmap, static_cast<int>(c * (G::CHUNK / 4)), static_cast<int>(row0), b);
            }
            return;
        }
        if constexpr (PIECES) { // lane 0 arms the barrier for the activations; every lane arrives for its pieces
            if (lane == 0) mbar_arrive_expect(b, G::XBYTES);
            constexpr uint32_t PR = G::CHUNK / 8; // pieces per row
#pragma unroll
            for (uint32_t i = lane; i < G::ROWS * PR; i += 32) {
                const uint32_t r = i / PR, k = i - r * PR;
                const uint32_t row = min(row0 + r, a.rows - 1);
                cp_async8(ring + st * G::STAGE + r * G::RS + 8u * k, a.w + static_cast<uint64_t>(row) * a.row_bytes + off + 8u * k);
            }
            cp_async_mbar_arrive(b);
            return;
        }
        if (lane == 0) mbar_arrive_expect(b, G::ROWS * G::CHUNK + G::XBYTES);
        __syncwarp();
        if (lane < G::ROWS) {
            const uint32_t row = min(row0 + lane, a.rows - 1);
            bulk_copy_g2s(ring + st * G::STAGE + lane * G::RS, a.w + static_cast<uint64_t>(row) * a.row_bytes + off,
                          G::CHUNK, b);
        }
    };
    // requests the activations of chunk c into stage st (only after the dependency wait): one run of the
    // quantizer's tile layout (FX: the chunk's floats), one copy
    auto issue_x = [&](uint32_t c, uint32_t st) {
        if (lane == 0)
            bulk_copy_g2s(ring + st * G::STAGE + G::OFF_X, xt + size_t(c) * G::XBYTES, G::XBYTES,
                          smem_addr(&bar[warp][st]));
    };
    // the weights need nothing from the kernel before: requested before the dependency wait (EARLY: every
    // stage, since a stage is refilled as soon as it has been read into registers)
    constexpr int S0 = EARLY ? S : S - 1, SW = XFIRST ? 1 : S0; // SW: stages whose weights go before the wait
#pragma unroll
    for (int s = 0; s < SW; ++s)
        if (c0 + s < c1) issue_w(c0 + s, s);
    pdl_wait();              // the activations are written by the kernel before (FX) or the quantizer
    pdl_launch_dependents(); // the next call's kernel may launch (it waits for us before writing)
#pragma unroll
    for (int s = 0; s < S0; ++s)
        if (c0 + s < c1) issue_x(c0 + s, s);
#pragma unroll
    for (int s = SW; s < S0; ++s) // XFIRST: behind the activations (a stage's barrier counts the bytes of both)
        if (c0 + s < c1) issue_w(c0 + s, s);

    const bool colb = g < NC, cold0 = 2 * t < NC, cold1 = 2 * t + 1 < NC;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // The chunk in stage `stage`, block by block (a block's index is a compile-time constant: load<B>
    // depends on its alignment). FX: acc[0] and acc[2] gather rows g and g + 8 over the units whose B
    // column is 2t or 2t + 1.
    auto chunk = [&](uint32_t stage, auto release) {
        constexpr uint32_t UPB = M::Block::QK / 32; // units per block
        constexpr uint32_t P = G::UNITS / 8;       // FX: groups of 8 units
        const uint32_t rg = stage + g * G::RS, rg8 = rg + 8 * G::RS;
        [[maybe_unused]] uint32_t bq[FX ? P : 1][2];
        [[maybe_unused]] float dxa[FX ? P : 1], dxb[FX ? P : 1]; // FX: units with B columns 2t, 2t + 1
        [[maybe_unused]] float sxa[FX ? P : 1], sxb[FX ? P : 1];
        if constexpr (FX) {
#pragma unroll
            for (uint32_t p = 0; p < P; ++p) {
                // lane's values: k 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) of unit 8p + g; odd g read hi first, so
                // that each 128-bit load of a quarter warp covers 32 distinct banks
                const uint32_t base = stage + G::OFF_X + (8u * p + g) * 128u + 16u * t;
                const uint32_t o1 = (g & 1u) ? 64u : 0u;
                uint32_t fa[4], fb[4];
                lds_words_v4<4>(base + o1, fa);
                lds_words_v4<4>(base + (64u - o1), fb);
                int qa[4], qb[4], qs;
                float dh;
                q8_1_quantize_quad<M::BRANCH_FREE_QUANT>(fa, fb, qa, qb, dh, qs); // kpr_cuda_act.cuh
                auto pack = [](const int (&q)[4]) {
                    return (static_cast<uint32_t>(q[0]) & 0xFFu) | ((static_cast<uint32_t>(q[1]) & 0xFFu) << 8) |
                           ((static_cast<uint32_t>(q[2]) & 0xFFu) << 16) | (static_cast<uint32_t>(q[3]) << 24);
                };
                const uint32_t pa = pack(qa), pb = pack(qb);
                const uint32_t lo = (g & 1u) ? pb : pa, hi = (g & 1u) ? pa : pb;
                if constexpr (M::PERM) { // tile_perm_pos: (lo0, hi0, lo1, hi1), (lo2, hi2, lo3, hi3)
                    bq[p][0] = prmt(lo, hi, 0x5140u);
                    bq[p][1] = prmt(lo, hi, 0x7362u);
                } else {
                    bq[p][0] = lo;
                    bq[p][1] = hi;
                }
                dxa[p] = __shfl_sync(0xffffffffu, dh, 8u * t);
                dxb[p] = __shfl_sync(0xffffffffu, dh, 8u * t + 4u);
                if constexpr (M::SUMS) {
                    qs += __shfl_xor_sync(0xffffffffu, qs, 1);
                    qs += __shfl_xor_sync(0xffffffffu, qs, 2);
                    const float sh = __fmul_rn(dh, static_cast<float>(qs));
                    sxa[p] = __shfl_sync(0xffffffffu, sh, 8u * t);
                    sxb[p] = __shfl_sync(0xffffffffu, sh, 8u * t + 4u);
                } else {
                    sxa[p] = sxb[p] = 0.0f;
                }
            }
        }
        // this lane's B column (g) and C columns (2t, 2t + 1) in the stage's first run (not FX)
        [[maybe_unused]] const uint32_t xq = stage + G::OFF_X + g * ActTiles::QS;
        [[maybe_unused]] const uint32_t xd0 = stage + G::OFF_X + NC * ActTiles::QS + 2 * t * ActTiles::FS;
        [[maybe_unused]] const uint32_t xd1 = xd0 + ActTiles::FS, xs0 = xd0 + NC * ActTiles::FS, xs1 = xs0 + ActTiles::FS;
        // DF: the lane's own units' sums are kept as integers and folded once per group of 8 units (below)
        constexpr bool DF = FX && DEFER;
        static_assert(!DF || M::DEFER, "deferred folds: the type gives its units' scales (defer_scales)");
        [[maybe_unused]] int keep[DF ? P : 1][2][2 * TR] = {};   // [group][unit 2t + j][row g, g + 8, (g + 16, g + 24)]
        [[maybe_unused]] float kd[DF ? P : 1][2][2 * TR] = {};   // their units' scales
        [[maybe_unused]] float km[DF ? P : 1][2][2 * TR] = {};   // and offsets (M::SUMS)
        if constexpr (DF) {
#pragma unroll
            for (uint32_t p = 0; p < P; ++p)
#pragma unroll
                for (int k = 0; k < 2 * TR; ++k) { // rows g, g + 8, g + 16, ...
                    float dw[2], mw[2];
                    M::defer_scales(rg + 8u * k * G::RS, p, t, dw, mw);
#pragma unroll
                    for (uint32_t j = 0; j < 2; ++j) {
                        kd[p][j][k] = dw[j];
                        km[p][j][k] = mw[j];
                    }
                }
        }
        auto load_row = [&](auto bc, uint32_t row) {
            constexpr uint32_t bb = decltype(bc)::value;
            if constexpr (DF) return M::template load<bb, false>(row, t);
            else return M::template load<bb>(row, t);
        };
        // EARLY: every block's rows into registers first, then the stage is released
        [[maybe_unused]] typename M::Row r0s[EARLY ? M::CB : 1], r8s[EARLY ? M::CB : 1];
        [[maybe_unused]] typename M::Row rts[TR > 1 ? 2 * TR - 2 : 1][TR > 1 ? M::CB : 1]; // rows g + 16, g + 24, ...
        if constexpr (EARLY) {
            auto ld = [&](auto bc) {
                constexpr uint32_t bb = decltype(bc)::value;
                if constexpr (DF && M::LDMATRIX) { // a tile's two rows of the lane at once (rows g + 16 k, g + 8 + 16 k)
                    const uint32_t lm = stage + ldm_lane_offset(lane, G::RS);
                    M::template load_pair<bb>(lm, rg, rg8, t, r0s[bb], r8s[bb]);
                    if constexpr (TR > 1) {
#pragma unroll
                        for (int k = 2; k < 2 * TR; k += 2)
                            M::template load_pair<bb>(lm + 8u * k * G::RS, rg + 8u * k * G::RS, rg + 8u * (k + 1) * G::RS,
                                                      t, rts[k - 2][bb], rts[k - 1][bb]);
                    }
                } else {
                    r0s[bb] = load_row(bc, rg);
                    r8s[bb] = load_row(bc, rg8);
                    if constexpr (TR > 1) {
#pragma unroll
                        for (int k = 2; k < 2 * TR; ++k) rts[k - 2][bb] = load_row(bc, rg + 8u * k * G::RS);
                    }
                }
            };
            unrolled(ld, std::make_integer_sequence<uint32_t, M::CB>{});
            release();
        }
        auto block = [&](auto bc) {
            constexpr uint32_t bb = decltype(bc)::value;
            const typename M::Row r0 = EARLY ? r0s[EARLY ? bb : 0] : load_row(bc, rg);
            const typename M::Row r8 = EARLY ? r8s[EARLY ? bb : 0] : load_row(bc, rg8);
            // M::ODD_SHIFT (deferred folds): each tile's even-unit column 2t + 1, which its odd unit's sums include
            constexpr bool OR = DF && M::ODD_SHIFT != 0;
            [[maybe_unused]] int even1[OR ? TR : 1][2];
            auto odd_raw = [&](auto uc, int k, int (&s)[4]) {
                if constexpr (OR) {
                    if constexpr (decltype(uc)::value % 2 == 0) {
                        even1[k][0] = s[1];
                        even1[k][1] = s[3];
                    } else {
                        s[1] -= even1[k][0];
                        s[3] -= even1[k][1];
                    }
                }
            };
            auto unit = [&](auto uc) {
                constexpr uint32_t ui = bb * UPB + decltype(uc)::value; // unit in the chunk
                int sum[4];
                float dw0, dw1, mw0, mw1;
                if constexpr (FX) {
                    constexpr uint32_t p = ui / 8, u = ui % 8; // u: its B column
                    M::template product<decltype(uc)::value, DF>(r0, r8, bq[p], sum, dw0, mw0, dw1, mw1, iw);
                    odd_raw(uc, 0, sum);
                    const bool mine = t == u / 2; // column u of the C fragment is this lane's
                    if constexpr (DF) {
                        keep[p][u % 2][0] = mine ? sum[u % 2] : keep[p][u % 2][0];
                        keep[p][u % 2][1] = mine ? sum[2 + u % 2] : keep[p][u % 2][1];
                        if constexpr (TR > 1) { // the further tiles: the same B fragment
#pragma unroll
                            for (int k = 1; k < TR; ++k) {
                                int s2[4];
                                float e0, e1, e2, e3;
                                M::template product<decltype(uc)::value, DF>(rts[2 * k - 2][bb], rts[2 * k - 1][bb], bq[p], s2, e0, e1, e2, e3, iw);
                                odd_raw(uc, k, s2);
                                keep[p][u % 2][2 * k] = mine ? s2[u % 2] : keep[p][u % 2][2 * k];
                                keep[p][u % 2][2 * k + 1] = mine ? s2[2 + u % 2] : keep[p][u % 2][2 * k + 1];
                            }
                        }
                    } else {
                        const float dx = u % 2 ? dxb[p] : dxa[p], sx = u % 2 ? sxb[p] : sxa[p];
                        const float n0 = M::fold(sum[u % 2], dw0, mw0, dx, sx, acc[0]);
                        const float n2 = M::fold(sum[2 + u % 2], dw1, mw1, dx, sx, acc[2]);
                        acc[0] = mine ? n0 : acc[0];
                        acc[2] = mine ? n2 : acc[2];
                    }
                } else {
                    constexpr uint32_t xo = ui / 8 * G::RUN + ui % 8 * 32u, fo = ui / 8 * G::RUN + ui % 8 * 4u;
                    uint32_t bf[2] = {0, 0};
                    float dx0 = 0.0f, dx1 = 0.0f, sx0 = 0.0f, sx1 = 0.0f;
                    if (colb) {
                        bf[0] = lds_u32(xq + xo + 4u * t);
                        bf[1] = lds_u32(xq + xo + 16u + 4u * t);
                    }
                    if (cold0) dx0 = __uint_as_float(lds_u32(xd0 + fo));
                    if (cold1) dx1 = __uint_as_float(lds_u32(xd1 + fo));
                    if constexpr (M::SUMS) {
                        if (cold0) sx0 = __uint_as_float(lds_u32(xs0 + fo));
                        if (cold1) sx1 = __uint_as_float(lds_u32(xs1 + fo));
                    }
                    M::template product<decltype(uc)::value>(r0, r8, bf, sum, dw0, mw0, dw1, mw1, iw);
                    acc[0] = M::fold(sum[0], dw0, mw0, dx0, sx0, acc[0]);
                    acc[1] = M::fold(sum[1], dw0, mw0, dx1, sx1, acc[1]);
                    acc[2] = M::fold(sum[2], dw1, mw1, dx0, sx0, acc[2]);
                    acc[3] = M::fold(sum[3], dw1, mw1, dx1, sx1, acc[3]);
                }
            };
            unrolled(unit, std::make_integer_sequence<uint32_t, UPB>{});
        };
        unrolled(block, std::make_integer_sequence<uint32_t, M::CB>{});
        if constexpr (DF) { // the lane's units 2t, 2t + 1 of each group, in the order the selects above kept
#pragma unroll
            for (uint32_t p = 0; p < P; ++p)
#pragma unroll
                for (uint32_t j = 0; j < 2; ++j) {
                    const float dx = j ? dxb[p] : dxa[p], sx = j ? sxb[p] : sxa[p];
                    const int sh = j ? M::ODD_SHIFT : 0; // unit 2t + j is odd for j = 1 (product<U, true>)
                    acc[0] = M::fold(keep[p][j][0] >> sh, kd[p][j][0], km[p][j][0], dx, sx, acc[0]);
                    acc[2] = M::fold(keep[p][j][1] >> sh, kd[p][j][1], km[p][j][1], dx, sx, acc[2]);
                    if constexpr (TR > 1) { // rows g + 16, g + 24 (TR = 2)
                        acc[1] = M::fold(keep[p][j][2] >> sh, kd[p][j][2], km[p][j][2], dx, sx, acc[1]);
                        acc[3] = M::fold(keep[p][j][3] >> sh, kd[p][j][3], km[p][j][3], dx, sx, acc[3]);
                    }
                }
        }
    };
    for (uint32_t c = c0; c < c1; ++c) {
        const uint32_t i = c - c0, st = i % S;
        if (!EARLY && c + S - 1 < c1) {
            issue_w(c + S - 1, (i + S - 1) % S);
            issue_x(c + S - 1, (i + S - 1) % S);
        }
        mbar_wait(smem_addr(&bar[warp][st]), (i / S) & 1u);
        __syncwarp();
        // EARLY: chunk c + S goes into this stage once its contents are in registers
        auto release = [&] {
            if constexpr (EARLY) {
                fence_proxy_async_smem();
                __syncwarp();
                if (c + S < c1) {
                    issue_w(c + S, st);
                    issue_x(c + S, st);
                }
            }
        };
        chunk(ring + st * G::STAGE, release);
        __syncwarp(); // stage st is refilled by a later issue
    }
    if constexpr (FX) { // rows g, g + 8 (and g + 16, g + 24): a row's four lanes t summed, one part per warp
#pragma unroll
        for (int k = 0; k < 4; k += TR > 1 ? 1 : 2) {
            acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], 1);
            acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], 2);
        }
        if (t == 0) {
            red(warp)[g] = acc[0];
            red(warp)[g + 8] = acc[2];
            if constexpr (TR > 1) {
                red(warp)[g + 16] = acc[1];
                red(warp)[g + 24] = acc[3];
            }
        }
        __syncthreads();
        for (uint32_t r = threadIdx.x; r < G::ROWS; r += 32 * W) {
            const float v = pairwise_sum<W>([&](int w) { return red(w)[r]; });
            if (row0 + r < a.rows) a.y[row0 + r] = v;
        }
        return;
    }
    red(warp)[g * 8 + 2 * t] = acc[0];
    red(warp)[g * 8 + 2 * t + 1] = acc[1];
    red(warp)[(g + 8) * 8 + 2 * t] = acc[2];
    red(warp)[(g + 8) * 8 + 2 * t + 1] = acc[3];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G::ROWS * NC; i += 32 * W) {
        const uint32_t r = i / NC, j = i % NC;
        const float v = pairwise_sum<W>([&](int w) { return red(w)[r * 8 + j]; });
        if (row0 + r < a.rows && (!PAD || j < a.n_used)) a.y[static_cast<uint64_t>(j) * a.rows + row0 + r] = v;
    }
#endif
}

// The tile kernel's block type for T (void: none). One line per type with a tile kernel (and a case in
// on_mma_type below).
template <class T>
struct MmaFor {
    using type = void;
};
#define KPR_MMA_FOR(T, M)                                                                                      \
    template <>                                                                                                \
    struct MmaFor<T> {                                                                                         \
        using type = M;                                                                                        \
    };
KPR_MMA_FOR(TQ8_0, MmaQ8_0)
KPR_MMA_FOR(TQ4_0, MmaQ4_0)
KPR_MMA_FOR(TQ4_K, MmaQ4_K)
KPR_MMA_FOR(TQ5_K, MmaQ5_K)
KPR_MMA_FOR(TIQ4_NL, MmaIQ4_NL)
KPR_MMA_FOR(TIQ4_XS, MmaIQ4_XS)
#undef KPR_MMA_FOR

// f(M{}) for the tile kernel's block type M of the runtime weight type (false: no tile kernel for it).
template <class F>
inline bool on_mma_type(uint32_t type, F &&f) {
    switch (type) {
    case KPR_TYPE_Q8_0: return f(MmaQ8_0{});
    case KPR_TYPE_Q4_0: return f(MmaQ4_0{});
    case KPR_TYPE_Q4_K: return f(MmaQ4_K{});
    case KPR_TYPE_Q5_K: return f(MmaQ5_K{});
    case KPR_TYPE_IQ4_NL: return f(MmaIQ4_NL{});
    case KPR_TYPE_IQ4_XS: return f(MmaIQ4_XS{});
    default: return false;
    }
}

// Bytes of a stage of the tile kernel's ring at nc columns (MmaGeom<M, NC>::STAGE, nc at run time).
template <class M>
constexpr uint32_t mma_stage_bytes(uint32_t nc) {
    using G = MmaGeom<M, 1>;
    return (G::OFF_X + G::XR * ActTiles::run_bytes(nc, M::SUMS) + 127) / 128 * 128;
}

// The columns the tile kernel computes for ncols (ncols itself, or 4 for 3 and 8 for 5..7: the kernel of 4 or 8
// columns with the others zero, PAD). Measured on an H100 (forty-third session, docs/measurements/
// h100-session43-runs.txt, us per call): the kernels of 3, 5, 6 and 7 columns were slower than those of 4 and 8 for
// Q4_K and Q5_K (run 1, ten shapes: Q4_K 4096 x 14336 17.8 / 15.7 at 3 / 4 columns, 20.0, 17.5, 21.6 / 15.7 at 5, 6,
// 7 / 8). Padded against them (run 6, four shapes, geometric means; in brackets the least): Q4_K 1.08 [1.02] at 3
// columns, 1.21 [1.14] at 5, 1.12 [1.08] at 6, 1.33 [1.25] at 7; Q5_K 1.06, 1.17, 1.08, 1.25 [1.02 or more]; Q4_0 1.03
// [0.97], 1.05 [1.01], 1.01 [0.95], 1.08 [1.02]; IQ4_NL 1.02 [0.98], 1.05 [0.98], 1.02 [0.95], 1.09 [1.03]; Q8_0 1.01
// [1.00], 1.02 [1.00], 1.00 [0.98], 1.06 [1.02]; IQ4_XS 0.99-1.01 (its 5..7-column kernels are as fast as its 8).
// So 3, 5 and 7 padded for all but IQ4_XS, and 6 for Q4_K and Q5_K.
constexpr uint32_t tile_vectors(uint32_t type, uint32_t ncols) {
    if (type == KPR_TYPE_IQ4_XS) return ncols;
    if (ncols == 3) return 4;
    if (ncols == 5 || ncols == 7) return 8;
    if (ncols == 6 && (type == KPR_TYPE_Q4_K || type == KPR_TYPE_Q5_K)) return 8;
    return ncols;
}

// Whether the ring of 16 warps x 2 stages at 2..8 columns (and the kernel's static shared memory) fits
// within optin bytes of shared memory per block.
inline bool mma_wide_ring_fits(uint32_t type, uint32_t nc, uint32_t optin) {
    return on_mma_type(type, [&](auto m) {
        constexpr uint32_t W = 2 * kMmaWarps, S = 2;
        return uint64_t(W) * S * mma_stage_bytes<decltype(m)>(nc) + 8 * W * S <= optin;
    });
}

// Whether a one-column call of the tile kernel runs 16 warps per tile (two blocks of 512 threads per SM,
// two stages per warp) instead of kMmaWarps (tile_kernel = wide, or auto where it measured faster). Each
// warp then streams half as many chunks and an SM runs up to twice the warps: the one-column chunk costs
// about 350 instructions per warp (quantizing its 8 units' activations, 16 rows' decodes, 8 mma), which 16
// warps per SM issued at about half the rate the schedulers allow. Auto: Q4_0 where its tiles fit one wave
// or its rows have 12288+ columns. Measured on the H200 (docs/measurements/h200-session18-runs.txt run 2,
// the previous default -> this, us per call): 1024 x 4096 3.24 -> 2.25, 2048 x 8192 5.65 -> 4.45, 3584 x
// 18944 15.57 -> 12.45, 4096 x 4096 5.15 (8 warps) -> 5.01, 4096 x 14336 11.15 -> 11.1, 5120 x 13824 14.6
// -> 14.4, 8192 x 28672 46.9 -> 45.3-46.6 (run 1: 42.2), 4096 x 11008 9.87 -> 10.05 (the one loss);
// other types slower (their stages are larger, one block per SM, or their decode longer; run 1: IQ4_NL
// 4096 x 14336 11.7 -> 14.85, Q4_K 11.7 -> 13.85, Q8_0 16.2 -> 16.5), and over several waves of short rows
// (Q4_0 14336 x 4096 12.95 -> 14.0: one chunk per warp). IQ4_NL since its chained lookups (below).
// Q8_0, Q4_K and Q5_K where there is at most one tile per SM (one block per SM: their rings of 16 warps
// take 172 / 221 KiB) and rows of 4096+ columns; the previous default (Q8_0: the 8-warp tile kernel; Q4_K,
// Q5_K: the row kernel) -> 16 warps, run 5 of h200-session18-runs.txt: Q8_0 2048 x 14336 10.95 -> 8.4,
// 1536 x 8960 6.9 -> 5.1, 2048 x 8192 7.15 -> 5.7, 2048 x 5632 5.35 -> 4.6, 1024 x 4096 2.65 -> 2.5; Q4_K
// 10.9 -> 8.5, 5.8 -> 5.1, 7.0 -> 4.8, 5.55 -> 3.7, 3.2 -> 2.6; Q5_K 11.7 -> 9.5, 6.05 -> 5.9, 7.45 -> 6.25,
// 5.85 -> 5.1, 3.25 -> 2.85; slower on 2048 x 2048 (Q8_0 2.55 -> 2.7) and on 3584 x 18944 (224 tiles: Q4_K
// 14.75 -> 16.05, Q5_K 16.2 -> 21.6). IQ4_XS (0.85-1.04x) keeps 8 warps. IQ4_NL with its chained lookups as
// Q8_0 (run 3 of h200-session26-runs.txt, main -> this, us per call): 2048 x 14336 10.4 -> 8.0, 2048 x 8192
// 6.5 -> 4.8, 1536 x 8960 5.3 -> 4.8, 1024 x 4096 2.8 -> 2.5, 2048 x 5632 4.7 -> 3.6 (where main took the
// row kernel).
// At 2..8 columns (the quantizer, then the tile kernel with 16 warps and 2 stages, one block per SM:
// mma_wide_ring_fits): where there is at most one tile per SM, for all six types (auto), and wherever the
// ring fits (wide; IQ4_XS's 16-warp ring fits up to 4 columns). Measured on the H200 (run 1 of
// docs/measurements/h200-session19-runs.txt, --ab tile_kernel=auto,wide, 8 -> 16 warps, us per call):
// 1024 x 4096 .. 2048 x 14336 Q4_K, Q5_K, IQ4_NL 1.02-1.63x (Q4_K 2048 x 14336 at 8 columns 12.16 ->
// 8.35, IQ4_NL 1536 x 8960 at 4 columns 9.64 -> 6.11), Q8_0 0.99-1.30x, IQ4_XS 1.0-1.46x up to 4 columns;
// 4096 x 4096 and 4096 x 14336 (256 tiles) slower for every type (0.71-0.98).
inline bool mma_wide(uint32_t type, const GemvArgs &a, uint32_t ncols) {
    const uint32_t tiles = (a.rows + 15) / 16;
    if (ncols != 1)
        return (mma_mode_wide(a.mma_mode) || (a.mma_mode == kMmaAuto && tiles <= a.sms)) &&
               mma_wide_ring_fits(type, tile_vectors(type, ncols), a.smem_optin);
    if (mma_mode_wide(a.mma_mode)) return true;
    if (a.mma_mode != kMmaAuto) return false;
    switch (type) {
    case KPR_TYPE_Q4_0: return tiles <= 2 * a.sms || a.x.cols >= 12288;
    case KPR_TYPE_Q8_0:
    case KPR_TYPE_Q4_K:
    case KPR_TYPE_Q5_K:
    case KPR_TYPE_IQ4_NL: return tiles <= a.sms && a.x.cols >= 4096;
    default: return false;
    }
}

// Whether a one-column Q4_0 call takes the 8-warp tile kernel over several waves (auto): rows of 4097..8192
// columns, more than 2 x SMs and at most 4 x SMs tiles (before this, the row kernel or two tiles per block).
// Measured on the H200 (runs 4, 6 and 7 of h200-session26-runs.txt): with the 8-warp kernel up to 12287 columns
// (run 6) 5120 x 10240 was slower than the row kernel (11.8 -> 13.2 us), so not past 8192 columns. Main -> this
// (run 7, three passes alternating, us per call): where main took the row kernel 5120 x 5120 7.3 -> 6.0, 5632 x
// 5632 9.8 -> 6.4, 5120 x 8192 10.7 -> 8.7, 6144 x 6144 10.7 -> 7.2, 6144 x 8192 11.8 -> 9.6; where it took two
// tiles 7168 x 7168 12.0 -> 9.6, 7168 x 8192 12.8 -> 10.3, 8192 x 8192 13.4 -> 11.8, 8448 x 8192 (4 x SMs tiles)
// 13.9 -> 12.7. Unchanged: 5120 x 10240, 4096 x 8192, 4096 x 14336, 10240 x 10240 (640 tiles), 28672 x 8192 and
// 8192 x 28672 (0.995-1.00x).
inline bool q4_0_eight_warps(const GemvArgs &a) {
    const uint32_t tiles = (a.rows + 15) / 16;
    return a.x.cols > 4096 && a.x.cols <= 8192 && tiles > 2 * a.sms && tiles <= 4 * a.sms;
}

// Whether a one-column Q4_K or Q5_K call takes the 8-warp tile kernel over several waves (auto; for Q4_K the lanes
// kernel, which block_lanes = auto takes on more than 32 rows per SM, then declines: block_lanes_wanted). Q4_K: more than
// 2 x SMs and at most 4 x SMs 16-row tiles, rows of 5120+ columns and no more columns than rows; Q5_K: more than
// 2 x SMs and at most 3 x SMs tiles. Fitted to run 2 of h200-session27-runs.txt (`--ab tile_kernel=auto,on`,
// twice, us per call; auto there: Q4_K the lanes kernel, Q5_K the row kernel), narrowed for Q4_K after run 3.
// Q4_K with 8 warps, run 2: faster on 6144 x 5120 7.95 -> 6.8, 7168 x 5120 8.85 -> 7.8, 6144 x 6144 8.75 -> 7.75,
// 8192 x 5120 9.75 -> 9.1, 7168 x 7168 10.85 -> 10.3, 8192 x 8192 12.8 -> 12.3, 5120 x 5120 6.9 -> 6.7, and
// outside the rule 9216 x 9216 17.45 -> 16.15, 10240 x 10240 20.4 -> 19.2, 6144 x 4096 6.6 -> 6.2 (4096 columns);
// equal on 8192 x 6144 and 8192 x 3072; slower on 8192 x 4096 8.4 -> 8.75, 5120 x 8192 9.5-9.9 -> 9.9-10.1, 6144
// x 12288 14.25 -> 16.85, 4608 x 4608 6.1-6.3 -> 6.2-6.3, 10240 x 8192 15.1 -> 15.9, and past 5 x SMs tiles
// 0.85-0.99x (12288 x 12288 26.1 -> 25.9-26.9, 14336 x 4096 11.8 -> 13.05, 16384 x 16384 40.75 -> 47.7). Run 3
// (main -> a first rule of up to 5 x SMs tiles, twice, nine shapes not in run 2): 7680 x 7680 12.4 -> 11.55,
// 5632 x 5120 7.7 -> 6.7, 6656 x 6656 10.6 -> 9.4, 8448 x 8448 15.9 -> 13.1, 7168 x 6144 9.5 -> 9.0, 5376 x 5376
// 7.7 -> 7.0, but past 4 x SMs tiles 8704 x 6144 11.2 -> 12.85 and 10240 x 6144 12.5 -> 13.25 (9728 x 7168
// 13.8 -> 13.7), hence 4 x SMs. Q5_K faster within its window, run 2: 4608 x 4608 7.2-7.5 -> 6.4, 5120 x 5120
// 7.8 -> 7.1, 6144 x 4096 8.15 -> 7.85, 6144 x 5120 9.8 -> 8.55, 6144 x 6144 11.05 -> 9.65, 6144 x 12288 19.6 ->
// 15.55, 5120 x 8192 equal; run 3 (shapes not in run 2): 4352 x 4352 7.0 -> 6.0, 4864 x 4864 7.45 -> 6.7, 5632 x
// 5632 9.9 -> 8.15, 5888 x 5888 10.3 -> 8.85, 5120 x 6144 8.3 -> 7.8, 6144 x 8192 13.4 -> 11.5, 5376 x 14336 19.45
// -> 17.8; outside it mixed (run 2: 12288 x 8192 1.04x, 8192 x 3072 1.09x, 7168 x 5120 0.96x, 8192 x 4096 0.94x,
// 16384 x 16384 0.93x).
inline bool k_quant_eight_warps(uint32_t type, uint64_t rows, uint64_t cols, uint32_t sms) {
    const uint64_t tiles = (rows + 15) / 16;
    if (tiles <= 2ull * sms) return false;
    switch (type) {
    case KPR_TYPE_Q4_K: return tiles <= 4ull * sms && cols >= 5120 && cols <= rows;
    case KPR_TYPE_Q5_K: return tiles <= 3ull * sms;
    default: return false;
    }
}

// Whether a one-column IQ4_NL call takes the 8-warp tile kernel (auto; two blocks per SM, so a wave is 2 x SMs
// tiles) where its tiles fill a second wave to between a sixteenth and a half: more than 2 x SMs + SMs / 8 and
// at most 3 x SMs tiles. Measured on the H200 (run 4 of h200-session26-runs.txt, tile_kernel = off -> on, twice,
// us per call): 4608 x 12288 13.8 -> 13.7 (288 tiles), 4864 x 14336 15.9 -> 15.6 (304), 5120 x 5120 7.8 -> 6.8
// (320), 5120 x 8192 10.2 -> 9.5, 5120 x 13824 16.2 -> 15.4, 5120 x 17408 19.8 -> 19.55, 5120 x 20480 22.8 ->
// 21.9, 5120 x 27648 29.7 -> 29.6, 6144 x 6144 10.1 -> 9.0 (384), 6144 x 12288 15.3 -> 14.8, 6144 x 16384 21.05
// -> 18.6; slower just past one wave (4352 x 14336, 272 tiles: 14.8 -> 15.5) and on 7168 x 7168 (448: 11.45 ->
// 12.1), 8192 x 8192 (512: 13.8 -> 14.4), 12288 x 12288 (768: 26.2 -> 26.8). Against main (run 5): 1.01-1.15x on
// the shapes above and on 5888 x 8192 (11.2 -> 10.1) and 5376 x 14336, 0.99x on 5120 x 27648 (29.6 -> 30.0).
inline bool iq4_nl_eight_warps(const GemvArgs &a) {
    const uint32_t tiles = (a.rows + 15) / 16;
    return tiles > 2 * a.sms + a.sms / 8 && tiles <= 3 * a.sms;
}

// Whether a one-column call that takes two tiles per block (mma_two_tiles, auto) runs them with 8 warps and two
// stages per warp (a 90 KiB ring for Q4_0: two blocks per SM) instead of 16 warps (one block per SM). Each warp
// then streams twice as many chunks, and an SM holds two blocks: a second block of the same call, or the next
// call's block, which requests its first chunks while this one finishes. Q4_0, Q4_K and IQ4_NL where there are
// more than half as many 32-row blocks as SMs and at most two per SM: on rows of up to 16 chunks of 256 weights
// (Q4_0 and IQ4_NL from 0.7 blocks per SM; IQ4_NL also up to 24 chunks in one wave), and on rows of up to 32
// chunks with at least 1.75 blocks per SM. Fitted to run 3 of h200-session30-runs.txt and checked in run 4 on 33
// shapes (19 not fitted), the previous auto -> this, us per call: Q4_0 4096 x 4096 4.2 -> 3.9, 8192 x 4096 8.1
// -> 6.95, 8192 x 2048 5.8 -> 4.1, 7168 x 4096 7.5 -> 6.3, 8192 x 8192 11.9 -> 11.05; Q4_K 3072 x 3072 4.2 ->
// 3.1, 5120 x 4096 6.6 -> 4.65, 2304 x 4096 4.4 -> 3.1, 8192 x 6144 10.6 -> 9.7; IQ4_NL 4096 x 4096 4.9 -> 4.0,
// 4096 x 6144 7.5 -> 6.3, 7168 x 4096 8.95 -> 7.1, 8192 x 8192 13.8 -> 11.8. Left out where it measured slower:
// one block per SM on rows past 16 chunks (Q4_0 4096 x 8192 6.9 -> 8.0, 4096 x 14336 10.0 -> 12.8), IQ4_NL past
// 16 chunks over more than one wave (4608 x 4608 6.2 -> 7.6, 5120 x 5120 6.8 -> 7.55), Q4_0 and IQ4_NL on 80
// blocks (2560 x 2560 2.5 -> 2.75, 3.25 -> 3.4) and 64 (IQ4_NL 2048 x 4096 3.4 -> 3.7), several waves (Q4_K 14336
// x 4096 11.7 -> 12.8) and Q4_K's rows of 28672 columns (8192 x 28672 37.7 -> 38.7-39.4).
inline bool mma_two_tiles_eight_warps(uint32_t type, uint64_t rows, uint64_t cols, uint32_t sms) {
    const uint64_t blocks = (rows + 31) / 32, chunks = cols / 256;
    if (sms == 0 || 2 * blocks <= sms || blocks > 2ull * sms) return false;
    const bool dense = 4 * blocks >= 7ull * sms && chunks <= 32;
    const bool most = 10 * blocks >= 7ull * sms; // at least 0.7 blocks per SM
    switch (type) {
    case KPR_TYPE_Q4_K: return chunks <= 16 || dense;
    case KPR_TYPE_Q4_0: return (most && chunks <= 16) || dense;
    case KPR_TYPE_IQ4_NL: return (most && (chunks <= 16 || (chunks <= 24 && blocks <= sms))) || dense;
    default: return false;
    }
}
inline bool mma_two_tiles_eight_warps(uint32_t type, const GemvArgs &a) {
    return a.mma_mode == kMmaAuto && mma_two_tiles_eight_warps(type, a.rows, a.x.cols, a.sms);
}

// Whether a one-column call of the tile kernel takes two tiles (32 rows) per block: 16 warps, one block per SM
// (its ring of 16 warps x 2 stages x 5.6 KiB for Q4_0; 8 warps and two blocks per SM where
// mma_two_tiles_eight_warps says so, above), each chunk's activations quantized once for 32 rows
// instead of 16 (the quantization is about a third of a 16-row chunk's instructions). Auto: Q4_0 where the
// 32-row blocks fill at most two waves of the SMs to at least three quarters (the last wave included), fitted
// to these measurements on the H200 (run 2 of h200-session21-runs.txt, --ab tile_kernel=auto,wide32, us per
// call): faster on 4096 x 14336 10.8 -> 10.0 (0.68 -> 0.73 of the read bandwidth), 4096 x 11008 9.9 -> 8.5,
// 4096 x 4096 4.95 -> 4.2, 3584 x 18944 12.9 -> 11.9 and 8192 x 28672 43.6 -> 37.8 (128, 112 and 256 blocks);
// slower where the blocks leave SMs idle or run several waves of short rows: 2048 x 14336 6.5 -> 7.9 (64
// blocks), 5120 x 13824 13.85 -> 16.3 (160), 14336 x 4096 12.6 -> 15.4 (448); not where q4_0_eight_warps takes
// the call (since the twenty-sixth session). Q8_0's ring of 32 rows does not fit.
// IQ4_NL (since its chained lookups: no spills) where the blocks fill as for Q4_0 and the rows have 3072..4096
// or 16384+ columns. Against the row kernel it is slower at 11008-14336 columns (run 2 of
// h200-session26-runs.txt, --ab tile_kernel=auto,wide32, twice: 4096 x 14336 11.75 -> 12.55, 4096 x 11008
// 9.75 -> 10.5, 8192 x 8192 13.8 -> 16.2) and faster on long and short rows; main -> this (run 3, three passes
// alternating): 3584 x 18944 19.0 -> 13.9, 8192 x 28672 50.7 -> 41.1, 7168 x 18432 31.0 -> 27.9 (not among the
// fitted shapes), 4096 x 4096 5.4 -> 4.8, 3584 x 3584 4.5 -> 4.3, 8192 x 3072 8.3 -> 8.0 (8 warps per tile
// measured 7.5 there). On rows of 2048 columns (8 chunks: half the warps idle) 8 warps per tile are faster
// (8192 x 2048: 5.95 against 6.45). Since iq4_nl_product's ALU-pipe cut (forty-fifth session) also on rows of
// 11008-16383 columns: on an H100 (runs 3-4 of h100-session45-runs.txt, --ab tile_kernel=auto,wide32, us per call)
// 4096 x 14336 14.0 -> 13.1 (0.76 -> 0.81 of the read bandwidth), 4096 x 11008 11.3 -> 10.9; the other shapes of
// those runs keep what they took (5120 x 13824, two waves: 17.7 against 21.2; 2048 x 14336, 64 blocks: 9.3 against
// 9.9). Not yet measured on the H200.
// Q4_K (with deferred folds) where the 32-row blocks fill one wave to at least three quarters: run 2 of
// h200-session22-runs.txt, the previous default (the row kernel; the lanes kernel on 8192 x 28672, 14336 x
// 4096 and 5120 x 13824) -> two tiles, twice, us per call: 4096 x 14336 11.7 -> 10.74 (0.63 -> 0.68),
// 4096 x 11008 10.0 -> 9.1, 4096 x 4096 5.3 -> 4.37, 3584 x 18944 14.8 -> 12.35; slower on 8192 x 28672 (two
// waves: 37.5 -> 38.35), 2048 x 14336 7.65 -> 8.35, 5120 x 13824 13.9 -> 18.3, 14336 x 4096 11.7 -> 16.3. Q5_K
// only when asked: 0.97-0.98x on 4096 x 14336 and 4096 x 11008, 1.04-1.10x on 4096 x 4096, 3584 x 18944,
// 8192 x 28672, 0.66-0.82x on the other three.
// Q4_0 also on 5/12..1/2 as many 32-row blocks as SMs (55..66 of 132: half the SMs idle) with rows of up to 8192
// columns, where two tiles per block beat 16 warps per 16-row tile on all the SMs: run 6 of
// h200-session30-runs.txt (--ab tile_kernel=auto,wide32, us per call): 2048 x 1024 1.95 -> 1.71, 2048 x 2048 2.35
// -> 2.07, 2048 x 4096 3.02 -> 2.73, 2048 x 8192 4.64 -> 4.13, 2112 x 4096 3.08 -> 2.77, 1792 x 4096 2.79 -> 2.64;
// not on longer rows or fewer blocks (2048 x 14336 6.4 -> 7.9, 1536 x 8960 4.19 -> 4.92, 1280 x 5120 2.93 -> 3.3,
// 1024 x 4096 2.15 -> 2.53). Q4_K and IQ4_NL there: mixed or slower (Q4_K 2048 x 5120 3.25 -> 3.6, IQ4_NL 2048 x
// 8192 4.74 -> 5.54).
inline bool mma_two_tiles(uint32_t type, const GemvArgs &a, uint32_t ncols) {
    if (ncols != 1 || a.sms == 0) return false;
    if (a.mma_mode == kMmaWide32) return on_mma_type(type, [](auto m) { return mma_two_tile_ring_fits<decltype(m)>(); });
    if (a.mma_mode != kMmaAuto) return false;
    if (mma_two_tiles_eight_warps(type, a)) return true;
    const uint32_t blocks = (a.rows + 31) / 32, waves = (blocks + a.sms - 1) / a.sms;
    switch (type) {
    case KPR_TYPE_Q4_0:
        return (waves <= 2 && 4 * blocks >= 3 * waves * a.sms && !q4_0_eight_warps(a)) ||
               (2 * blocks <= a.sms && 12 * blocks >= 5 * a.sms && a.x.cols <= 8192);
    case KPR_TYPE_Q4_K: return waves == 1 && 4 * blocks >= 3 * a.sms;
    case KPR_TYPE_IQ4_NL:
        return waves <= 2 && 4 * blocks >= 3 * waves * a.sms && ((a.x.cols >= 3072 && a.x.cols <= 4096) || a.x.cols >= 11008);
    default: return false;
    }
}

// Whether the tile kernel serves this plain GEMV (a.sm90: compute capability 9.0+, aligned rows), from
// H200 measurements, the tile kernel forced on against the row kernels in one lease, whole calls in us
// (docs/cuda-tuning-log.md "The tensor-core tile kernel", `kpr_cuda_bench --tile-vs-row`). Its time hardly
// grows with the column count; the row kernels' does.
// Q8_0: while all 16-row tiles fit in one wave (two blocks per SM) faster from 2 columns on (4096 x
// 14336: 19.3 -> 19.0 at 2, 32.4 -> 19.8 at 8; 4096 x 4096 7.7 -> 7.4, 13.1 -> 7.3) and slower at one
// (18.0 -> 18.7). Over several waves each tile pays its ramp, so short rows need more columns: from 5
// on with 2-4 chunks per warp (14336 x 4096: 23.6 -> 22.9 at 5, 21.8 -> 22.7 at 4; 28672 x 8192: 76.1
// -> 69.3 at 5, 69.8 -> 68.2 at 4), from 3 on with long rows (8192 x 28672, 14 chunks per warp: 70.8 ->
// 67.4 at 3, 67.1 -> 66.9 at 2).
// Q4_0, Q4_K, IQ4_NL, IQ4_XS, Q5_K: from 2 columns. Since the tensor copies (run 4 of
// h200-session11-runs.txt) faster at 2 and 3 columns on all three shapes measured, 1.04-1.66x (2 columns,
// 4096 x 14336: Q4_0 14.8 -> 12.9, Q4_K 16.6 -> 13.95, IQ4_NL 15.4 -> 14.4, IQ4_XS 17.2 -> 15.5, Q5_K
// 17.5 -> 15.8; 14336 x 4096 and 8192 x 28672 1.06-1.22x), where before them the 4-bit types took it
// from 3 columns (the row kernel as fast at 2: Q4_0 14.9 vs 15.7) and Q5_K from 4 (at 3 slower on three
// of six shapes).
// One column (the activations quantized in the kernel, one kernel per call; with tensor copies and
// deferred folds, run 3 of h200-session11-runs.txt, 4509 GB/s, row kernels -> tile kernel in us): Q8_0 in
// one wave or on long rows (4096 x 14336 18.05 -> 16.1, 4096 x 4096 6.9 -> 5.7, 2048 x 2048 3.4 -> 2.4,
// 5120 x 13824 25.1 -> 23.7, 8192 x 28672 64.2 -> 62.95; short rows over several waves keep the row kernel:
// 14336 x 4096 18.4 -> 20.1, 28672 x 8192 60.5 -> 62.3). Q4_0 on rows up to 4096 columns (14336 x 4096
// 13.1 -> 12.7, 4096 x 4096 5.5 -> 4.95, 2048 x 2048 3.1 -> 2.2; 4096 x 14336 11.15 -> 13.0, 28672 x 8192
// 36.5 -> 38.45; mixed on longer rows: 5120 x 13824 14.65 -> 13.7, 8192 x 28672 46.7 -> 46.4). IQ4_NL in
// one wave on rows up to 4096 columns (4096 x 4096 5.9 -> 5.5, 2048 x 2048 3.5 -> 2.4; 14336 x 4096 14.6 ->
// 15.05, 4096 x 14336 12.0 -> 13.95, 28672 x 8192 37.35 -> 46.4; 8192 x 28672 49.65 -> 43.5 left out);
// Q4_0 also where q4_0_eight_warps says so, Q4_K and Q5_K where k_quant_eight_warps does.
// IQ4_NL: since its chained lookups as Q4_0, on rows up to 4096 columns in any number of waves (run 3 of
// h200-session26-runs.txt, main -> this, us per call: 14336 x 4096 14.0 -> 13.9, 18944 x 3584 16.2 -> 15.1,
// 10240 x 2560 8.4 -> 7.7, 5632 x 2048 5.5 -> 3.9, 8192 x 2048 6.5 -> 5.9; 3072 x 3072 4.0 -> 4.1, the same
// kernel) and where iq4_nl_eight_warps, mma_wide or mma_two_tiles take it.
// IQ4_XS everywhere on aligned rows (faster on all seven shapes, 1.09-1.64x); on rows that are not
// (chunks of one block, MmaOneBlock) at one column where there is at most one tile per SM (run 1 of
// h200-session20-runs.txt, the row kernel -> the tile kernel: 1536 x 8960 11.8 -> 8.9 us, 4096 x 11008 15.4 ->
// 17.7), at 2..8 columns everywhere (against the row and 4-row kernels, tile_kernel = off: 4096 x 11008
// 1.03x at 2 columns, 1.19 at 3, 2.04 at 8; 1536 x 8960 1.43-1.80x). Q4_0, Q8_0, Q4_K and Q5_K also where mma_wide takes
// them (16 warps per tile). Q4_K and Q5_K on small matrices (2048 x 2048: 3.3 -> 2.4, 3.45 -> 2.6; 4096 x
// 4096 5.3 -> 5.8, 5.55 -> 6.5, slower on every larger shape measured then), and over several waves where
// k_quant_eight_warps says so (twenty-seventh session).
template <class M>
inline bool mma_serves(const GemvArgs &a, uint32_t ncols) {
    if (!a.sm90 || a.ids != nullptr || a.xq_n == 0 || a.sms == 0 || ncols < 1 || a.mma_mode == kMmaOff) return false;
    if (!a.aligned && !mma_takes_unaligned_rows<M>()) return false;
    if (a.mma_mode == kMmaOn || mma_mode_wide(a.mma_mode)) return true;
    if (ncols == 1) {
        const bool one_wave = (a.rows + 15) / 16 <= 2 * a.sms;
        switch (M::Block::TYPE) {
        case KPR_TYPE_Q8_0: return one_wave || a.x.cols >= 12288;
        case KPR_TYPE_Q4_0:
            return a.x.cols <= 4096 || q4_0_eight_warps(a) || mma_wide(M::Block::TYPE, a, 1) || mma_two_tiles(M::Block::TYPE, a, 1);
        case KPR_TYPE_IQ4_NL:
            return a.x.cols <= 4096 || iq4_nl_eight_warps(a) || mma_wide(M::Block::TYPE, a, 1) || mma_two_tiles(M::Block::TYPE, a, 1);
        case KPR_TYPE_IQ4_XS: return a.aligned || (a.rows + 15) / 16 <= a.sms; // (unaligned: mma_takes_unaligned_rows)
        default: // Q4_K, Q5_K
            return (one_wave && a.x.cols <= 2048) || k_quant_eight_warps(M::Block::TYPE, a.rows, a.x.cols, a.sms) ||
                   mma_wide(M::Block::TYPE, a, 1) || mma_two_tiles(M::Block::TYPE, a, 1);
        }
    }
    if constexpr (M::Block::TYPE != KPR_TYPE_Q8_0) return true; // 2..8 columns
    if ((a.rows + 15) / 16 <= 2 * a.sms) return true;
    const uint32_t chunks_per_warp = a.nb / M::CB / kMmaWarps;
    return ncols >= 5 || (ncols >= 3 && chunks_per_warp >= 8);
}

// mma_serves on the runtime weight type (false: no tile kernel for it), for offers' reasons.
inline bool mma_serves_type(uint32_t type, const GemvArgs &a, uint32_t ncols) {
    return on_mma_type(type, [&](auto m) { return mma_serves<decltype(m)>(a, ncols); });
}

// Sets kernel k's dynamic shared memory allowance to dyn bytes once per device (`set`: the caller's flags,
// one array per kernel instance).
template <class K>
cudaError_t allow_mma_smem(K k, size_t dyn, std::atomic<bool> (&set)[64]) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= 64 || !set[dev].load(std::memory_order_relaxed)) {
        e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn));
        if (e != cudaSuccess) return e;
        if (dev >= 0 && dev < 64) set[dev].store(true, std::memory_order_relaxed);
    }
    return cudaSuccess;
}

// Launches the quantizer (into the tile layout, in x's scratch) and the tile kernel for NC columns.
// cudaErrorNotSupported, with nothing launched: not this shape or device (the caller takes the row kernel).
// Whether the tile kernel (W warps, S stages, dyn bytes of ring) fits this plain GEMV: whole chunks per
// row, dense rows, the ring and the kernel's static shared memory within the opt-in maximum.
template <class M, int W, int S>
bool mma_fits(const GemvArgs &a, size_t dyn) {
    const bool rows_ok = mma_piece_copies<M>() ? reinterpret_cast<uintptr_t>(a.w) % 8 == 0 && a.row_bytes % 8 == 0 : a.aligned;
    return rows_ok && a.x.vbase == 0 && a.nb % M::CB == 0 && a.row_bytes == uint64_t(a.nb) * M::Block::BS &&
           a.x.cols == a.nb * M::Block::QK && dyn + 8 * W * S <= a.smem_optin;
}

// Launches the tile kernel <M, NC, W, S, FX, EARLY, DEFER> (ka: its arguments, dyn: bytes of ring) over
// the tiles of a: the weights by one tensor copy per chunk of 16 rows where a tensor map of them can be
// made (tma_map_2d), else by one bulk copy per row. Measured on the H200 (run 2 of h200-session11-runs.txt,
// one column, alternating twice): a warp issues its 16 bulk copies in a loop of about 9 instructions per
// copy (the copy takes uniform registers), so one tensor copy per chunk shortens every chunk's work: Q8_0
// 4096 x 14336 16.95 -> 16.55 us, Q4_0 13.3 -> 12.75, IQ4_NL 15.2 -> 13.7, Q4_K 16.25 -> 14.6, Q5_K 17.9
// -> 15.05, IQ4_XS 17.25 -> 14.8 (14336 x 4096: Q8_0 21.45 -> 20.3, Q4_0 14.4 -> 12.7). With the map's L2
// promotion at 256 bytes: 0.1-0.4 us slower than none.
// allow: the kernel's dynamic shared memory allowance (set once per device: the most any call asks), at
// least dyn.
template <class M, int NC, int W, int S, bool FX, bool EARLY = false, bool DEFER = false, int TR = 1, bool XFIRST = false,
          bool PAD = false>
cudaError_t launch_tile_kernel(const GemvArgs &a, const GemvKArgs &ka, size_t dyn, size_t allow, bool pdl,
                               cudaStream_t stream) {
    using G = MmaGeom<M, NC, FX, TR>;
    TmaMap wmap{};
    auto k = gemv_mma_kernel<M, NC, W, S, FX, EARLY, DEFER, false, TR, XFIRST, PAD>;
    bool tma = false;
    if constexpr (!mma_piece_copies<M>()) { // (pieces: no map describes them)
        tma = tma_map_2d(wmap, a.w, a.row_bytes, a.rows, G::CHUNK, G::ROWS);
        if (tma) k = gemv_mma_kernel<M, NC, W, S, FX, EARLY, DEFER, true, TR, XFIRST, PAD>;
    }
    static std::atomic<bool> set[2][64]; // per kernel and device: the dynamic shared memory allowance is set
    const cudaError_t e = allow_mma_smem(k, allow, set[tma ? 1 : 0]);
    if (e != cudaSuccess) return e;
    return launch_pdl(k, dim3((a.rows + G::ROWS - 1) / G::ROWS), dim3(32 * W), dyn, pdl, stream, ka, wmap);
}

// A 16-warp ring (mma_wide) padded to half of the SM's shared memory, so that two blocks never share an SM.
inline size_t mma_ring_one_block_per_sm(size_t ring, const GemvArgs &a) {
    return a.smem_sm / 2 > ring ? a.smem_sm / 2 : ring;
}

// W > kMmaWarps (mma_wide): one block per SM is meant, so a ring that would let two blocks share an SM
// is padded past half of the SM's shared memory (mma_ring_one_block_per_sm). Measured on the H200: Q4_0 at
// 4 columns, whose 16-warp blocks (64 registers, 112 KiB) fit two per SM, took 7.3 us on 2048 x 8192 and 11.2
// on 2048 x 14336 without the padding (run 1 of h200-session19-runs.txt; 5.5 and 7.5 at 2 columns), 5.6 and
// 7.65 with it (run 2).
// PAD: the call has fewer columns than NC (tile_vectors).
template <class M, int NC, int W = kMmaWarps, int S = mma_stages<M, NC, W>(), bool PAD = false>
cudaError_t launch_mma(const GemvArgs &a, bool pdl, cudaStream_t stream) {
    static_assert(mma_stage_bytes<M>(NC) == MmaGeom<M, NC>::STAGE, "mma_stage_bytes");
    const size_t ring = static_cast<size_t>(W) * S * MmaGeom<M, NC>::STAGE;
    const size_t dyn = W > kMmaWarps ? mma_ring_one_block_per_sm(ring, a) : ring;
    // x holds ncols vectors (PAD: fewer than NC; the layout has NC, the ones past ncols zero)
    const size_t ncols = a.x.cols == 0 ? 0 : a.xq_n / a.x.cols;
    if (ncols < 1 || (PAD ? ncols >= size_t(NC) : ncols != size_t(NC)) || a.xq_n != ncols * a.x.cols ||
        act_tiles_bytes(NC, a.x.cols, M::SUMS) > a.xq_bytes || !mma_fits<M, W, S>(a, dyn))
        return cudaErrorNotSupported;
    const size_t n = size_t(NC) * a.x.cols;
    const cudaError_t e =
        launch_pdl(quantize_act_q8_1_tiles<M::SUMS, M::PERM>, dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0,
                   pdl, stream, a.xf, static_cast<uint32_t>(NC), static_cast<uint32_t>(ncols), a.x.cols,
                   reinterpret_cast<uint8_t *>(const_cast<int8_t *>(a.x.q)));
    if (e != cudaSuccess) return e;
    GemvKArgs ka = a;
    if constexpr (PAD) ka.n_used = static_cast<uint32_t>(ncols); // the columns written (gemv_mma_kernel)
    return launch_tile_kernel<M, NC, W, S, false, false, false, 1, false, PAD>(a, ka, dyn, dyn, pdl, stream);
}

// Whether the one-column tile kernel (with early refills) requests only its first stage's weights before the
// dependency wait, and the others' after every stage's activations (XFIRST): on rows of up to 4096 columns (16
// chunks of 256 weights, at most two per warp), 4096 rows or more. A warp's first chunk waits on its activations,
// which otherwise queue behind the second stage's weights. Measured on the H200 (run 7 of h200-session31-runs.txt,
// main -> this with rows of up to 4096 columns and any number of rows, two passes alternating, us per call): Q4_0
// 11008 x 4096 10.6 -> 8.8, 10240 x 2560 7.6 -> 6.4, 8192 x 3072 6.0 -> 5.4, 18944 x 3584 13.8 -> 12.3, 28672 x 4096
// 21.2 -> 20.1; Q4_K 8192 x 3072 6.7 -> 5.6, 4096 x 4096 4.2 -> 3.85; IQ4_NL 8192 x 3072 7.3 -> 6.0, 28672 x 4096
// 23.5 -> 21.7, 18944 x 3584 15.1 -> 14.15, 11008 x 4096 11.1 -> 10.7; Q8_0 4096 x 3072 4.9 -> 4.6, 4096 x 4096 5.7
// -> 5.4; 43 of 70 cases within 2.5%; slower IQ4_NL 4096 x 3072 and 5632 x 2048 (0.97x), and the small matrices
// that the 4096 rows leave out: 2560 x 2560 (IQ4_NL, Q8_0 0.94x, Q4_K 0.97x; Q4_0 1.04x), 3584 x 3584 (IQ4_NL 0.95x,
// Q4_0 0.97x; Q8_0 1.09x), 1024 x 1024 (IQ4_NL, Q5_K 1.6 -> 1.7 us). On longer rows it was mixed (runs 5 and 6, an
// experiment switch in one build: faster Q4_K, IQ4_NL, Q5_K 2048 x 8192, slower Q4_0 2048 x 8192, Q8_0 2048 x 14336
// and the targets' 4096 x 14336, Q4_0 10.0 -> 10.5, Q8_0 16.3 -> 16.7), so not there.
inline bool mma_x_first(const GemvArgs &a) {
    return a.x.cols <= 4096 && a.rows >= 4096;
}

// One column, the activations quantized in the tile kernel (FX): one kernel per call (the prepared scratch,
// kept for the fallback, is not read).
// cudaErrorNotSupported, with nothing launched, where the float activations are not 16-byte aligned (the
// ring copies them in bulk) or the shape does not fit.
// DEFER: where the type gives its units' scales, except IQ4_XS with 16 warps (tile_kernel = wide): without
// early refills and under the 64 registers of two such blocks per SM it spilled twice as much (100 bytes instead
// of 52; run 4 of h200-session22-runs.txt; its racecheck reports: docs/cuda-tuning-log.md, "Proxy fences").
template <class M, int W = kMmaWarps, int S = mma_stages<M, 1, W, true>(), bool EARLY = fx_refills_early<M>(),
          bool DEFER = M::DEFER && (W <= kMmaWarps || fx_refills_early<M>()), int TR = 1>
cudaError_t launch_mma_fx(const GemvArgs &a, bool pdl, cudaStream_t stream) {
    const size_t ring = static_cast<size_t>(W) * S * MmaGeom<M, 1, true, TR>::STAGE;
    // Q4_0, 16 warps, at most one tile per SM: padded as in launch_mma, so that two blocks never share an
    // SM. Measured on the H200 (run 2 of h200-session19-runs.txt, against the unpadded build, us per call):
    // Q4_0 2048 x 14336 7.6 -> 6.5, 1024 x 4096 2.3 -> 2.2, 1536 x 8960 4.5 -> 4.3, 2048 x 8192 4.5 -> 4.7;
    // Q4_K (whose 16-warp ring is as small) slower: 2048 x 8192 4.8 -> 5.6, 1536 x 8960 5.1 -> 5.35.
    constexpr bool kPad = W > kMmaWarps && M::Block::TYPE == KPR_TYPE_Q4_0;
    const size_t pad = kPad ? mma_ring_one_block_per_sm(ring, a) : ring;
    const size_t dyn = (a.rows + 15) / 16 <= a.sms ? pad : ring;
    if (a.xf == nullptr || reinterpret_cast<uintptr_t>(a.xf) % 16 != 0 || a.xq_n != a.x.cols || !mma_fits<M, W, S>(a, pad))
        return cudaErrorNotSupported;
    GemvKArgs ka = a;
    ka.x.f = a.xf;
    if constexpr (EARLY)
        if (mma_x_first(a)) return launch_tile_kernel<M, 1, W, S, true, EARLY, DEFER, TR, true>(a, ka, dyn, pad, pdl, stream);
    return launch_tile_kernel<M, 1, W, S, true, EARLY, DEFER, TR>(a, ka, dyn, pad, pdl, stream);
}

// NC columns, with the ring depth for the number of waves: where every tile is resident at once (two
// blocks per SM), mma_stages deep; over several waves 2 stages, so that as many blocks as fit share a
// multiprocessor (measured on the H200, 14336 x 4096 at 3..6 columns, Q4_0: 15.4-17.0 us with 2 stages,
// 19.8-20.7 with mma_stages). For Q8_0 the two are the same kernel.
template <class M, int NC, bool PAD = false>
cudaError_t launch_mma_waves(const GemvArgs &a, bool pdl, cudaStream_t s) {
    if (mma_wide(M::Block::TYPE, a, NC)) {
        const cudaError_t e = launch_mma<M, NC, 2 * kMmaWarps, 2, PAD>(a, pdl, s);
        if (e != cudaErrorNotSupported) return e;
    }
    if ((a.rows + 15) / 16 <= 2 * a.sms) return launch_mma<M, NC, kMmaWarps, mma_stages<M, NC, kMmaWarps>(), PAD>(a, pdl, s);
    return launch_mma<M, NC, kMmaWarps, 2, PAD>(a, pdl, s);
}

// NC (2..8) columns: as the tile kernel of tile_vectors(NC) columns, with the others zero where that is more (PAD).
template <class M, int NC>
cudaError_t launch_mma_cols(const GemvArgs &a, bool pdl, cudaStream_t s) {
    constexpr int P = static_cast<int>(tile_vectors(M::Block::TYPE, NC));
    if constexpr (P != NC) return launch_mma_waves<M, P, true>(a, pdl, s);
    else return launch_mma_waves<M, NC>(a, pdl, s);
}

// On the runtime column count, 1..8.
template <class M>
cudaError_t launch_mma_nc(const GemvArgs &a, uint32_t ncols, bool pdl, cudaStream_t s) {
    switch (ncols) {
    case 1:
        if constexpr (mma_two_tile_ring_fits<M>()) {
            if (mma_two_tiles(M::Block::TYPE, a, 1)) { // (the 8-warp ring is the smaller: where it does not fit, neither does 16)
                const cudaError_t e = mma_two_tiles_eight_warps(M::Block::TYPE, a)
                                          ? launch_mma_fx<M, kMmaWarps, 2, true, true, 2>(a, pdl, s)
                                          : launch_mma_fx<M, 2 * kMmaWarps, 2, true, true, 2>(a, pdl, s);
                if (e != cudaErrorNotSupported) return e;
            }
        }
        if (mma_wide(M::Block::TYPE, a, 1)) return launch_mma_fx<M, 2 * kMmaWarps, 2>(a, pdl, s);
        if ((a.rows + 15) / 16 <= 2 * a.sms) return launch_mma_fx<M>(a, pdl, s);
        return launch_mma_fx<M, kMmaWarps, 2>(a, pdl, s);
    case 2: return launch_mma_cols<M, 2>(a, pdl, s);
    case 3: return launch_mma_cols<M, 3>(a, pdl, s);
    case 4: return launch_mma_cols<M, 4>(a, pdl, s);
    case 5: return launch_mma_cols<M, 5>(a, pdl, s);
    case 6: return launch_mma_cols<M, 6>(a, pdl, s);
    case 7: return launch_mma_cols<M, 7>(a, pdl, s);
    case 8: return launch_mma_cols<M, 8>(a, pdl, s);
    default: return cudaErrorNotSupported;
    }
}

} // namespace kpr::cuda

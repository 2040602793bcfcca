// kpr_cuda_gemv.cuh -- the row-streaming GEMV / grouped-GEMV kernel every block type plugs into.
//
// A warp owns R rows. It walks them chunk by chunk (T::CB blocks of each row): the chunk's bytes are
// fetched with 16-byte streaming loads (one chunk ahead, in registers), written to the warp's slice of
// shared memory, and decoded from there, so the 2-byte-aligned GGUF blocks never dictate the width of
// a global load. Each lane accumulates its items in a fixed order; a butterfly shuffle reduction ends
// the row. Grouped GEMV uses the same kernel with blockIdx.y selecting (column, expert slot); the expert
// id is read on the device. (On 8.0+ the chunks travel through a cp.async ring instead of registers.)
// The q8_1 activations are read from global memory through L1, or at one column, per type
// (XSource), from shared memory: staged chunk by chunk with the weights, or the whole vector copied
// once per block.
#pragma once

#include "kpr_cuda_act.cuh"
#include "kpr_cuda_blocks.cuh"
#include "kpr_cuda_gemv_args.cuh"
#include "kpr_cuda_mma.cuh"
#include "kpr_cuda_util.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

namespace kpr::cuda {

constexpr int kGemvWarps = 4;

// Bulk copies for the weight ring (compute capability 9.0): one lane issues one copy-engine instruction
// per row chunk, completing on a per-stage mbarrier, instead of a 16-byte cp.async per lane. Compiled in
// where they measured faster on the H200 than the build before them (the two alternating twice in one
// lease, us per call, 4096 x 14336; docs/cuda-tuning-log.md "Bulk copies for the weight ring"): the row
// kernel of the plain GEMV at 1-3 columns (two rows per warp): Q8_0 18.8 -> 18.3 at one column, 20.3 ->
// 19.5 at two, 21.3 -> 20.7 at three; Q4_0 16.1 -> 15.0 at two; IQ4_XS 18.5 -> 17.1 at two (at three
// columns only the 32-weight types run the row kernel). Not for Q2_K and IQ3_S at one column, Q5_0 at one
// and two, Q6_K at two (0.1-0.4 us slower or no faster), not from 4 columns on (with the copies compiled
// in, Q8_0 at 8 columns took 34.3 us against 32.5), not the grouped GEMV (one row per warp; MoE slower:
// Q4_K at 4 columns 17.0 -> 18.2); the 4-row kernel only for Q6_K (3 columns 28.1 -> 25.7; the other
// types up to 1.2 us slower). IQ3_S at one column only in the 16-warp kernel with the whole vector (XB): there
// faster on four of ten shapes and level on six (run 1 of h200-session34-runs.txt, us per call: 4096 x 14336
// 14.8 -> 14.5, 2048 x 14336 12.5 -> 12.0, 2048 x 8192 8.4 -> 7.9, 4096 x 4096 7.2 -> 6.8); in its other kernels
// slower (run 5 of h200-session32-runs.txt: 14336 x 4096 20.05 -> 20.95, 8192 x 8192 23.75 -> 23.9).
template <class T, int NC, int R, bool XB = false>
constexpr bool bulk_copies_rows() {
    return KPR_BULK_COPY && !T::FLOAT_X && R == 2 && (NC <= 2 || (NC == 3 && T::QK == 32)) &&
           !(NC == 1 && (T::TYPE == KPR_TYPE_Q2_K || (T::TYPE == KPR_TYPE_IQ3_S && !XB))) &&
           !(NC <= 2 && T::TYPE == KPR_TYPE_Q5_0) && !(NC == 2 && T::TYPE == KPR_TYPE_Q6_K);
}
constexpr bool bulk_copies_quad(uint32_t type) { return KPR_BULK_COPY && type == KPR_TYPE_Q6_K; }

// A row chunk of CB_ blocks of type T as a warp stages it: its bytes, 16-byte vectors, the shared-memory
// row that holds it, and the items each lane decodes.
template <class T, uint32_t CB_>
struct ChunkShape {
    static constexpr uint32_t CB = CB_;
    static constexpr uint32_t BYTES = CB * T::BS;
    static constexpr uint32_t NV = (BYTES + 15) / 16;   // 16-byte vectors per row chunk
    static constexpr uint32_t VPL = (NV + 31) / 32;     // per lane
    static constexpr uint32_t SMEM_ROW = NV * 16 + 16;  // + slack for 2-byte-aligned word reads
    static constexpr uint32_t ITEMS = CB * T::PARTS / 32;
    static constexpr uint32_t EPI = T::QK / T::PARTS;
    static_assert(CB * T::PARTS % 32 == 0, "a chunk must give every lane the same number of items");
};

template <class T, int R>
struct ChunkGeom : ChunkShape<T, T::CB> {
    using ChunkShape<T, T::CB>::SMEM_ROW;
    // cp.async stages (compute capability 8.0+): 3 while a warp's chunk is small, else 2 (static shared
    // memory stays under 48 KiB per block and 4096 rows stay resident in one wave on 132 SMs). Deeper
    // rings (up to 6 stages in 27 KiB per block) and halved chunks measured no faster on the H200.
    static constexpr uint32_t stages() { return SMEM_ROW * R <= 2200 ? 3 : 2; }
};

// Half chunks in four stages (the same shared memory as ChunkGeom's two): more of the row in flight in
// smaller pieces. With bulk copies faster for Q4_0 at one column (halves_chunks); slower for Q8_0 (18.3
// -> 18.7 us), IQ4_NL (11.9 -> 13.0), IQ3_XXS and at two columns (docs/cuda-tuning-log.md "Bulk copies for
// the weight ring").
template <class T, int R>
struct ChunkGeomHalf : ChunkShape<T, T::CB / 2> {
    static constexpr uint32_t stages() { return 4; }
};

// The activations of one chunk in shared memory, with XView's interface (column 0 only).
struct XStage {
    uint32_t q;     // shared address of the chunk's int8 activations
    uint32_t d, s;  // shared addresses of its block scales and sums
    uint32_t kbase; // the chunk's first column index
    template <int N>
    __device__ __forceinline__ void words(int, uint32_t k0, int (&w)[N]) const {
        lds_words_v4<N>(q + (k0 - kbase), reinterpret_cast<uint32_t (&)[N]>(w));
    }
    __device__ __forceinline__ float dq(int, uint32_t k) const {
        return __uint_as_float(lds_u32(d + (k - kbase) / 32 * 4));
    }
    __device__ __forceinline__ float sq(int, uint32_t k) const {
        return __uint_as_float(lds_u32(s + (k - kbase) / 32 * 4));
    }
};

// Staged activations (one column, compute capability 8.0+, plain GEMV, kStageActivations types): the
// chunk's q8_1 activations (int8 plane, d, s) travel in the cp.async ring with the weights (copied
// through L1, cp.async.ca, so that the warps of a multiprocessor share them), and the decoders read them
// from shared memory, requested S - 1 chunks ahead, instead of from L1 when they need them (where the
// one-column kernels stalled most). Smaller chunks, so that the ring stays within 48 KiB per block.
template <class T, int R>
struct ChunkGeomXS : ChunkShape<T, T::QK == 32 ? 32u : 8u> {
    using Base = ChunkShape<T, T::QK == 32 ? 32u : 8u>;
    using Base::CB;
    using Base::SMEM_ROW;
    // a stage's activations: the int8 plane (XQ bytes), then XF block scales d, then XF block sums s
    static constexpr uint32_t XQ = CB * T::QK;
    static constexpr uint32_t XF = CB * T::QK / 32;
    static constexpr uint32_t XD = XQ, XSUM = XQ + 4 * XF, XBYTES = XQ + 8 * XF;
    static constexpr uint32_t STAGE = R * SMEM_ROW + XBYTES;
    static constexpr uint32_t S0 = 45056 / (kGemvWarps * STAGE); // 44 KiB of ring per block
    static constexpr uint32_t S = S0 < 2 ? 2 : S0 > 4 ? 4 : S0;
    static constexpr uint32_t stages() { return S; }
    // the XStage of a stage at shared address xb holding chunk columns from kbase on
    __device__ __forceinline__ static XStage view(uint32_t xb, uint32_t kbase) {
        return XStage{xb, xb + XD, xb + XSUM, kbase};
    }
};

// Where the row kernel's decoders read the q8_1 activations from.
enum XSource : int {
    kXFromL1 = 0,      // global memory through L1, when the decoder needs them
    kXStagedChunks = 1, // each chunk's activations copied into the warp's ring with the chunk (ChunkGeomXS)
    kXWholeVector = 2, // the whole vector copied once per block into dynamic shared memory (XWhole)
};

// The whole-vector layout (one column): the int8 plane (cols bytes), then the block scales d, then the
// block sums s, each float plane padded to 16 bytes. The scratch pads every plane to 256 bytes, so the
// last 16-byte copy of a plane stays inside it.
struct XWhole {
    __host__ __device__ static constexpr uint32_t fbytes(uint32_t cols) { return (cols / 32 * 4 + 15) / 16 * 16; }
    __host__ __device__ static constexpr uint32_t bytes(uint32_t cols) { return cols + 2 * fbytes(cols); }
    __device__ __forceinline__ static XStage view(uint32_t base, uint32_t cols) {
        return XStage{base, base + cols, base + cols + fbytes(cols), 0};
    }
};

// The whole-vector int8 plane swizzled (swizzles_whole_vector's types): the 16-byte piece at byte o of the plane
// is stored at o ^ ((o >> 3) & 0x30), that is bits 4-5 of the offset xor bits 7-8. The decoders of these types
// give each lane one 64-byte unit of activations (lane l unit u0 + l), so plain, the 16-byte reads of a quarter
// warp's 8 lanes fall on two groups of 4 banks (64-byte stride: 4-way conflicts, 16 wavefronts a read instead of
// 4); swizzled, unit u's piece i lies at 16 (i ^ ((u >> 1) & 3)) within the unit, and the 8 lanes hit 8 groups.
__host__ __device__ constexpr uint32_t whole_vector_swizzle(uint32_t o) { return o ^ ((o >> 3) & 0x30u); }
// Checked here: a quarter warp's 8 lanes (units 8 g .. 8 g + 7) reading piece i of their units cover 8 different
// 16-byte bank groups, and every piece stays in its own unit.
constexpr bool whole_vector_swizzle_spreads_banks() {
    for (uint32_t g = 0; g < 4; ++g)
        for (uint32_t i = 0; i < 4; ++i) {
            uint32_t seen = 0;
            for (uint32_t u = 8 * g; u < 8 * g + 8; ++u) {
                const uint32_t o = whole_vector_swizzle(64 * u + 16 * i);
                if (o / 64 != u) return false;
                seen |= 1u << (o / 16 % 8);
            }
            if (seen != 0xFFu) return false;
        }
    return true;
}
static_assert(whole_vector_swizzle_spreads_banks(), "the swizzle must spread a quarter warp over all 32 banks");
// The swizzled plane's view: XStage's (kbase 0: the block scales and sums are not swizzled) with its own words.
struct XWholeSwizzled : XStage {
    // N words (N / 4 pieces) from column k0, a multiple of 4 N with N <= 16: the pieces share one 64-byte unit,
    // so one swizzle term serves them all
    template <int N>
    __device__ __forceinline__ void words(int, uint32_t k0, int (&w)[N]) const {
        static_assert(N % 4 == 0 && N <= 16, "whole 16-byte pieces of one 64-byte unit");
        const uint32_t sw = (k0 >> 3) & 0x30u, qk = q + k0;
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            uint32_t t[4];
            lds_words_v4<4>(qk + ((16u * i) ^ sw), t);
#pragma unroll
            for (int k = 0; k < 4; ++k) w[4 * i + k] = static_cast<int>(t[k]);
        }
    }
};

// The types whose one-column GEMV stages its activations chunk by chunk, measured on the H200 (4096 x
// 14336, staged and L1 path alternating in one lease): Q4_K 14.0 -> 12.4 us, Q5_K 15.9 -> 13.6, Q3_K
// 17.2 -> 16.9, IQ3_S 19.9 -> 19.4. Not staged: slower for Q8_0 (19.5 -> 21.2), IQ4_NL (15.0 -> 16.9),
// IQ3_XXS (18.6 -> 18.9), IQ4_XS (17.7 -> 18.1); within noise for Q4_0, Q2_K, Q6_K; not measured: Q4_1,
// Q5_0, Q5_1 (docs/cuda-tuning-log.md "Where the one-column kernels wait").
constexpr bool stages_activations(uint32_t type) {
    return type == KPR_TYPE_Q4_K || type == KPR_TYPE_Q5_K || type == KPR_TYPE_Q3_K || type == KPR_TYPE_IQ3_S;
}
template <class T>
inline constexpr bool kStageActivations = stages_activations(T::TYPE);

// The types whose row kernel on 8.0+ (aligned rows) is built without the register-staged path beside its
// cp.async ring. That path is never taken there, but compiled beside the ring it changes ptxas's register
// allocation and schedule (IQ3_XXS's 16-warp one-column kernel 121 -> 84 registers, Q4_K's staged one
// 108 -> 72), and so the speed, both ways. Measured on the H200, one column, with and without it
// (docs/cuda-tuning-log.md "Rows that are not 16-byte aligned"): faster without for IQ3_XXS (4096 x 14336 14.5 ->
// 12.1 us), IQ3_S (17.1 -> 16.4), IQ4_NL (12.05 -> 11.8) and Q6_K (15.75 -> 15.5); slower for Q4_K
// (11.75 -> 13.4), Q3_K (15.25 -> 15.65) and Q8_0 at two columns (14336 x 4096 19.6 -> 20.2). Rows that
// are not aligned always take the lean instance (UA).
constexpr bool lean_row_kernel(uint32_t type) {
    return type == KPR_TYPE_IQ3_XXS || type == KPR_TYPE_IQ3_S || type == KPR_TYPE_IQ4_NL || type == KPR_TYPE_Q6_K;
}
// The types whose one-column row kernel has both instances (aligned rows), the lean one taken over several
// waves: more than 32 rows per SM. Measured on the H200 (docs/measurements/h200-session18-runs.txt; run 3:
// every aligned instance lean, against the committed build, alternating twice): lean is faster over several
// waves and slower on 31 rows per SM (4096 x 14336: Q4_1 11.6 -> 15.6 us, Q5_0 13.2 -> 21.4, Q5_K 12.75 ->
// 14.3; 4096 x 11008 likewise); Q2_K (11.0 -> 11.35 at 4096 x 14336) and IQ4_XS (equal everywhere) keep one
// instance. Run 4 (this rule against the build before it): 14336 x 4096 Q4_1 14.6 -> 12.1, Q5_0 20.05 ->
// 16.45, Q5_1 16.95 -> 13.9, Q5_K 14.9 -> 14.2; 11008 x 4096, 18944 x 3584, 8192 x 8192, 28672 x 8192
// 1.01-1.23x; 4096 x 14336 and 4096 x 4096 unchanged (the aligned instance as before).
constexpr bool lean_over_waves(uint32_t type) {
    return type == KPR_TYPE_Q4_1 || type == KPR_TYPE_Q5_0 || type == KPR_TYPE_Q5_1 || type == KPR_TYPE_Q5_K;
}
static_assert(!lean_over_waves(KPR_TYPE_IQ3_XXS) && !lean_over_waves(KPR_TYPE_IQ3_S) &&
                  !lean_over_waves(KPR_TYPE_IQ4_NL) && !lean_over_waves(KPR_TYPE_Q6_K),
              "lean_row_kernel's types have only the lean instance");
// Whether an aligned one-column call of type T takes the lean instance (lean_over_waves)
template <class T>
inline bool takes_lean_over_waves(const GemvArgs &a) {
    return lean_over_waves(T::TYPE) && a.aligned && a.sms != 0 && a.rows > 32u * a.sms;
}

// The types whose one-column GEMV copies the whole activation vector into each block (where it fits,
// launch_gemv_dyn), and with how many warps per block: 4 (four blocks per SM, the ring in static shared
// memory) or 16 (one block per SM: the vector copied once per SM; the ring, 2 stages, in dynamic shared
// memory). Measured on the H200, 4096 x 14336, one column, each against the paths before it alternating
// twice in one lease (docs/cuda-tuning-log.md "The whole activation vector in each block"), us per call:
//   4 warps:  Q4_0 13.9 -> 12.3, IQ4_NL 14.9 -> 12.9, Q2_K 13.4 -> 11.3 (16 warps: no faster)
//   16 warps: Q4_1 13.9 -> 12.2, Q5_0 15.2 -> 14.1, Q5_1 15.7 -> 14.4, Q3_K 16.9 (staged) -> 15.9,
//             Q6_K 17.6 -> 16.6, IQ4_XS 17.7 -> 17.3,
//             IQ3_XXS 17.0 -> 15.2 (the grid once per lane, WholeVectorTab, in both; with its cheaper
//             decode 17.7 -> 14.5 against the row kernel), IQ3_S 19.2 -> 17.2 (its grid once per lane
//             in dynamic shared memory), both on 8..32 rows per SM only (whole_vector_row_window;
//             twelfth session, docs/cuda-tuning-log.md "The IQ3 grids once per lane")
// Not taken: Q8_0 (19.5; 19.3 with 16 warps, within noise), Q4_K, Q5_K (slower or no faster either
// way). Three stages of the ring instead of two were slower for every type.
constexpr bool copies_whole_vector(uint32_t type) {
    return type == KPR_TYPE_Q4_0 || type == KPR_TYPE_Q4_1 || type == KPR_TYPE_IQ4_NL || type == KPR_TYPE_Q2_K ||
           type == KPR_TYPE_Q3_K || type == KPR_TYPE_Q6_K || type == KPR_TYPE_Q5_0 || type == KPR_TYPE_Q5_1 ||
           type == KPR_TYPE_IQ4_XS || type == KPR_TYPE_IQ3_XXS || type == KPR_TYPE_IQ3_S;
}
constexpr int whole_vector_warps(uint32_t type) {
    return type == KPR_TYPE_Q4_1 || type == KPR_TYPE_Q5_0 || type == KPR_TYPE_Q5_1 || type == KPR_TYPE_Q3_K ||
                   type == KPR_TYPE_Q6_K || type == KPR_TYPE_IQ4_XS || type == KPR_TYPE_IQ3_XXS ||
                   type == KPR_TYPE_IQ3_S
               ? 16
               : 4;
}
// The types whose whole-vector kernel (16 warps, no 4-warp fallback) is taken only on 8..32 rows per SM
// (1056..4224 on 132 SMs); elsewhere, and where it does not fit, the paths they took before it. Every
// block fills its per-lane grid (32 / 64 KiB) and copies the vector before its first row, which a second
// wave pays again, and 32-row blocks leave most SMs idle on fewer rows. H200, one column, us per call,
// c2ad050's path -> this kernel (runs 4 and 5 of docs/measurements/h200-session12-runs.txt): IQ3_XXS
// 4096 x 14336 17.7 -> 14.5, 2048 x 8192 10.3 -> 7.6, 4096 x 4096 7.1 -> 6.0, 1024 x 4096 4.6 -> 4.6,
// 14336 x 4096 (3.4 waves) 17.6 -> 18.5; IQ3_S 19.2 -> 17.2, 11.5 -> 9.5, 8.3 -> 8.0, 4.8 -> 5.1,
// 20.5 -> 23.6.
constexpr bool whole_vector_row_window(uint32_t type) {
    return type == KPR_TYPE_IQ3_XXS || type == KPR_TYPE_IQ3_S;
}
// The whole-vector types whose decoders read 64-byte units of activations per lane (IQ3_XXS, IQ3_S: add_two_units at
// k0 a multiple of 64), whose plane is stored swizzled (XWholeSwizzled). Measured on an H100, one column, ten shapes,
// against the plain plane (docs/cuda-tuning-log.md "The IQ3 whole vector swizzled"): IQ3_XXS 1.00-1.06x (4096 x
// 14336 12.45 -> 11.80 us), IQ3_S 1.00-1.03x, never slower; ncu: the shared loads' bank conflicts 0.93 M -> 0.24 M.
constexpr bool swizzles_whole_vector(uint32_t type) { return type == KPR_TYPE_IQ3_XXS || type == KPR_TYPE_IQ3_S; }
// Whether a one-column call takes the whole-vector path: every kWholeVector type, the row-window types on
// 8..32 rows per SM (32: the 16-warp kernel's rows per block, one block per SM).
constexpr bool whole_vector_rows_ok(uint32_t type, uint32_t rows, uint32_t sms) {
    return !whole_vector_row_window(type) || (rows >= 8u * sms && rows <= 32u * sms);
}
// The table policy of the 16-warp whole-vector kernel: in one block per SM, generic_cuda's IQ3 grids live
// once per lane in shared memory (TabLaneGrid, TabLaneGridS) instead of in L1 (TabGlobal); another
// provider's policy (iq_stage_tables) is kept, so both run the same kernel shape and produce the same bits.
// (By weight type, so that a repacked layout of IQ3_XXS, TIQ3_XXS_Signs, takes the same table.)
template <class T, class Tab>
struct WholeVectorTab {
    using type = Tab;
};
template <class T>
struct WholeVectorTab<T, TabGlobal> {
    using type = std::conditional_t<T::TYPE == KPR_TYPE_IQ3_XXS, TabLaneGrid,
                                    std::conditional_t<T::TYPE == KPR_TYPE_IQ3_S, TabLaneGridS, TabGlobal>>;
};
template <class T>
inline constexpr bool kWholeVector = copies_whole_vector(T::TYPE);
// The one-column whole-vector path in half chunks, four stages (ChunkGeomHalf): Q4_0 11.6 -> 11.1 us
// (with bulk copies, the same build switching alternately twice on the H200)
constexpr bool halves_chunks(uint32_t type) { return type == KPR_TYPE_Q4_0; }

// Unaligned fallback: the same 16 bytes, fetched 2 bytes at a time (blocks are 2-byte aligned).
__device__ __forceinline__ uint4 ld16_a2(const uint8_t *p, uint32_t avail) {
    uint32_t w[4] = {0, 0, 0, 0};
    const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
#pragma unroll
    for (int i = 0; i < 8; ++i)
        if (2u * i < avail) w[i / 2] |= static_cast<uint32_t>(__ldg(h + i)) << (16 * (i % 2));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int NC, int R>
struct GemvOcc {
#if defined(__CUDA_ARCH__) && KPR_ARCH < 800
    // register-staged path (no cp.async): the next chunk lives in registers, so allow 128 / 255 of them
    // (no spills; scripts/check-pascal checks it). Pascal-class GPUs hold far fewer rows per wave anyway.
    static constexpr int MIN_BLOCKS = R == 1 ? 4 : 2;
#else
    static constexpr int MIN_BLOCKS = R == 1 ? 8 : 4; // 32 resp. 16 warps per SM: 4096 rows in one wave
#endif
    // blocks of w warps per SM: what gemv_rows_kernel is compiled for (__launch_bounds__) and what
    // launch_gemv_dyn checks the shared memory of
    static constexpr int blocks_per_sm(int w) { return MIN_BLOCKS * kGemvWarps / w > 0 ? MIN_BLOCKS * kGemvWarps / w : 1; }
};

// The chunk geometry gemv_rows_kernel<T, NC, R, Tab, XM, W, SD, CD> streams with, and the bytes of its
// ring in dynamic shared memory (SD > 0: SD stages per warp, before the whole vector).
template <class T, int R, int XM, int CD>
using RowGeom = std::conditional_t<XM == kXStagedChunks, ChunkGeomXS<T, R>,
                                   std::conditional_t<CD == 2, ChunkGeomHalf<T, R>, ChunkGeom<T, R>>>;
template <class T, int R, int XM, int W, int SD, int CD>
inline constexpr uint32_t kDynRingBytes = SD > 0 ? W * SD * R * RowGeom<T, R, XM, CD>::SMEM_ROW : 0;

// A table policy may keep its tables in dynamic shared memory (Tab::kDynBytes, after the ring and before
// the whole vector; launch_gemv_dyn only): then its prologue takes their address.
template <class Tab, class = void>
inline constexpr uint32_t kTabDynBytes = 0;
template <class Tab>
inline constexpr uint32_t kTabDynBytes<Tab, std::void_t<decltype(Tab::kDynBytes)>> = Tab::kDynBytes;
template <class Tab>
__device__ __forceinline__ Tab tab_prologue(uint8_t *dyn) {
    if constexpr (kTabDynBytes<Tab> > 0) return Tab::prologue(dyn);
    else return Tab::prologue();
}

// W warps per block; SD > 0: the cp.async ring has SD stages in dynamic shared memory (before the
// whole vector, with XB) instead of the static ring; CD == 2: half chunks (ChunkGeomHalf). UA: the rows
// are not 16-byte aligned (a.aligned == 0): on 8.0+ the ring copies the 16-byte lines around each chunk
// (a separate instance, so that the aligned one keeps its code); below 8.0 both take the register path.
// LEAN: no register-staged path beside the ring on 8.0+ (lean_row_kernel, lean_over_waves).
// The blocks per SM an instance is compiled for: GemvOcc's, except generic_cuda's one-column IQ3_XXS row kernel on
// GGUF rows (outside the whole-vector window), compiled for 5 (118 -> 91 registers): on an H100 1.00-1.10x on four
// shapes. IQ3_S at 5 measured 0.88x at 5120 x 13824 and keeps 4; iq_stage_tables (its own Tab) keeps 4.
// (docs/cuda-tuning-log.md "The IQ3_XXS lanes kernel measured")
template <class T, int NC, int R, class Tab, int XM>
constexpr int row_blocks_per_sm(int w) {
    if constexpr (NC == 1 && R == 2 && XM != kXWholeVector && std::is_same_v<T, TIQ3_XXS> &&
                  std::is_same_v<Tab, TabGlobal>)
        return 5;
    return GemvOcc<NC, R>::blocks_per_sm(w);
}
template <class T, int NC, int R, class Tab, int XM = kXFromL1, int W = kGemvWarps, int SD = 0, int CD = 1,
          bool UA = false, bool LEAN = lean_row_kernel(T::TYPE)>
__global__ void __launch_bounds__(32 * W, (row_blocks_per_sm<T, NC, R, Tab, XM>(W))) gemv_rows_kernel(const GemvKArgs a) {
#if defined(__CUDA_ARCH__) && KPR_ARCH < 800
    // two rows per warp at 1-2 columns (and staged activations) are launched on 8.0+ only
    // (launch_row_nc): no code below 8.0, where the register-staged path would need the registers of a
    // second row
    if constexpr ((NC <= 2 && R == 2) || XM != kXFromL1 || SD > 0) return;
#endif
    constexpr bool XS = XM == kXStagedChunks, XB = XM == kXWholeVector;
    constexpr bool XSW = XB && swizzles_whole_vector(T::TYPE);
    static_assert(XM == kXFromL1 || NC == 1, "activations in shared memory: one column");
    using G = RowGeom<T, R, XM, CD>;
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    constexpr bool kAsync = true; // cp.async ring of stages
    constexpr uint32_t S = SD > 0 ? SD : G::stages();
#else
    constexpr bool kAsync = false; // registers hold the next chunk
    constexpr uint32_t S = 1;
#endif
    constexpr bool kDynRing = SD > 0;
    static_assert(!(kDynRing && XS), "the staged-chunk ring is static");
    __shared__ alignas(16) uint8_t smem[kDynRing ? 1 : W][kDynRing ? 1 : S][kDynRing ? 1 : R][kDynRing ? 16 : G::SMEM_ROW];
    constexpr uint32_t kXsBytes = [] {
        if constexpr (XS) return ChunkGeomXS<T, R>::XBYTES;
        else return 16u;
    }();
    __shared__ alignas(16) uint8_t xsm[XS ? W : 1][XS ? S : 1][kXsBytes];
    extern __shared__ __align__(16) uint8_t gemv_dyn[]; // the dynamic ring (SD), then the vector (XB)
    auto ring = [&](uint32_t w, uint32_t st, int r) -> uint8_t * {
        if constexpr (kDynRing) return gemv_dyn + ((w * S + st) * R + r) * G::SMEM_ROW;
        else return &smem[w][st][r][0];
    };
    uint8_t *const tabdyn = gemv_dyn + kDynRingBytes<T, R, XM, W, SD, CD>; // the table policy's (kTabDynBytes)
    uint8_t *const xwhole = tabdyn + kTabDynBytes<Tab>;                     // XB: XWhole::bytes(cols)
    const Tab tab = tab_prologue<Tab>(tabdyn); // may stage tables in shared memory (with a block barrier)

    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t row0 = (blockIdx.x * W + warp) * R;
    // XB: after the dependency wait, the whole block copies the activation vector into xwhole and waits
    // for it (a warp that owns no row too). Measured: waiting per piece of the vector instead (mbarriers,
    // a warp waiting only for the piece of its next chunk) was slower for most types.
    auto load_whole_x = [&] {
        if constexpr (XB) {
            const uint32_t cols = a.x.cols, fb = XWhole::fbytes(cols);
            const uint8_t *q = reinterpret_cast<const uint8_t *>(a.x.q);
            const uint8_t *d = reinterpret_cast<const uint8_t *>(a.x.d);
            const uint8_t *sm = reinterpret_cast<const uint8_t *>(a.x.s);
            for (uint32_t v = threadIdx.x; 16u * v < cols; v += blockDim.x)
                cp_async16<true>(xwhole + (XSW ? whole_vector_swizzle(16u * v) : 16u * v), q + 16u * v);
            for (uint32_t v = threadIdx.x; 16u * v < fb; v += blockDim.x) {
                cp_async16<true>(xwhole + cols + 16u * v, d + 16u * v);
                cp_async16<true>(xwhole + cols + fb + 16u * v, sm + 16u * v);
            }
            cp_async_commit();
            cp_async_wait<0>(); // (the weight chunks requested before it are older: they land first anyway)
            __syncthreads();
        }
    };
    // a warp that owns no row leaves now, except with XB: it copies its share of the vector and meets the
    // barrier in load_whole_x (the same barrier as the other warps) first
    const bool idle = row0 >= a.rows;
    if (!XB && idle) return;

    const uint8_t *wbase = a.w;
    XView x = a.x;
    float *y = a.y;
    bool bad_id = false;
    if (a.ids != nullptr) {
        const uint32_t task = blockIdx.y;
        const uint32_t j = task / a.n_used, s = task % a.n_used;
        int32_t e = __ldg(a.ids + task);
        if (e < 0 || static_cast<uint32_t>(e) >= a.n_experts) {
            bad_id = true;
            e = 0;
        }
        wbase += static_cast<uint64_t>(e) * a.expert_bytes;
        x.vbase = j * a.x_slots + (a.x_slots == 1 ? 0 : s);
        y += static_cast<uint64_t>(task) * a.rows;
    }

    const uint8_t *rp[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const uint32_t rr = min(row0 + r, a.rows - 1);
        rp[r] = wbase + static_cast<uint64_t>(rr) * a.row_bytes;
    }

    const uint32_t nchunks = (a.nb + G::CB - 1) / G::CB;

    float acc[R][NC];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < NC; ++j) acc[r][j] = 0.0f;

    // decode chunk c from stage st: the lane's items in a fixed order (the same in both paths)
    auto compute = [&](uint32_t c, uint32_t st) {
        const uint32_t nblk = min(G::CB, a.nb - c * G::CB);
        // where the chunk starts in its stage: 0, or (UA: rows not 16-byte aligned, cp.async ring) its skew
        uint32_t skew[R];
#pragma unroll
        for (int r = 0; r < R; ++r) skew[r] = kAsync && UA ? chunk_skew(rp[r] + uint64_t(c) * G::BYTES) : 0u;
        auto item = [&](int t) {
            const uint32_t it = lane + 32u * t;
            const uint32_t b = it / T::PARTS, part = it % T::PARTS;
            if (b < nblk) {
                const uint8_t *wp[R];
#pragma unroll
                for (int r = 0; r < R; ++r) wp[r] = ring(warp, st, r) + skew[r] + b * T::BS;
                const uint32_t k0 = (c * G::CB + b) * T::QK + part * G::EPI;
                if constexpr (XS) {
                    const XStage xs = ChunkGeomXS<T, R>::view(smem_addr(&xsm[warp][st][0]), c * G::CB * T::QK);
                    T::template item<NC, R, Tab>(wp, part, xs, k0, tab, acc);
                } else if constexpr (XB) {
                    using XView = std::conditional_t<XSW, XWholeSwizzled, XStage>;
                    T::template item<NC, R, Tab>(wp, part, XView{XWhole::view(smem_addr(xwhole), a.x.cols)}, k0, tab, acc);
                } else {
                    T::template item<NC, R, Tab>(wp, part, x, k0, tab, acc);
                }
            }
        };
#if defined(__CUDA_ARCH__) && KPR_ARCH < 610
        // 6.0 emulates dp4a: with the items unrolled at 2-3 columns, ptxas spills (the IQ3 kernels, even at
        // 255 registers; scripts/check-pascal); there one item at a time stays in registers. Same order.
        constexpr bool kOneByOne = NC <= 3;
#else
        constexpr bool kOneByOne = false;
#endif
        if constexpr (kOneByOne) {
#pragma unroll 1
            for (int t = 0; t < static_cast<int>(G::ITEMS); ++t) item(t);
        } else {
#pragma unroll
            for (int t = 0; t < static_cast<int>(G::ITEMS); ++t) item(t);
        }
    };

    // kLean: no register-staged path compiled beside the ring (LEAN: lean_row_kernel, lean_over_waves); else
    // it stays, never taken on 8.0+ (aligned rows), as the code shape these types measured fastest with
    constexpr bool kLean = UA || LEAN;
    if (kAsync && (kLean || a.aligned)) {
        // cp.async: S - 1 chunks in flight while one is decoded, no registers spent on staging
        // bulk copies (bulk_copies_rows; aligned rows: every chunk is a multiple of 16 bytes)
        constexpr bool bulk = !UA && bulk_copies_rows<T, NC, R, XB>() && G::BYTES % 16 == 0;
        __shared__ alignas(8) uint64_t wbar[bulk ? W : 1][bulk ? S : 1]; // one mbarrier per stage of the warp's ring
        if constexpr (bulk) {
            if (lane == 0) {
#pragma unroll
                for (uint32_t st = 0; st < S; ++st) mbar_init(smem_addr(&wbar[warp][st]), 1);
                mbar_init_fence();
            }
            __syncwarp();
        }
        auto issue = [&](uint32_t c) {
            const uint32_t st = c % S;
            const uint64_t off = static_cast<uint64_t>(c) * G::BYTES;
            const uint32_t bytes = min(G::BYTES, (a.nb - c * G::CB) * T::BS);
            if constexpr (bulk) {
                // one lane: the chunk of each row, one bulk copy each
                if (lane == 0) {
                    const uint32_t bar = smem_addr(&wbar[warp][st]);
                    mbar_arrive_expect(bar, R * bytes);
#pragma unroll
                    for (int r = 0; r < R; ++r) bulk_copy_g2s(smem_addr(ring(warp, st, r)), rp[r] + off, bytes, bar);
                }
            } else if constexpr (!UA) {
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int i = 0; i < static_cast<int>(G::VPL); ++i) {
                        const uint32_t v = lane + 32u * i;
                        if (v < G::NV && 16u * v < bytes) cp_async16(ring(warp, st, r) + 16u * v, rp[r] + off + 16u * v);
                    }
            } else {
                // rows not 16-byte aligned (GGUF rows are 2-byte aligned): the 16-byte lines that hold the
                // chunk, so the stage holds it from byte chunk_skew (SMEM_ROW has the room), nothing past the
                // tensor read
#pragma unroll
                for (int r = 0; r < R; ++r) cp_async_lines(ring(warp, st, r), rp[r] + off, bytes, lane);
            }
        };
        // the chunk's activations (staged variant): int8 plane, then d and s, 16 bytes per copy; the
        // planes are padded to 256 bytes, so a last partial vector stays inside the scratch
        auto issue_x = [&](uint32_t c) {
            if constexpr (XS) {
                using GX = ChunkGeomXS<T, R>;
                const uint32_t st = c % S;
                const uint32_t nblk = min(G::CB, a.nb - c * G::CB);
                const uint32_t qbytes = nblk * T::QK, fbytes = nblk * T::QK / 32 * 4;
                const uint64_t k = static_cast<uint64_t>(c) * GX::XQ;
                const uint8_t *q = reinterpret_cast<const uint8_t *>(x.q) + k;
                const uint8_t *d = reinterpret_cast<const uint8_t *>(x.d + k / 32);
                const uint8_t *sm = reinterpret_cast<const uint8_t *>(x.s + k / 32);
                for (uint32_t v = lane; 16u * v < qbytes; v += 32) cp_async16<true>(&xsm[warp][st][16u * v], q + 16u * v);
                for (uint32_t v = lane; 16u * v < fbytes; v += 32) {
                    cp_async16<true>(&xsm[warp][st][GX::XD + 16u * v], d + 16u * v);
                    cp_async16<true>(&xsm[warp][st][GX::XSUM + 16u * v], sm + 16u * v);
                }
            }
        };
#pragma unroll
        for (uint32_t c = 0; c + 1 < S; ++c) {
            if (c < nchunks && !idle) issue(c);
            cp_async_commit();
        }
        pdl_wait();              // activations are written by the kernel before this one
        pdl_launch_dependents(); // the next call's quantizer may launch (it waits for us before writing)
        load_whole_x();
        if (idle) return;
        if constexpr (XS) {
            // one group per chunk already requested, so that wait<S - 1> below still means "chunk c
            // has landed": before chunk c's group come its weights, after it S - 1 groups
#pragma unroll
            for (uint32_t c = 0; c + 1 < S; ++c) {
                if (c < nchunks) issue_x(c);
                cp_async_commit();
            }
        }
        for (uint32_t c = 0; c < nchunks; ++c) {
            if (c + S - 1 < nchunks) {
                issue(c + S - 1);
                issue_x(c + S - 1);
            }
            cp_async_commit();
            cp_async_wait<S - 1>(); // chunk c has landed (with bulk copies: its staged activations)
            if constexpr (bulk) mbar_wait(smem_addr(&wbar[warp][c % S]), (c / S) & 1u);
            __syncwarp();
            compute(c, c % S);
            __syncwarp(); // stage c % S is refilled next iteration
        }
    } else {
        uint4 buf[R][G::VPL];
        auto fetch = [&](uint32_t c) {
            const uint64_t off = static_cast<uint64_t>(c) * G::BYTES;
            const uint32_t bytes = min(G::BYTES, (a.nb - c * G::CB) * T::BS);
#pragma unroll
            for (int r = 0; r < R; ++r) {
#pragma unroll
                for (int i = 0; i < static_cast<int>(G::VPL); ++i) {
                    const uint32_t v = lane + 32u * i;
                    if (v < G::NV && 16u * v < bytes) {
                        const uint8_t *src = rp[r] + off + 16u * v;
                        buf[r][i] = a.aligned ? ldg_stream16(src) : ld16_a2(src, bytes - 16u * v);
                    }
                }
            }
        };
        fetch(0);
        pdl_wait();
        pdl_launch_dependents();
        for (uint32_t c = 0; c < nchunks; ++c) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int i = 0; i < static_cast<int>(G::VPL); ++i) {
                    const uint32_t v = lane + 32u * i;
                    if (v < G::NV) *reinterpret_cast<uint4 *>(ring(warp, 0, r) + 16u * v) = buf[r][i];
                }
            __syncwarp();
            if (c + 1 < nchunks) fetch(c + 1);
            compute(c, 0);
            __syncwarp();
        }
    }

#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const float v = warp_sum(acc[r][j]);
            if (lane == 0 && row0 + r < a.rows)
                y[static_cast<uint64_t>(j) * a.rows + row0 + r] = bad_id ? __int_as_float(0x7fc00000) : v;
        }
    }
}

// Rows per warp for NC columns: two rows share each activation load once there are several columns
// (launch_row_nc also takes two rows at 1-2 columns where a.sm80 or a.rows80).
template <int NC>
constexpr int rows_per_warp() {
    return NC >= 3 ? 2 : 1;
}

// Launches gemv_rows_kernel<T, NC, R, Tab>: grid.x covers the rows, grid.y the grouped tasks.
// `pdl`: launch with programmatic stream serialization (compute capability 9.0: the kernel may start
// while the activation quantizer finishes).
template <class T, int NC, class Tab, int R = rows_per_warp<NC>(), int XM = kXFromL1, int CD = 1>
cudaError_t launch_gemv(const GemvArgs &a, uint32_t tasks, bool pdl, cudaStream_t stream) {
    const uint32_t rows_per_block = kGemvWarps * R;
    auto k = a.aligned ? gemv_rows_kernel<T, NC, R, Tab, XM, kGemvWarps, 0, CD, false>
                       : gemv_rows_kernel<T, NC, R, Tab, XM, kGemvWarps, 0, CD, true>;
    if constexpr (NC == 1 && lean_over_waves(T::TYPE))
        if (takes_lean_over_waves<T>(a)) k = gemv_rows_kernel<T, NC, R, Tab, XM, kGemvWarps, 0, CD, false, true>;
    return launch_pdl(k, dim3((a.rows + rows_per_block - 1) / rows_per_block, tasks), dim3(32 * kGemvWarps), 0, pdl,
                      stream, static_cast<const GemvKArgs &>(a));
}

// The one-column row kernel (two rows per warp, plain GEMV, 8.0+) with dynamic shared memory: with XM ==
// kXWholeVector the whole activation vector in each block, with SD > 0 a ring of SD stages, W warps per
// block. cudaErrorNotSupported where that would not leave room for the row kernel's warps per
// multiprocessor (16: four blocks of 4 warps; the caller takes the other paths then: 4 blocks of ~36 KiB
// static on a 228 KiB multiprocessor leave room for whole vectors up to about 16K columns).
template <class T, class Tab, int XM, int W, int SD, int CD, bool UA, bool LEAN = lean_row_kernel(T::TYPE)>
cudaError_t launch_gemv_dyn_instance(const GemvArgs &a, bool pdl, cudaStream_t stream) {
    auto k = gemv_rows_kernel<T, 1, 2, Tab, XM, W, SD, CD, UA, LEAN>;
    const uint32_t dyn = kDynRingBytes<T, 2, XM, W, SD, CD> + kTabDynBytes<Tab> +
                         (XM == kXWholeVector ? XWhole::bytes(a.x.cols) : 0);
    constexpr uint32_t kBlocksPerSm = GemvOcc<1, 2>::blocks_per_sm(W);
    // per device: the kernel's static shared memory, and whether its dynamic maximum is set (to all the
    // opt-in room the static part leaves, the same value from every thread, so that concurrent first
    // calls with different widths cannot lower it under one another)
    struct Attr {
        std::atomic<int> static_bytes{-1};
        std::atomic<bool> dyn_set{false};
    };
    static Attr attr[64];
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= 64 || a.smem_sm == 0) return cudaErrorNotSupported;
    int st = attr[dev].static_bytes.load(std::memory_order_relaxed);
    if (st < 0) {
        cudaFuncAttributes fa{};
        e = cudaFuncGetAttributes(&fa, k);
        if (e != cudaSuccess) return e;
        st = static_cast<int>(fa.sharedSizeBytes);
        attr[dev].static_bytes.store(st, std::memory_order_relaxed);
    }
    constexpr uint32_t kReservedPerBlock = 1024; // the runtime's own shared memory per block
    const uint32_t per_block = static_cast<uint32_t>(st) + dyn + kReservedPerBlock;
    if (static_cast<uint64_t>(per_block) * kBlocksPerSm > a.smem_sm || st + dyn > a.smem_optin)
        return cudaErrorNotSupported;
    if (!attr[dev].dyn_set.load(std::memory_order_acquire)) {
        e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(a.smem_optin) - st);
        if (e != cudaSuccess) return e;
        e = cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
        if (e != cudaSuccess) return e;
        attr[dev].dyn_set.store(true, std::memory_order_release);
    }
    const uint32_t rows_per_block = W * 2;
    return launch_pdl(k, dim3((a.rows + rows_per_block - 1) / rows_per_block, 1), dim3(32 * W), dyn, pdl, stream,
                      static_cast<const GemvKArgs &>(a));
}
template <class T, class Tab, int XM, int W = kGemvWarps, int SD = 0, int CD = 1>
cudaError_t launch_gemv_dyn(const GemvArgs &a, bool pdl, cudaStream_t stream) {
    if (!a.aligned) return launch_gemv_dyn_instance<T, Tab, XM, W, SD, CD, true>(a, pdl, stream);
    if constexpr (lean_over_waves(T::TYPE))
        if (takes_lean_over_waves<T>(a)) return launch_gemv_dyn_instance<T, Tab, XM, W, SD, CD, false, true>(a, pdl, stream);
    return launch_gemv_dyn_instance<T, Tab, XM, W, SD, CD, false>(a, pdl, stream);
}

// ---- the 4-row kernel (compute capability 8.0+, plain GEMV of a 256-weight-block type, ncols >= 3) ---
//
// One block of 8 warps per multiprocessor, each block owning a contiguous range of row groups of 4 rows;
// a warp takes consecutive groups and streams their chunks (half the row kernel's chunk) through its own
// cp.async ring of up to 6 stages (about 24 KiB per warp), across group boundaries. The four rows share
// every activation load (the row kernel shares one between two), which is what the K and IQ types need
// at several columns. Activations quantized by quantize_act_q8_1, read through L1.
constexpr int kQuadRows = 4, kQuadWarps = 8;

template <class T>
struct QuadCfg : ChunkShape<T, ((T::CB / 2) * T::PARTS % 32 == 0) ? T::CB / 2 : T::CB> {
    using Base = ChunkShape<T, ((T::CB / 2) * T::PARTS % 32 == 0) ? T::CB / 2 : T::CB>;
    using Base::SMEM_ROW;
    static constexpr int R = kQuadRows, W = kQuadWarps;
    static constexpr uint32_t S0 = 24576 / (R * SMEM_ROW);
    static constexpr uint32_t S = S0 < 2 ? 2 : S0 > 6 ? 6 : S0;
    static constexpr uint32_t RING = W * S * R * SMEM_ROW;
    // static shared memory a table policy may add (iq_stage_tables: up to 4 KiB); by type, so that
    // providers that differ only in the policy take the same path (and produce the same bits)
    static constexpr uint32_t STATIC_RESERVE =
        (T::TYPE == KPR_TYPE_IQ3_XXS || T::TYPE == KPR_TYPE_IQ3_S) ? 8 * 1024 : 1024;
};

// Whether type T has a 4-row kernel instance for rows that are not 16-byte aligned (quad_kernel's UA): the
// 256-weight types whose block size is not a multiple of 16 bytes, so that real row lengths leave their rows
// unaligned (Q6_K at 11008 weights, IQ4_XS at 8960). Q4_K and Q5_K rows are aligned wherever the tensor is.
template <class T>
constexpr bool quad_unaligned_rows() {
    return T::QK == 256 && T::BS % 16 != 0;
}
// The column count from which unaligned rows take the 4-row kernel (below it, the row kernel's UA
// instance). Measured on the H200 (run 1 of docs/measurements/h200-session20-runs.txt, the row kernel ->
// the 4-row kernel, us per call): Q6_K slower at 3 columns (4096 x 11008 21.0 -> 25.7, 5120 x 13824 33.5 ->
// 43.8, 3584 x 18944 32.6 -> 36.6) and even at 4 (24.4 -> 24.6, 38.3 -> 43.0, 38.0 -> 35.8, 1536 x 8960 19.2
// -> 13.2), faster at 8 (1.21-1.50x); Q2_K, Q3_K, IQ3_XXS, IQ3_S, IQ4_XS 0.98-2.38x from 3 columns on.
constexpr uint32_t quad_unaligned_min_cols(uint32_t type) { return type == KPR_TYPE_Q6_K ? 5 : 3; }

// UA: the rows are not 16-byte aligned (a.aligned == 0, quad_unaligned_rows): the ring copies the 16-byte
// lines around each chunk with cp.async, as the row kernel's UA instance does, and the decode reads each
// row's chunk from its skew (a separate instance, so that the aligned one keeps its code).
template <class T, int NC, class Tab, bool UA = false>
__global__ void __launch_bounds__(32 * kQuadWarps, 1) gemv_quad_kernel(const GemvArgs a) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    using C = QuadCfg<T>;
    constexpr int R = C::R, W = C::W;
    extern __shared__ __align__(16) uint8_t dsm[];
    const Tab tab = Tab::prologue();
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    auto stage = [&](uint32_t st, int r) { return dsm + ((warp * C::S + st) * R + r) * C::SMEM_ROW; };

    const uint32_t groups = (a.rows + R - 1) / R;
    const uint32_t gb0 = blockIdx.x * a.gpb, gb1 = min(groups, gb0 + a.gpb);
    const uint32_t ng = gb0 + warp < gb1 ? (gb1 - gb0 - warp + W - 1) / W : 0;
    const uint32_t nch = (a.nb + C::CB - 1) / C::CB;
    const uint32_t total = ng * nch;

    constexpr bool bulk = !UA && bulk_copies_quad(T::TYPE) && C::BYTES % 16 == 0;
    __shared__ alignas(8) uint64_t qbar[bulk ? W : 1][bulk ? C::S : 1]; // one mbarrier per stage of the warp's ring
    if constexpr (bulk) {
        if (lane == 0) {
#pragma unroll
            for (uint32_t st = 0; st < C::S; ++st) mbar_init(smem_addr(&qbar[warp][st]), 1);
            mbar_init_fence();
        }
        __syncwarp();
    }
    auto issue = [&](uint32_t sidx) {
        const uint32_t gi = sidx / nch, c = sidx - gi * nch;
        const uint32_t g = gb0 + warp + W * gi;
        const uint32_t st = sidx % C::S;
        const uint64_t off = static_cast<uint64_t>(c) * C::BYTES;
        const uint32_t bytes = min(C::BYTES, (a.nb - c * C::CB) * T::BS);
        if constexpr (bulk) {
            if (lane == 0) {
                const uint32_t bar = smem_addr(&qbar[warp][st]);
                mbar_arrive_expect(bar, R * bytes);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const uint32_t row = min(g * R + r, a.rows - 1);
                    bulk_copy_g2s(smem_addr(stage(st, r)), a.w + static_cast<uint64_t>(row) * a.row_bytes + off, bytes, bar);
                }
            }
        } else if constexpr (!UA) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint32_t row = min(g * R + r, a.rows - 1);
                const uint8_t *src = a.w + static_cast<uint64_t>(row) * a.row_bytes + off;
                uint8_t *dst = stage(st, r);
#pragma unroll
                for (int i = 0; i < static_cast<int>(C::VPL); ++i) {
                    const uint32_t v = lane + 32u * i;
                    if (v < C::NV && 16u * v < bytes) cp_async16(dst + 16u * v, src + 16u * v);
                }
            }
        } else {
            // the 16-byte lines that hold the chunk (the stage holds it from byte chunk_skew: SMEM_ROW has the
            // room)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint32_t row = min(g * R + r, a.rows - 1);
                cp_async_lines(stage(st, r), a.w + static_cast<uint64_t>(row) * a.row_bytes + off, bytes, lane);
            }
        }
    };
#pragma unroll
    for (uint32_t c = 0; c + 1 < C::S; ++c) {
        if (c < total) issue(c);
        cp_async_commit();
    }
    pdl_wait();              // the activations are written by the quantizer before this kernel
    pdl_launch_dependents(); // the next call's quantizer may launch (it waits for us before writing)

    float acc[R][NC];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < NC; ++j) acc[r][j] = 0.0f;

    for (uint32_t sidx = 0; sidx < total; ++sidx) {
        if (sidx + C::S - 1 < total) issue(sidx + C::S - 1);
        cp_async_commit();
        cp_async_wait<C::S - 1>();
        if constexpr (bulk) mbar_wait(smem_addr(&qbar[warp][sidx % C::S]), (sidx / C::S) & 1u);
        __syncwarp();
        const uint32_t gi = sidx / nch, c = sidx - gi * nch, st = sidx % C::S;
        const uint32_t nblk = min(C::CB, a.nb - c * C::CB);
        // where each row's chunk starts in its stage: 0, or (UA) its skew
        uint32_t skew[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint32_t row = min((gb0 + warp + W * gi) * R + r, a.rows - 1);
            skew[r] = UA ? chunk_skew(a.w + static_cast<uint64_t>(row) * a.row_bytes + uint64_t(c) * C::BYTES) : 0u;
        }
#pragma unroll
        for (int t = 0; t < static_cast<int>(C::ITEMS); ++t) {
            const uint32_t it = lane + 32u * t;
            const uint32_t b = it / T::PARTS, part = it % T::PARTS;
            if (b < nblk) {
                const uint8_t *wp[R];
#pragma unroll
                for (int r = 0; r < R; ++r) wp[r] = stage(st, r) + skew[r] + b * T::BS;
                const uint32_t k0 = (c * C::CB + b) * T::QK + part * C::EPI;
                T::template item<NC, R, Tab>(wp, part, a.x, k0, tab, acc);
            }
        }
        __syncwarp(); // stage st is refilled by a later issue
        if (c == nch - 1) {
            const uint32_t row0 = (gb0 + warp + W * gi) * R;
#pragma unroll
            for (int r = 0; r < R; ++r) {
#pragma unroll
                for (int j = 0; j < NC; ++j) {
                    const float v = warp_sum(acc[r][j]);
                    if (lane == 0 && row0 + r < a.rows) a.y[static_cast<uint64_t>(j) * a.rows + row0 + r] = v;
                    acc[r][j] = 0.0f;
                }
            }
        }
    }
#endif
}

// The quantizer launch (q8_1 into x's scratch), with programmatic dependent launch where asked; the blocks'
// values in the tile layout's order where the row kernel reads them so (act_nibble_order).
inline cudaError_t launch_quantizer(const GemvArgs &a, bool pdl, cudaStream_t stream, bool nibble_order = false) {
    return launch_quantize_act_q8_1(a.xf, a.xq_n, ActQ8{a.x.q, a.x.d, a.x.s, a.x.cols}, pdl, stream, nibble_order);
}

// Launches the quantizer and the 4-row kernel for NC columns. cudaErrorNotSupported: the shapes do
// not fit (the caller takes the row kernel).
template <class T, int NC, class Tab, bool UA = false>
cudaError_t launch_quad(const GemvArgs &a, bool pdl, cudaStream_t stream) {
    if constexpr (quad_unaligned_rows<T>() && !UA)
        if (!a.aligned) return launch_quad<T, NC, Tab, true>(a, pdl, stream);
    if (!UA && !a.aligned) return cudaErrorNotSupported;
    using C = QuadCfg<T>;
    const size_t dyn = C::RING;
    if (dyn + C::STATIC_RESERVE > a.smem_optin || a.sms == 0) return cudaErrorNotSupported;
    auto k = gemv_quad_kernel<T, NC, Tab, UA>;
    static std::atomic<uint32_t> set_bytes[64];
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= 64 || set_bytes[dev].load(std::memory_order_relaxed) < dyn) {
        e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn));
        if (e != cudaSuccess) return e;
        if (dev >= 0 && dev < 64) set_bytes[dev].store(static_cast<uint32_t>(dyn), std::memory_order_relaxed);
    }
    if (a.xq_n != 0) {
        e = launch_quantizer(a, pdl, stream);
        if (e != cudaSuccess) return e;
    }
    GemvArgs b = a;
    const uint32_t groups = (a.rows + C::R - 1) / C::R;
    b.gpb = (groups + a.sms - 1) / a.sms;
    const uint32_t grid = (groups + b.gpb - 1) / b.gpb;
    return launch_pdl(k, dim3(grid), dim3(32 * C::W), dyn, pdl, stream, b);
}

template <class T, class Tab>
cudaError_t launch_quad_nc(const GemvArgs &a, uint32_t ncols, bool pdl, cudaStream_t s) {
    switch (ncols) {
    case 3: return launch_quad<T, 3, Tab>(a, pdl, s);
    case 4: return launch_quad<T, 4, Tab>(a, pdl, s);
    case 5: return launch_quad<T, 5, Tab>(a, pdl, s);
    case 6: return launch_quad<T, 6, Tab>(a, pdl, s);
    case 7: return launch_quad<T, 7, Tab>(a, pdl, s);
    case 8: return launch_quad<T, 8, Tab>(a, pdl, s);
    default: return cudaErrorNotSupported;
    }
}

template <class T, class Tab>
cudaError_t launch_row_nc(const GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s);



// Dispatch: the tensor-core tile kernel (with its quantizer; at one column quantizing in the kernel) where
// mma_serves (9.0, kpr_cuda_mma.cuh); the 4-row kernel for 3..8 columns of a 256-weight-block type where it
// applies (a.sm80: compute capability 8.0+, aligned rows, plain GEMV; or a.rows80 with rows that are not
// aligned, for the types with a UA instance: quad_unaligned_rows); else the quantizer (when a.xq_n) and the row
// kernel, on the runtime column count (plain GEMV: 1..8; grouped tasks run with NC = 1), with two rows
// per warp at one and two columns where a.sm80 or a.rows80 (one row per warp elsewhere: the register-staged path
// below 8.0 keeps its registers). `pdl`: launch with programmatic stream serialization (9.0).
template <class T, class Tab>
cudaError_t launch_gemv_nc(const GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s) {
    if constexpr (!std::is_void_v<typename MmaFor<T>::type>) {
        using M = typename MmaFor<T>::type;
        if (tasks == 1 && mma_serves<M>(a, ncols)) {
            cudaError_t e = cudaErrorNotSupported;
            if constexpr (mma_takes_unaligned_rows<M>()) // rows that are not 16-byte aligned: chunks of one block
                if (!a.aligned) e = launch_mma_nc<MmaOneBlock<M>>(a, ncols, pdl, s);
            if (a.aligned) e = launch_mma_nc<M>(a, ncols, pdl, s); // quantizer + kernel
            if (e != cudaErrorNotSupported) return e;
        }
    }
    if constexpr (!T::FLOAT_X && T::QK == 256) {
        if ((a.sm80 || (a.rows80 && quad_unaligned_rows<T>() && ncols >= quad_unaligned_min_cols(T::TYPE))) && tasks == 1 &&
            a.ids == nullptr && ncols >= 3) {
            const cudaError_t e = launch_quad_nc<T, Tab>(a, ncols, pdl, s);
            if (e != cudaErrorNotSupported) return e;
        }
    }
    if (a.xq_n != 0) {
        const cudaError_t e = launch_quantizer(a, pdl, s, act_nibble_order(T::TYPE, static_cast<int>(ncols)));
        if (e != cudaSuccess) return e;
    }
    return launch_row_nc<T, Tab>(a, ncols, tasks, pdl, s);
}

// The row kernel alone at one column (plain GEMV, or grouped tasks): the whole-vector paths where they apply,
// else the staged or plain row kernel, two rows per warp where a.sm80 or a.rows80.
template <class T, class Tab>
cudaError_t launch_row_one(const GemvArgs &a, uint32_t tasks, bool pdl, cudaStream_t s) {
    const bool two = (a.sm80 || a.rows80) && tasks == 1 && a.ids == nullptr;
    if constexpr (kWholeVector<T>)
        if (two && whole_vector_rows_ok(T::TYPE, a.rows, a.sms)) {
            cudaError_t e = cudaErrorNotSupported;
            if constexpr (whole_vector_warps(T::TYPE) == 16)
                e = launch_gemv_dyn<T, typename WholeVectorTab<T, Tab>::type, kXWholeVector, 16, 2>(a, pdl, s);
            if constexpr (halves_chunks(T::TYPE))
                if (e == cudaErrorNotSupported) e = launch_gemv_dyn<T, Tab, kXWholeVector, kGemvWarps, 0, 2>(a, pdl, s);
            if (e == cudaErrorNotSupported && !whole_vector_row_window(T::TYPE))
                e = launch_gemv_dyn<T, Tab, kXWholeVector>(a, pdl, s);
            if (e != cudaErrorNotSupported) return e;
        }
    if constexpr (kStageActivations<T>)
        if (two) return launch_gemv<T, 1, Tab, 2, kXStagedChunks>(a, tasks, pdl, s);
    return two ? launch_gemv<T, 1, Tab, 2>(a, tasks, pdl, s) : launch_gemv<T, 1, Tab>(a, tasks, pdl, s);
}

// A one-column plain GEMV of a row-kernel-only layout (no tile or 4-row kernel): the quantizer (when a.xq_n), then
// launch_row_one. generic_cuda's sign_copy (TIQ3_XXS_Signs).
template <class T, class Tab>
cudaError_t launch_gemv_one(const GemvArgs &a, bool pdl, cudaStream_t s) {
    if (a.xq_n != 0) {
        const cudaError_t e = launch_quantizer(a, pdl, s, act_nibble_order(T::TYPE, 1));
        if (e != cudaSuccess) return e;
    }
    return launch_row_one<T, Tab>(a, 1, pdl, s);
}

// The row kernel alone, on the runtime column count.
// Dispatch on the runtime column count (plain GEMV: 1..8; grouped tasks run with NC = 1).
template <class T, class Tab>
cudaError_t launch_row_nc(const GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s) {
    const bool two = (a.sm80 || a.rows80) && tasks == 1 && a.ids == nullptr;
    switch (ncols) {
    case 1: return launch_row_one<T, Tab>(a, tasks, pdl, s);
    case 2: return two ? launch_gemv<T, 2, Tab, 2>(a, tasks, pdl, s) : launch_gemv<T, 2, Tab>(a, tasks, pdl, s);
    case 3: return launch_gemv<T, 3, Tab>(a, tasks, pdl, s);
    case 4: return launch_gemv<T, 4, Tab>(a, tasks, pdl, s);
    case 5: return launch_gemv<T, 5, Tab>(a, tasks, pdl, s);
    case 6: return launch_gemv<T, 6, Tab>(a, tasks, pdl, s);
    case 7: return launch_gemv<T, 7, Tab>(a, tasks, pdl, s);
    case 8: return launch_gemv<T, 8, Tab>(a, tasks, pdl, s);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace kpr::cuda

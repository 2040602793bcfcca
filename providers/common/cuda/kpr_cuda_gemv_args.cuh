// kpr_cuda_gemv_args.cuh -- the arguments of the GEMV kernels (row, 4-row and tile kernels) and of
// their launchers.
#pragma once

#include "kpr_cuda_blocks.cuh"

#include <cstddef>
#include <cstdint>

namespace kpr::cuda {

// What the row kernel reads (its parameter). Kept as it was before the launcher's fields below were
// added: a larger kernel parameter changed ptxas's register allocation of the Pascal IQ3 kernels into
// local-memory spills (scripts/check-pascal).
struct GemvKArgs {
    const uint8_t *w;      // GGUF blocks
    uint64_t row_bytes;
    uint64_t expert_bytes; // grouped: bytes of one expert matrix
    uint32_t rows;
    uint32_t nb;           // blocks per row
    const int32_t *ids;    // grouped: [ncols][n_used]; null for plain GEMV
    uint32_t n_used;       // grouped: experts per column; the tile kernel's PAD instances: the columns written
    uint32_t x_slots;
    uint32_t n_experts;
    uint32_t aligned;      // w, row_bytes and expert_bytes are multiples of 16
    XView x;
    float *y;
};

enum MmaMode : uint32_t { kMmaAuto = 0, kMmaOn = 1, kMmaOff = 2, kMmaWide = 3, kMmaWide32 = 4 };
// Whether mode asks for the tile kernel with 16 warps per tile wherever its ring fits (kMmaWide, and kMmaWide32,
// which adds two tiles per block at one column)
constexpr bool mma_mode_wide(uint32_t mode) { return mode == kMmaWide || mode == kMmaWide32; }

// What the launchers take (and the 4-row kernel): the row kernel's arguments, plus
struct GemvArgs : GemvKArgs {
    // activation quantization (by the launcher) and the layouts for compute capability 8.0+
    const float *xf;       // float activations to quantize into x's q8_1 scratch
    size_t xq_n;           // values to quantize (0: x already holds q8_1, or float activations)
    size_t xq_bytes;       // bytes of x's scratch (the tile kernel's layout must fit; 0: unknown, no tile kernel)
    uint32_t sm80;         // 8.0+ layouts allowed (compute capability 8.0+, aligned rows, plain GEMV of a
                           // quantized type): two rows per warp at 1-2 columns, the 4-row kernel at 3..8
    uint32_t rows80;       // sm80's conditions but rows that need not be 16-byte aligned: the row kernel's two
                           // rows per warp at 1-2 columns and its whole-vector paths (cp.async rings read the
                           // 16-byte lines around 2-byte aligned rows); the other 8.0+ layouts need sm80
    uint32_t sm90;         // compute capability 9.0+ with rows80's conditions: the tile kernel may run (Q8_0, Q4_0,
                           // Q4_K, Q5_K, IQ4_NL, IQ4_XS at 1..8 columns, kpr_cuda_mma.cuh mma_serves; on rows
                           // that are not aligned only IQ4_XS, mma_piece_copies)
    uint32_t mma_mode;     // the tile kernel where sm90: kMmaAuto (where it measured faster), kMmaOn (wherever
                           // it fits), kMmaOff (never), kMmaWide (kMmaOn with 16 warps per tile where the
                           // ring fits: mma_wide), kMmaWide32 (kMmaWide, and at one column Q4_0, IQ4_NL,
                           // Q4_K and Q5_K with two tiles per block: mma_two_tiles); generic_cuda's option tile_kernel
    uint32_t sms;          // multiprocessors
    uint32_t smem_optin;   // shared memory per block, opt-in maximum
    uint32_t smem_sm;      // shared memory per multiprocessor (0: unknown; the whole-vector path is not taken)
    uint32_t gpb;          // 4-row kernel: row groups per block (set by the launcher)
};

} // namespace kpr::cuda

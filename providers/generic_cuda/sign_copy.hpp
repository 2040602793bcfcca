// generic_cuda: the pieces of the sign_copy option (sign_copy.cu): IQ3_XXS one-column calls on a copy of the
// weights whose signs are spelled out.
#pragma once
#include "planar.hpp"

namespace kpr::generic_cuda {
// The copy's two layouts, each read by its own kernel (the values are WeightCopyKey layouts).
enum class SignCopyLayout : uint32_t {
    blocks = 2, // 8..32 rows per SM: 256-weight blocks with the signs spelled out, 8-byte aligned (TIQ3_XXS_Signs,
                // 104 bytes), read by the whole-vector kernel
    lanes = 3,  // over 32 rows per SM: each row as planes (indices, sign words, then d with four scales a word; 104
                // bytes a block, rows padded to 16), read by the lanes kernel (a thread per 32-weight position of
                // every row)
};
// Whether the copy serves `op` on `dev`, and in which layout.
struct SignCopyPlan {
    const char *no = nullptr; // why the copy cannot serve the op (null: it can)
    SignCopyLayout layout = SignCopyLayout::blocks;
};
SignCopyPlan sign_copy_plan(const kpr_op_desc *op, const kpr_device_desc *dev);
// The launcher of one-column calls on the copy (GemvArgs as for the GGUF rows: it sets the copy's row bytes).
GemvLaunchFnPtr sign_copy_launcher(SignCopyLayout layout);
// Bytes of the copy of `op`'s weights.
uint64_t sign_copy_bytes(const kpr_op_desc *op, SignCopyLayout layout);
// GGUF IQ3_XXS rows (`rows` rows of `nb256` blocks, back to back) -> the copy (the legacy default stream).
cudaError_t sign_copy_repack(const void *gguf, void *copy, uint64_t rows, uint64_t nb256, SignCopyLayout layout);
} // namespace kpr::generic_cuda

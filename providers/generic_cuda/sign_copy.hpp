// generic_cuda: the pieces of the sign_copy option (sign_copy.cu): IQ3_XXS one-column calls on a copy of the
// weights whose signs are spelled out (TIQ3_XXS_Signs, kpr_cuda_blocks.cuh).
#pragma once
#include "planar.hpp"

namespace kpr::generic_cuda {
// The launcher of one-column calls on the copy (GemvArgs as for the GGUF rows: it sets the copy's row bytes).
GemvLaunchFnPtr sign_copy_launcher();
// Why the copy cannot serve `op` on `dev` (null: it can).
const char *sign_copy_declines(const kpr_op_desc *op, const kpr_device_desc *dev);
// Bytes of the copy of `op`'s weights (102 for each 98-byte block, rounded up to 16).
uint64_t sign_copy_bytes(const kpr_op_desc *op);
// GGUF IQ3_XXS rows (`blocks` blocks in all, back to back) -> the copy (the legacy default stream).
cudaError_t sign_copy_repack(const void *gguf, void *copy, uint64_t blocks);
} // namespace kpr::generic_cuda

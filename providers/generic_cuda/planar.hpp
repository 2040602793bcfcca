// generic_cuda: the pieces of the planar_weights and block_lanes options (planar_q4.cu).
#pragma once
#include "kpr/provider.h"
#include "kpr_cuda_gemv_args.cuh"

#include <cuda_runtime.h>

namespace kpr::generic_cuda {
using GemvLaunchFnPtr = cudaError_t (*)(const kpr::cuda::GemvArgs &, uint32_t ncols, uint32_t tasks, bool pdl,
                                        cudaStream_t stream);
// The lanes kernel's launcher (1 or 2 columns) on planar weights for `type` (null: none).
GemvLaunchFnPtr planar_launcher(uint32_t type);
// Why the planar path cannot take `op` on `dev` (null: it can). smem_optin: shared memory per block.
const char *planar_declines(const kpr_op_desc *op, const kpr_device_desc *dev, uint32_t smem_optin);
// GGUF rows -> planar rows (the legacy default stream; rows of all experts).
cudaError_t planar_repack(const void *gguf, void *planar, uint64_t row_bytes, uint64_t rows, uint32_t nb);
// Q4_K read in place by the lanes kernel: the launcher (null: none for `type`) and why it cannot take `op`
// (null: it can).
GemvLaunchFnPtr block_lanes_launcher(uint32_t type);
const char *block_lanes_declines(const kpr_op_desc *op, const kpr_device_desc *dev, uint32_t smem_optin);
// Whether block_lanes = auto takes the lanes kernel for `op` at `ncols` columns on `sms` multiprocessors
// (Q4_K on its rows; Q4_0 / IQ4_NL on the planar copy that planar_weights makes).
bool lanes_auto(const kpr_op_desc *op, uint32_t sms, uint32_t ncols);
constexpr uint32_t kLanesMaxColumns = 2;
} // namespace kpr::generic_cuda

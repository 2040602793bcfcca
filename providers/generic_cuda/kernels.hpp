// generic_cuda: one launcher per weight type (each in its own translation unit, to compile in parallel).
#pragma once
#include "kpr_cuda_gemv.cuh"

namespace kpr::generic_cuda {
using LaunchFn = cudaError_t (*)(const kpr::cuda::GemvArgs &, uint32_t ncols, uint32_t tasks, bool pdl,
                                 cudaStream_t stream);
struct TypeKernel {
    uint32_t type;
    bool float_x;
    LaunchFn launch;
};
const TypeKernel *find_kernel(uint32_t type);
} // namespace kpr::generic_cuda

#define KPR_GENERIC_CUDA_TYPE(fn, T)                                                                           \
    namespace kpr::generic_cuda {                                                                              \
    cudaError_t fn(const kpr::cuda::GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s) {   \
        return kpr::cuda::launch_gemv_nc<T, kpr::cuda::TabGlobal>(a, ncols, tasks, pdl, s);                   \
    }                                                                                                          \
    }

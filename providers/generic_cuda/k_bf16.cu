#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_bf16, kpr::cuda::TBF16)

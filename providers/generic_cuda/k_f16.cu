#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_f16, kpr::cuda::TF16)

#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_f32, kpr::cuda::TF32)

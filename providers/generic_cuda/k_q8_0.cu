#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q8_0, kpr::cuda::TQ8_0)

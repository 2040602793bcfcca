#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q4_1, kpr::cuda::TQ4_1)

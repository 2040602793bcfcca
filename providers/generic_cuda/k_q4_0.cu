#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q4_0, kpr::cuda::TQ4_0)

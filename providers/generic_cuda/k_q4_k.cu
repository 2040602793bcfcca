#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q4_k, kpr::cuda::TQ4_K)

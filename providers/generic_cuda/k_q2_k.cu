#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q2_k, kpr::cuda::TQ2_K)

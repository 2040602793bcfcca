#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q6_k, kpr::cuda::TQ6_K)

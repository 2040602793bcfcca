#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q3_k, kpr::cuda::TQ3_K)

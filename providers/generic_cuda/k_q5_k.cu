#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q5_k, kpr::cuda::TQ5_K)

#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_q5_0, kpr::cuda::TQ5_0)

#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_iq3_s, kpr::cuda::TIQ3_S)

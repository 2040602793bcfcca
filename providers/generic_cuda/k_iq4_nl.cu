#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_iq4_nl, kpr::cuda::TIQ4_NL)

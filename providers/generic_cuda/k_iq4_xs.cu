#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_iq4_xs, kpr::cuda::TIQ4_XS)

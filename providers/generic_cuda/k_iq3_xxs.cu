#include "kernels.hpp"
KPR_GENERIC_CUDA_TYPE(launch_iq3_xxs, kpr::cuda::TIQ3_XXS)

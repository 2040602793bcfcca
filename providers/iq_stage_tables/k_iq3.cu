// iq_stage_tables kernels: the shared gemv_rows_kernel with the IQ3 tables staged in shared memory.
#include "kpr_cuda_gemv.cuh"

namespace kpr::iq_stage_tables {
cudaError_t launch_iq3_xxs(const cuda::GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s) {
    return cuda::launch_gemv_nc<cuda::TIQ3_XXS, cuda::TabSharedXXS>(a, ncols, tasks, pdl, s);
}
} // namespace kpr::iq_stage_tables

// generic_cuda's one-column calls on planar weights (option planar_weights): Q4_0 and IQ4_NL on compute
// capability 9.0, kernels in kpr_cuda_planar.cuh.
#include "kpr_cuda_planar.cuh"
#include "planar.hpp"

namespace kpr::generic_cuda {
namespace {

// Matrices of at least this many weights take one kernel per call (each thread quantizes its own
// activations); smaller ones the quantizer and the kernel, whose launch boundary costs less there than
// the per-thread quantization (docs/benchmarks.md, "Planar weights in generic_cuda").
constexpr uint64_t kOneKernelWeights = uint64_t(1) << 25;

template <bool NL>
cudaError_t launch_planar(const cuda::GemvArgs &a, uint32_t, uint32_t, bool pdl, cudaStream_t s) {
    cuda::PlanarPlan plan;
    if (!cuda::planar_plan(a.rows, a.nb, a.sms, a.smem_optin, &plan)) return cudaErrorNotSupported;
    const bool one_kernel =
        uint64_t(a.rows) * a.nb * 32 >= kOneKernelWeights && reinterpret_cast<uintptr_t>(a.xf) % 16 == 0;
    const cuda::PlanarArgs pa{a.w, a.row_bytes, a.rows, a.nb, 0, 0, a.xf, a.y};
    const cuda::ActQ8 xq{a.x.q, a.x.d, a.x.s, a.x.cols};
    return cuda::launch_planar_q4<NL>(pa, plan, a.sms, !one_kernel, xq, pdl, s);
}

} // namespace

GemvLaunchFnPtr planar_launcher(uint32_t type) {
    if (type == KPR_TYPE_Q4_0) return launch_planar<false>;
    if (type == KPR_TYPE_IQ4_NL) return launch_planar<true>;
    return nullptr;
}

const char *planar_declines(const kpr_op_desc *op, const kpr_device_desc *dev, uint32_t smem_optin) {
    if (op->weight_type != KPR_TYPE_Q4_0 && op->weight_type != KPR_TYPE_IQ4_NL) return "not Q4_0 or IQ4_NL";
    if (op->kind != KPR_OP_GEMV) return "grouped gemv";
    if (dev->cc_major < 9) return "compute capability below 9.0";
    if (op->cols % 256 != 0) return "rows not a multiple of 256 weights (16-byte aligned planar rows)";
    cuda::PlanarPlan plan;
    if (op->rows > UINT32_MAX ||
        !cuda::planar_plan(static_cast<uint32_t>(op->rows), static_cast<uint32_t>(op->cols / 32), dev->sm_count,
                           smem_optin, &plan))
        return "rows wider than 16384 weights, or row sums beyond the shared memory of a block";
    return nullptr;
}

cudaError_t planar_repack(const void *gguf, void *planar, uint64_t row_bytes, uint64_t rows, uint32_t nb) {
    const uint64_t n = rows * nb;
    cuda::planar_repack_q4<<<static_cast<unsigned>((n + 255) / 256), 256>>>(static_cast<const uint8_t *>(gguf),
                                                                            static_cast<uint8_t *>(planar), row_bytes,
                                                                            rows, nb);
    return cudaGetLastError();
}

} // namespace kpr::generic_cuda

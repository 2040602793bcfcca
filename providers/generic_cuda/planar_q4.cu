// generic_cuda's one-column calls in which each thread owns one 32-weight block position of every row
// (kpr_cuda_planar.cuh), on compute capability 9.0: Q4_0 and IQ4_NL on a planar copy of the weights
// (option planar_weights), Q4_K on its own GGUF rows (option block_lanes).
#include "kpr_cuda_planar.cuh"
#include "planar.hpp"

namespace kpr::generic_cuda {
namespace {

// Matrices of at least this many weights take one kernel per call (each thread quantizes its own
// activations); smaller ones the quantizer and the kernel, whose launch boundary costs less there than
// the per-thread quantization (docs/cuda-tuning-log.md, "Planar weights in generic_cuda").
constexpr uint64_t kOneKernelWeights = uint64_t(1) << 25;

template <int F, int NC>
cudaError_t launch_lanes_nc(const cuda::GemvArgs &a, bool pdl, cudaStream_t s) {
    const uint32_t nb32 = F == cuda::kLanesQ4_K ? a.nb * 8 : a.nb; // GemvArgs::nb counts the type's blocks
    cuda::PlanarPlan plan;
    if (!cuda::planar_plan(a.rows, nb32, a.sms, a.smem_optin, &plan, NC)) return cudaErrorNotSupported;
    const bool one_kernel =
        uint64_t(a.rows) * nb32 * 32 >= kOneKernelWeights && reinterpret_cast<uintptr_t>(a.xf) % 16 == 0;
    const cuda::PlanarArgs pa{a.w, a.row_bytes, a.rows, nb32, 0, 0, a.xf, a.y};
    const cuda::ActQ8 xq{a.x.q, a.x.d, a.x.s, a.x.cols};
    return cuda::launch_planar<F, NC>(pa, plan, a.sms, !one_kernel, xq, pdl, s);
}

template <int F>
cudaError_t launch_lanes(const cuda::GemvArgs &a, uint32_t ncols, uint32_t, bool pdl, cudaStream_t s) {
    if (ncols == 1) return launch_lanes_nc<F, 1>(a, pdl, s);
    if (ncols == 2) return launch_lanes_nc<F, 2>(a, pdl, s);
    return cudaErrorNotSupported;
}

const char *lanes_declines(const kpr_op_desc *op, const kpr_device_desc *dev, uint32_t smem_optin) {
    if (op->kind != KPR_OP_GEMV) return "grouped gemv";
    // (the plan for 2 columns needs the most shared memory: if it fits, both do)
    if (dev->cc_major < 9) return "compute capability below 9.0";
    if (op->cols % 256 != 0) return "rows not a multiple of 256 weights (16-byte aligned planar rows)";
    cuda::PlanarPlan plan;
    if (op->rows > UINT32_MAX ||
        !cuda::planar_plan(static_cast<uint32_t>(op->rows), static_cast<uint32_t>(op->cols / 32), dev->sm_count,
                           smem_optin, &plan, 2))
        return "rows wider than 16384 weights, or row sums beyond the shared memory of a block";
    return nullptr;
}

} // namespace

GemvLaunchFnPtr planar_launcher(uint32_t type) {
    if (type == KPR_TYPE_Q4_0) return launch_lanes<cuda::kPlanarQ4_0>;
    if (type == KPR_TYPE_IQ4_NL) return launch_lanes<cuda::kPlanarIQ4_NL>;
    return nullptr;
}

const char *planar_declines(const kpr_op_desc *op, const kpr_device_desc *dev, uint32_t smem_optin) {
    if (op->weight_type != KPR_TYPE_Q4_0 && op->weight_type != KPR_TYPE_IQ4_NL) return "not Q4_0 or IQ4_NL";
    return lanes_declines(op, dev, smem_optin);
}

cudaError_t planar_repack(const void *gguf, void *planar, uint64_t row_bytes, uint64_t rows, uint32_t nb) {
    const uint64_t n = rows * nb;
    cuda::planar_repack_q4<<<static_cast<unsigned>((n + 255) / 256), 256>>>(static_cast<const uint8_t *>(gguf),
                                                                            static_cast<uint8_t *>(planar), row_bytes,
                                                                            rows, nb);
    return cudaGetLastError();
}

GemvLaunchFnPtr block_lanes_launcher(uint32_t type) {
    return type == KPR_TYPE_Q4_K ? launch_lanes<cuda::kLanesQ4_K> : nullptr;
}

const char *block_lanes_declines(const kpr_op_desc *op, const kpr_device_desc *dev, uint32_t smem_optin) {
    if (op->weight_type != KPR_TYPE_Q4_K) return "not Q4_K";
    return lanes_declines(op, dev, smem_optin);
}

bool lanes_auto(const kpr_op_desc *op, uint32_t sms, uint32_t ncols) {
    // Measured on the H200 (docs/cuda-tuning-log.md, "Q4_K with a thread per block position").
    // Q4_0 / IQ4_NL on the planar copy: at one column faster on most shapes (the copy is made for it); at
    // two no consistent gain (Q4_0 0.92-1.18x, IQ4_NL 0.86-1.11x), so the GGUF-layout kernels keep them.
    if (op->weight_type != KPR_TYPE_Q4_K) return ncols == 1;
    // Q4_K, one column: faster than the row kernel on every shape with more than 32 rows per
    // multiprocessor (14336 x 4096 1.24x, 5120 x 13824 1.24x, 11008 x 4096 1.11x, 8192 x 8192 1.07x,
    // 28672 x 8192 1.16x), slower on those with fewer, where the row kernel keeps the whole activation
    // vector per block (4096 x 14336 0.97x, 4096 x 4096 0.94x, 1024 x 4096 0.89x). Two columns, the same
    // line: above it 1.00-1.11x (14336 x 4096 1.09x, 28672 x 8192 1.11x), below it 4096 x 14336 0.85x.
    return ncols <= 2 && op->rows > 32ull * sms;
}

} // namespace kpr::generic_cuda

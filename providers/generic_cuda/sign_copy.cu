// generic_cuda: the sign_copy option. IQ3_XXS one-column calls on compute capability 9.0 read a copy of the weights
// whose blocks hold each sub-block's 32 signs spelled out (TIQ3_XXS_Signs, 102 bytes a block against GGUF's 98), so
// the decode needs no 7-bit sign field, multiply or parity. Other column counts, and ops the copy does not serve,
// read the caller's GGUF rows. Measured in docs/cuda-tuning-log.md "IQ3_XXS signs spelled out in a copy".
#include "kernels.hpp"
#include "sign_copy.hpp"

#include <algorithm>
#include <cstdint>

namespace kpr::generic_cuda {
namespace {

constexpr uint32_t kGgufBytes = cuda::TIQ3_XXS::BS, kCopyBytes = cuda::TIQ3_XXS_Signs::BS;
static_assert(kGgufBytes == 98 && kCopyBytes == 102, "the copy adds 4 bytes of scales to each block");

// One thread per block, in 2-byte pieces (both layouts are 2-byte aligned): d and qs as they are, each aux word
// (28 sign bits and a 4-bit scale) as its spelled-out sign word, the scales gathered after them.
__global__ void repack_signs(const uint16_t *__restrict__ src, uint16_t *__restrict__ dst, uint64_t blocks) {
    const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
    if (i >= blocks) return;
    const uint16_t *s = src + i * (kGgufBytes / 2);
    uint16_t *d = dst + i * (kCopyBytes / 2);
    for (int h = 0; h < 33; ++h) d[h] = s[h]; // bytes 0-65
    uint32_t scales = 0;
    for (int ib = 0; ib < 8; ++ib) {
        const uint32_t aux = s[33 + 2 * ib] | static_cast<uint32_t>(s[34 + 2 * ib]) << 16;
        const uint32_t e = cuda::iq3_xxs_spelled_signs(aux);
        d[33 + 2 * ib] = static_cast<uint16_t>(e);
        d[34 + 2 * ib] = static_cast<uint16_t>(e >> 16);
        scales |= (aux >> 28) << (4 * ib);
    }
    d[49] = static_cast<uint16_t>(scales);
    d[50] = static_cast<uint16_t>(scales >> 16);
}

cudaError_t launch_signs(const cuda::GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s) {
    if (ncols != 1 || tasks != 1 || a.ids != nullptr) return cudaErrorInvalidValue; // (sign_copy_declines)
    cuda::GemvArgs b = a;
    b.row_bytes = static_cast<uint64_t>(a.nb) * kCopyBytes;
    b.expert_bytes = b.row_bytes * a.rows;
    b.aligned = b.row_bytes % 16 == 0 ? 1u : 0u; // (the copy itself is cudaMalloc'd)
    b.sm80 = b.rows80 && b.aligned ? 1u : 0u;
    return cuda::launch_gemv_one<cuda::TIQ3_XXS_Signs, cuda::TabGlobal>(b, pdl, s);
}

} // namespace

GemvLaunchFnPtr sign_copy_launcher() { return launch_signs; }

const char *sign_copy_declines(const kpr_op_desc *op, const kpr_device_desc *dev) {
    if (op->weight_type != KPR_TYPE_IQ3_XXS) return "not an IQ3_XXS weight";
    if (op->kind != KPR_OP_GEMV) return "grouped GEMV reads the GGUF rows";
    if (dev->cc_major < 9) return "compute capability below 9.0 (measured on 9.0 only)";
    // Outside the whole-vector kernel's window the row kernel serves one column, and there the copy measured
    // 0.92-1.12x on an H100 (its fewer registers change the blocks per SM, and so the waves), so it is left out
    if (!cuda::whole_vector_rows_ok(KPR_TYPE_IQ3_XXS, static_cast<uint32_t>(std::min<uint64_t>(op->rows, UINT32_MAX)),
                                    dev->sm_count))
        return "rows outside 8..32 per multiprocessor (the copy serves the whole-vector kernel only)";
    return nullptr;
}

// Rounded up to 16 bytes: the cp.async rings read a row's last 16-byte line with a source size of only its own bytes,
// which compute-sanitizer's memcheck still counts as a 16-byte read (GGUF tensors in the self-tests have guard bytes
// after them; the copy has these)
uint64_t sign_copy_bytes(const kpr_op_desc *op) { return (op->rows * (op->cols / 256) * kCopyBytes + 15) / 16 * 16; }

cudaError_t sign_copy_repack(const void *gguf, void *copy, uint64_t blocks) {
    if (blocks == 0) return cudaSuccess;
    repack_signs<<<static_cast<unsigned>((blocks + 255) / 256), 256>>>(static_cast<const uint16_t *>(gguf),
                                                                        static_cast<uint16_t *>(copy), blocks);
    return cudaGetLastError();
}

} // namespace kpr::generic_cuda

// planar_probe_kernels.cuh -- what kpr_planar_probe adds to the planar building blocks it shares with
// generic_cuda (kpr_cuda_planar.cuh: the layout, the repack, the quantization into registers, the dot
// products, the reductions): its timing probes' activation loads and a dot product that can be switched
// off (fourteenth and fifteenth sessions; docs/cuda-tuning-log.md, "The planar probe" and "Where a one-kernel
// call's time goes"). The probe's kernel (planar_ldg, with its variants) is in kpr_planar_probe.cu. The
// fourteenth session's cp.async ring kernels were removed after its measurements (commit b04e350 has them).
#pragma once

#include "kpr_cuda_planar.cuh"

#include <cstdint>

namespace kpr::cuda {

// The 32 floats requested in program order (volatile: issued before the weight loads that follow).
__device__ __forceinline__ void load_x32(const float *xb, float (&v)[32]) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
        asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v[4 * i]), "=f"(v[4 * i + 1]), "=f"(v[4 * i + 2]), "=f"(v[4 * i + 3])
                     : "l"(xb + 4 * i));
}

// dot_q4_block (kpr_cuda_planar.cuh), or with MODE 1 a byte of the words instead (the structure's own
// cost; wrong results).
template <bool NL, int MODE>
__device__ __forceinline__ int probe_dot_q4_block(const uint32_t (&q)[4], const int (&xw)[8], const int (&xn)[8], int c0) {
    if constexpr (MODE == 1) return static_cast<int>((q[0] ^ q[1] ^ q[2] ^ q[3]) & 0xFFu);
    else return dot_q4_block<NL>(q, xw, xn, c0);
}

} // namespace kpr::cuda

// kpr_cuda_q8plane.cuh -- Q8_0 repacked as an int8 plane plus float scales, and the GEMV over it
// (sm60_q8's kernel; in the common folder so the Q8_0 block decoding stays in one place:
// repack_q8_0 reads GGUF blocks with the same field offsets as TQ8_0).
//
// Layout: plane[row][k] int8 (rows * cols bytes, 16-byte aligned rows when cols % 16 == 0),
// scales[row][b] float (the block's f16 d widened).
//
// GEMV: persistent blocks of 8 warps. Each block first copies the q8_1 activations of all columns
// (int8 plane + d + s, planar, from the quantizer's scratch) into shared memory: one barrier per block,
// none per row. A row is owned by a group of G lanes (32: a warp, 16 for rows narrower than 2048,
// 8 under 1024); lane l of the group reads the 32-byte blocks l, l + G, ... of the row with two
// 16-byte loads through the read-only cache, the matching activations with two 16-byte shared loads,
// and does 8 byte dot products per column (__dp4a, or its emulation on 6.0 / when EMU). The group's
// partial sums meet in a shuffle reduction.
#pragma once

#include "kpr_cuda_act.cuh"
#include "kpr_cuda_util.cuh"

#include <cstdint>

namespace kpr::cuda {

// One thread per Q8_0 block.
static __global__ void repack_q8_0(const uint8_t *__restrict__ src, uint64_t nblocks, int8_t *__restrict__ plane,
                                   float *__restrict__ scales) {
    const uint64_t b = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
    if (b >= nblocks) return;
    const uint16_t *h = reinterpret_cast<const uint16_t *>(src + b * 34); // blocks are 2-byte aligned
    scales[b] = f16_to_float(h[0]);
    uint32_t *dst = reinterpret_cast<uint32_t *>(plane + b * 32);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = static_cast<uint32_t>(h[1 + 2 * i]) | (static_cast<uint32_t>(h[2 + 2 * i]) << 16);
}

struct Q8PlaneArgs {
    const int8_t *plane;
    const float *scales;
    uint32_t rows, cols;
    ActQ8 x; // q8_1 activations of ncols vectors
    float *y;
};

// Shared-memory bytes the kernel stages for ncols columns of `cols` values: the int8 plane and the two
// q8_1 scale planes (d and s), i.e. 1.25 bytes per activation value.
inline uint64_t q8plane_smem_bytes(uint64_t cols, uint32_t ncols) { return uint64_t(ncols) * (cols + cols / 32 * 8); }

template <int NC, int G, bool EMU>
__global__ void __launch_bounds__(256) q8plane_gemv(const Q8PlaneArgs a) {
    extern __shared__ __align__(16) uint8_t smem[];
    const uint32_t cols = a.cols, nb = cols / 32;
    int8_t *xq = reinterpret_cast<int8_t *>(smem);
    float *xd = reinterpret_cast<float *>(smem + size_t(NC) * cols);
    float *xs = xd + size_t(NC) * nb;

    pdl_wait();
    // stage the activations once per block: 16-byte copies
    {
        const uint4 *src = reinterpret_cast<const uint4 *>(a.x.q);
        uint4 *dst = reinterpret_cast<uint4 *>(xq);
        const uint32_t n16 = NC * cols / 16;
        for (uint32_t i = threadIdx.x; i < n16; i += blockDim.x) dst[i] = __ldg(src + i);
        for (uint32_t i = threadIdx.x; i < NC * nb; i += blockDim.x) {
            xd[i] = __ldg(a.x.d + i);
            xs[i] = __ldg(a.x.s + i);
        }
    }
    __syncthreads();
    pdl_launch_dependents();

    constexpr int GROUPS = 32 / G;
    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const uint32_t gl = lane % G, grp = lane / G;
    const uint32_t warps = blockDim.x / 32;
    const uint32_t first = (blockIdx.x * warps + warp) * GROUPS + grp;
    const uint32_t stride = gridDim.x * warps * GROUPS;
    // rows are processed in lock-step by the whole warp so that shuffles stay convergent
    const uint32_t rows_padded = (a.rows + GROUPS - 1) / GROUPS * GROUPS;
    for (uint32_t row = first; row - grp < rows_padded; row += stride) {
        if (row - grp >= rows_padded) break;
        const bool valid = row < a.rows;
        const uint32_t rr = valid ? row : a.rows - 1;
        const int8_t *wr = a.plane + uint64_t(rr) * cols;
        const float *sr = a.scales + uint64_t(rr) * nb;
        float acc[NC];
#pragma unroll
        for (int j = 0; j < NC; ++j) acc[j] = 0.0f;
        uint32_t b = gl;
        // two blocks per lane per step: four 16-byte weight loads in flight. Not for 3 columns in
        // 8/16-lane groups: there ptxas keeps to 64 registers (256 threads) and spills the unrolled step
        // (checked by scripts/check-pascal); one block per step fits.
        constexpr bool kTwoBlocks = !(NC == 3 && G < 32);
        for (; kTwoBlocks && b + G < nb; b += 2 * G) {
            const uint4 w0 = __ldg(reinterpret_cast<const uint4 *>(wr + 32 * b));
            const uint4 w1 = __ldg(reinterpret_cast<const uint4 *>(wr + 32 * b + 16));
            const uint4 w2 = __ldg(reinterpret_cast<const uint4 *>(wr + 32 * (b + G)));
            const uint4 w3 = __ldg(reinterpret_cast<const uint4 *>(wr + 32 * (b + G) + 16));
            const float d0 = __ldg(sr + b), d1 = __ldg(sr + b + G);
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                const uint4 *xp = reinterpret_cast<const uint4 *>(xq + size_t(j) * cols);
                const uint4 x0 = xp[2 * b], x1 = xp[2 * b + 1], x2 = xp[2 * (b + G)], x3 = xp[2 * (b + G) + 1];
                int s0 = 0, s1 = 0;
                s0 = dp4a<EMU>(int(w0.x), int(x0.x), s0);
                s0 = dp4a<EMU>(int(w0.y), int(x0.y), s0);
                s0 = dp4a<EMU>(int(w0.z), int(x0.z), s0);
                s0 = dp4a<EMU>(int(w0.w), int(x0.w), s0);
                s0 = dp4a<EMU>(int(w1.x), int(x1.x), s0);
                s0 = dp4a<EMU>(int(w1.y), int(x1.y), s0);
                s0 = dp4a<EMU>(int(w1.z), int(x1.z), s0);
                s0 = dp4a<EMU>(int(w1.w), int(x1.w), s0);
                s1 = dp4a<EMU>(int(w2.x), int(x2.x), s1);
                s1 = dp4a<EMU>(int(w2.y), int(x2.y), s1);
                s1 = dp4a<EMU>(int(w2.z), int(x2.z), s1);
                s1 = dp4a<EMU>(int(w2.w), int(x2.w), s1);
                s1 = dp4a<EMU>(int(w3.x), int(x3.x), s1);
                s1 = dp4a<EMU>(int(w3.y), int(x3.y), s1);
                s1 = dp4a<EMU>(int(w3.z), int(x3.z), s1);
                s1 = dp4a<EMU>(int(w3.w), int(x3.w), s1);
                const float dx0 = xd[j * nb + b], dx1 = xd[j * nb + b + G];
                acc[j] = __fmaf_rn(static_cast<float>(s0), __fmul_rn(d0, dx0), acc[j]);
                acc[j] = __fmaf_rn(static_cast<float>(s1), __fmul_rn(d1, dx1), acc[j]);
            }
        }
        for (; b < nb; b += G) {
            const uint4 w0 = __ldg(reinterpret_cast<const uint4 *>(wr + 32 * b));
            const uint4 w1 = __ldg(reinterpret_cast<const uint4 *>(wr + 32 * b + 16));
            const float d0 = __ldg(sr + b);
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                const uint4 *xp = reinterpret_cast<const uint4 *>(xq + size_t(j) * cols);
                const uint4 x0 = xp[2 * b], x1 = xp[2 * b + 1];
                int s0 = 0;
                s0 = dp4a<EMU>(int(w0.x), int(x0.x), s0);
                s0 = dp4a<EMU>(int(w0.y), int(x0.y), s0);
                s0 = dp4a<EMU>(int(w0.z), int(x0.z), s0);
                s0 = dp4a<EMU>(int(w0.w), int(x0.w), s0);
                s0 = dp4a<EMU>(int(w1.x), int(x1.x), s0);
                s0 = dp4a<EMU>(int(w1.y), int(x1.y), s0);
                s0 = dp4a<EMU>(int(w1.z), int(x1.z), s0);
                s0 = dp4a<EMU>(int(w1.w), int(x1.w), s0);
                acc[j] = __fmaf_rn(static_cast<float>(s0), __fmul_rn(d0, xd[j * nb + b]), acc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            float v = acc[j];
#pragma unroll
            for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (gl == 0 && valid) a.y[uint64_t(j) * a.rows + row] = v;
        }
    }
}

} // namespace kpr::cuda

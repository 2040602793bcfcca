// kpr_cuda_gemv.cuh -- the row-streaming GEMV / grouped-GEMV kernel every block type plugs into.
//
// A warp owns R rows. It walks them chunk by chunk (T::CB blocks of each row): the chunk's bytes are
// fetched with 16-byte streaming loads (one chunk ahead, in registers), written to the warp's slice of
// shared memory, and decoded from there, so the 2-byte-aligned GGUF blocks never dictate the width of
// a global load. Each lane accumulates its items in a fixed order; a butterfly shuffle reduction ends
// the row. Grouped GEMV uses the same kernel with blockIdx.y selecting (column, expert slot); the expert
// id is read on the device.
#pragma once

#include "kpr_cuda_act.cuh"
#include "kpr_cuda_blocks.cuh"
#include "kpr_cuda_util.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace kpr::cuda {

constexpr int kGemvWarps = 4;

struct GemvArgs {
    const uint8_t *w;      // GGUF blocks
    uint64_t row_bytes;
    uint64_t expert_bytes; // grouped: bytes of one expert matrix
    uint32_t rows;
    uint32_t nb;           // blocks per row
    const int32_t *ids;    // grouped: [ncols][n_used]; null for plain GEMV
    uint32_t n_used;
    uint32_t x_slots;
    uint32_t n_experts;
    uint32_t aligned;      // w, row_bytes and expert_bytes are multiples of 16
    XView x;
    float *y;
};

template <class T>
struct ChunkGeom {
    static constexpr uint32_t BYTES = T::CB * T::BS;
    static constexpr uint32_t NV = (BYTES + 15) / 16;   // 16-byte vectors per row chunk
    static constexpr uint32_t VPL = (NV + 31) / 32;     // per lane
    static constexpr uint32_t SMEM_ROW = NV * 16 + 16;  // + slack for 2-byte-aligned word reads
    static constexpr uint32_t ITEMS = T::CB * T::PARTS / 32;
    static constexpr uint32_t EPI = T::QK / T::PARTS;
    // cp.async stages (compute capability 8.0+): 3 while a warp's chunk is small, else 2 (static shared
    // memory stays under 48 KiB per block and 4096 rows stay resident in one wave on 132 SMs)
    template <int R>
    static constexpr uint32_t stages() { return SMEM_ROW * R <= 2200 ? 3 : 2; }
    static_assert(T::CB * T::PARTS % 32 == 0, "a chunk must give every lane the same number of items");
};

// Unaligned fallback: the same 16 bytes, fetched 2 bytes at a time (blocks are 2-byte aligned).
__device__ __forceinline__ uint4 ld16_a2(const uint8_t *p, uint32_t avail) {
    uint32_t w[4] = {0, 0, 0, 0};
    const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
#pragma unroll
    for (int i = 0; i < 8; ++i)
        if (2u * i < avail) w[i / 2] |= static_cast<uint32_t>(__ldg(h + i)) << (16 * (i % 2));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int NC, int R>
struct GemvOcc {
#if defined(__CUDA_ARCH__) && KPR_ARCH < 800
    // register-staged path (no cp.async): the next chunk lives in registers, so allow 128 / 255 of them
    // (no spills; scripts/check-pascal checks it). Pascal-class GPUs hold far fewer rows per wave anyway.
    static constexpr int MIN_BLOCKS = R == 1 ? 4 : 2;
#else
    static constexpr int MIN_BLOCKS = R == 1 ? 8 : 4; // 32 resp. 16 warps per SM: 4096 rows in one wave
#endif
};

template <class T, int NC, int R, class Tab>
__global__ void __launch_bounds__(32 * kGemvWarps, (GemvOcc<NC, R>::MIN_BLOCKS))
    gemv_rows_kernel(const GemvArgs a) {
    using G = ChunkGeom<T>;
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
    constexpr bool kAsync = true; // cp.async ring of stages
    constexpr uint32_t S = G::template stages<R>();
#else
    constexpr bool kAsync = false; // registers hold the next chunk
    constexpr uint32_t S = 1;
#endif
    __shared__ alignas(16) uint8_t smem[kGemvWarps][S][R][G::SMEM_ROW];
    const Tab tab = Tab::prologue(); // may stage tables in shared memory (with a block barrier)

    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t row0 = (blockIdx.x * kGemvWarps + warp) * R;
    if (row0 >= a.rows) return;

    const uint8_t *wbase = a.w;
    XView x = a.x;
    float *y = a.y;
    bool bad_id = false;
    if (a.ids != nullptr) {
        const uint32_t task = blockIdx.y;
        const uint32_t j = task / a.n_used, s = task % a.n_used;
        int32_t e = __ldg(a.ids + task);
        if (e < 0 || static_cast<uint32_t>(e) >= a.n_experts) {
            bad_id = true;
            e = 0;
        }
        wbase += static_cast<uint64_t>(e) * a.expert_bytes;
        x.vbase = j * a.x_slots + (a.x_slots == 1 ? 0 : s);
        y += static_cast<uint64_t>(task) * a.rows;
    }

    const uint8_t *rp[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const uint32_t rr = min(row0 + r, a.rows - 1);
        rp[r] = wbase + static_cast<uint64_t>(rr) * a.row_bytes;
    }

    const uint32_t nchunks = (a.nb + T::CB - 1) / T::CB;

    float acc[R][NC];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < NC; ++j) acc[r][j] = 0.0f;

    // decode chunk c from stage st: the lane's items in a fixed order (the same in both paths)
    auto compute = [&](uint32_t c, uint32_t st) {
        const uint32_t nblk = min(T::CB, a.nb - c * T::CB);
#pragma unroll
        for (int t = 0; t < static_cast<int>(G::ITEMS); ++t) {
            const uint32_t it = lane + 32u * t;
            const uint32_t b = it / T::PARTS, part = it % T::PARTS;
            if (b < nblk) {
                const uint8_t *wp[R];
#pragma unroll
                for (int r = 0; r < R; ++r) wp[r] = &smem[warp][st][r][b * T::BS];
                const uint32_t k0 = (c * T::CB + b) * T::QK + part * G::EPI;
                T::template item<NC, R, Tab>(wp, part, x, k0, tab, acc);
            }
        }
    };

    if (kAsync && a.aligned) {
        // cp.async: S - 1 chunks in flight while one is decoded, no registers spent on staging
        auto issue = [&](uint32_t c) {
            const uint32_t st = c % S;
            const uint64_t off = static_cast<uint64_t>(c) * G::BYTES;
            const uint32_t bytes = min(G::BYTES, (a.nb - c * T::CB) * T::BS);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int i = 0; i < static_cast<int>(G::VPL); ++i) {
                    const uint32_t v = lane + 32u * i;
                    if (v < G::NV && 16u * v < bytes) cp_async16(&smem[warp][st][r][16u * v], rp[r] + off + 16u * v);
                }
        };
#pragma unroll
        for (uint32_t c = 0; c + 1 < S; ++c) {
            if (c < nchunks) issue(c);
            cp_async_commit();
        }
        pdl_wait();              // activations are written by the kernel before this one
        pdl_launch_dependents(); // the next call's quantizer may launch (it waits for us before writing)
        for (uint32_t c = 0; c < nchunks; ++c) {
            if (c + S - 1 < nchunks) issue(c + S - 1);
            cp_async_commit();
            cp_async_wait<S - 1>(); // chunk c has landed
            __syncwarp();
            compute(c, c % S);
            __syncwarp(); // stage c % S is refilled next iteration
        }
    } else {
        uint4 buf[R][G::VPL];
        auto fetch = [&](uint32_t c) {
            const uint64_t off = static_cast<uint64_t>(c) * G::BYTES;
            const uint32_t bytes = min(G::BYTES, (a.nb - c * T::CB) * T::BS);
#pragma unroll
            for (int r = 0; r < R; ++r) {
#pragma unroll
                for (int i = 0; i < static_cast<int>(G::VPL); ++i) {
                    const uint32_t v = lane + 32u * i;
                    if (v < G::NV && 16u * v < bytes) {
                        const uint8_t *src = rp[r] + off + 16u * v;
                        buf[r][i] = a.aligned ? ldg_stream16(src) : ld16_a2(src, bytes - 16u * v);
                    }
                }
            }
        };
        fetch(0);
        pdl_wait();
        pdl_launch_dependents();
        for (uint32_t c = 0; c < nchunks; ++c) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int i = 0; i < static_cast<int>(G::VPL); ++i) {
                    const uint32_t v = lane + 32u * i;
                    if (v < G::NV) *reinterpret_cast<uint4 *>(&smem[warp][0][r][16u * v]) = buf[r][i];
                }
            __syncwarp();
            if (c + 1 < nchunks) fetch(c + 1);
            compute(c, 0);
            __syncwarp();
        }
    }

#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const float v = warp_sum(acc[r][j]);
            if (lane == 0 && row0 + r < a.rows)
                y[static_cast<uint64_t>(j) * a.rows + row0 + r] = bad_id ? __int_as_float(0x7fc00000) : v;
        }
    }
}

// Rows per warp for NC columns: two rows share each activation load once there are several columns.
template <int NC>
constexpr int rows_per_warp() {
    return NC >= 3 ? 2 : 1;
}

// Launches gemv_rows_kernel<T, NC, R, Tab>: grid.x covers the rows, grid.y the grouped tasks.
// `pdl`: launch with programmatic stream serialization (compute capability 9.0: the kernel may start
// while the activation quantizer finishes).
template <class T, int NC, class Tab>
cudaError_t launch_gemv(const GemvArgs &a, uint32_t tasks, bool pdl, cudaStream_t stream) {
    constexpr int R = rows_per_warp<NC>();
    const uint32_t rows_per_block = kGemvWarps * R;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((a.rows + rows_per_block - 1) / rows_per_block, tasks, 1);
    cfg.blockDim = dim3(32 * kGemvWarps, 1, 1);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, gemv_rows_kernel<T, NC, R, Tab>, a);
}

// Dispatch on the runtime column count (plain GEMV: 1..8; grouped tasks run with NC = 1).
template <class T, class Tab>
cudaError_t launch_gemv_nc(const GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s) {
    switch (ncols) {
    case 1: return launch_gemv<T, 1, Tab>(a, tasks, pdl, s);
    case 2: return launch_gemv<T, 2, Tab>(a, tasks, pdl, s);
    case 3: return launch_gemv<T, 3, Tab>(a, tasks, pdl, s);
    case 4: return launch_gemv<T, 4, Tab>(a, tasks, pdl, s);
    case 5: return launch_gemv<T, 5, Tab>(a, tasks, pdl, s);
    case 6: return launch_gemv<T, 6, Tab>(a, tasks, pdl, s);
    case 7: return launch_gemv<T, 7, Tab>(a, tasks, pdl, s);
    case 8: return launch_gemv<T, 8, Tab>(a, tasks, pdl, s);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace kpr::cuda

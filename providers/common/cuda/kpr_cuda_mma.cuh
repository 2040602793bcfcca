// kpr_cuda_mma.cuh -- the tensor-core GEMV (compute capability 9.0): int8 `mma.sync` tiles of 16 rows x
// 8 columns x 32 weights.
//
// A block owns one tile of 16 rows; its W warps split the row length into W contiguous slices. A warp
// streams the 16 rows of its slice chunk by chunk (CB blocks of each row) into its ring in shared memory
// with bulk copies, one per row chunk, plus one for the chunk's activations of every column: the
// quantizer writes them in the order a stage holds them (ActTiles, kpr_cuda_act.cuh). For each 32-weight
// block a warp issues one mma.m16n8k32.s8.s8.s32: the A fragment is the 16 rows' int8 weights, the B
// fragment the q8_1 activations of up to 8 columns (columns past ncols are zero). The exact integer sums
// come back in the C fragment; each lane scales its four (row, column) sums by d_w * d_x in float, as the
// row kernel does per block. At the end the W slices are added in shared memory.
//
// Why: in the row kernel every activation load serves one or two rows, so at 8 columns a call reads
// four times its weight bytes in activations through L1; here a B fragment serves 16 rows, and one
// instruction does 16 x 8 x 32 multiply-adds. Launched on 9.0 only (bulk copies, and where it was
// measured).
#pragma once

#include "kpr_cuda_act.cuh"
#include "kpr_cuda_blocks.cuh"
#include "kpr_cuda_gemv_args.cuh"
#include "kpr_cuda_util.cuh"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace kpr::cuda {

#if defined(__CUDA_ARCH__) && KPR_ARCH >= 800
#define KPR_MMA_INT8 1
#else
#define KPR_MMA_INT8 0
#endif

// D = A(16x32, rows) * B(32x8, columns) + 0, int8 inputs, int32 sums. Lane l = 4g + t holds
//   a[0]: row g,   k 4t..4t+3      a[1]: row g+8, k 4t..4t+3
//   a[2]: row g,   k 16+4t..+3     a[3]: row g+8, k 16+4t..+3
//   b[0]: column g, k 4t..4t+3     b[1]: column g, k 16+4t..+3
//   d[0], d[1]: row g, columns 2t, 2t+1;  d[2], d[3]: row g+8, columns 2t, 2t+1
__device__ __forceinline__ void mma_s8_16x8x32(const uint32_t (&a)[4], const uint32_t (&b)[2], int (&d)[4]) {
#if KPR_MMA_INT8
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %10, %10, %10};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
#else
    d[0] = d[1] = d[2] = d[3] = 0;
#endif
}

// What the tile kernel needs of a block type M: Block (its TQ* struct), CB (blocks per row chunk; the
// chunk a multiple of 16 bytes), mma (the int8 product), fold (one block's integer sum into a float
// accumulator) and frag<B> (the A-fragment half of one row: the int8 weights k 4t..4t+3 and
// 16+4t..16+4t+3 of block B of a staged row chunk, and the block's scale). Q8_0: a block is an f16 scale and 32 int8;
// chunks start 16-byte aligned, so odd blocks have 4-byte-aligned weights and even ones sit 2 bytes off
// (two word loads and a byte permute per word). The lanes of a row read 4 consecutive words and
// consecutive rows are 272 bytes (68 words, 4 banks) apart, so a warp's loads hit 32 distinct banks.
struct MmaQ8_0 {
    using Block = TQ8_0;
    static constexpr uint32_t CB = 8; // blocks per chunk: 272 bytes, a multiple of 16 (bulk copies)
    __device__ __forceinline__ static void mma(const uint32_t (&a)[4], const uint32_t (&b)[2], int (&d)[4]) {
        mma_s8_16x8x32(a, b, d);
    }
    // the row kernel's per-block step: sum * (d_w * d_x)
    __device__ __forceinline__ static float fold(int sum, float dw, float dx, float acc) {
        return __fmaf_rn(static_cast<float>(sum), __fmul_rn(dw, dx), acc);
    }
    template <uint32_t B>
    __device__ __forceinline__ static void frag(uint32_t row, uint32_t t, uint32_t &lo, uint32_t &hi, float &d) {
        const uint32_t base = row + B * 34u;
        d = __half2float(__ushort_as_half(static_cast<unsigned short>(lds_u16(base))));
        if constexpr (B % 2 == 1) {
            lo = lds_u32(base + 2u + 4u * t);
            hi = lds_u32(base + 18u + 4u * t);
        } else {
            lo = prmt(lds_u32(base + 4u * t), lds_u32(base + 4u * t + 4u), 0x5432u);
            hi = prmt(lds_u32(base + 16u + 4u * t), lds_u32(base + 20u + 4u * t), 0x5432u);
        }
    }
};

// f(integral_constant<uint32_t, I>) for I = 0, 1, ... in order
template <class F, uint32_t... I>
__device__ __forceinline__ void unrolled(F &f, std::integer_sequence<uint32_t, I...>) {
    (f(std::integral_constant<uint32_t, I>{}), ...);
}

// A stage of a warp's ring, for NC columns: the 16 rows' chunks, then a run of the activations' tile
// layout (the int8 activations of each column, then the block scales d of each column). Column strides
// are padded so that the lanes' reads of 8 columns hit distinct banks (272 bytes = 4 banks apart; 48
// bytes = 12 banks apart).
template <class M, int NC>
struct MmaGeom {
    static constexpr uint32_t ROWS = 16;                    // rows per tile (the mma's M)
    static constexpr uint32_t CHUNK = M::CB * M::Block::BS;  // bytes of a row chunk
    static constexpr uint32_t XQ = M::CB * 32;               // int8 activations of a chunk, one column
    static constexpr uint32_t XQS = XQ + 16;                 // their stride in the stage
    static constexpr uint32_t XF = M::CB * 4;                // block scales of a chunk, one column
    static constexpr uint32_t XFS = (XF + 16 + 15) / 16 * 16;
    static constexpr uint32_t OFF_XQ = ROWS * CHUNK, OFF_XD = OFF_XQ + NC * XQS;
    static constexpr uint32_t STAGE = OFF_XD + NC * XFS;
    static_assert(CHUNK % 16 == 0 && XF % 16 == 0, "row chunks must be whole 16-byte vectors");
    static_assert(XQ == 256 && XQS == ActTiles::QS && XFS == ActTiles::FS,
                  "a stage holds a run of the quantizer's tile layout as it is");
};

// The launch shape, measured on the H200 (Q8_0, 4096 x 14336, 8 columns, us per call, with the activations
// still copied column by column): 8 warps per block and 2 stages per warp (two blocks per SM) 25.9; 8
// warps x 3 stages (one block per SM) 34.2; 4 x 3 32.3; 16 x 2 29.6; two tiles (32 rows) per warp 26.9;
// chunks of 16 blocks 26.3-28.1.
constexpr int kMmaWarps = 8, kMmaStages = 2;

// W warps per block (one 16-row tile), S stages per warp, NC columns (1..8). The chunks of a row are
// split into W contiguous runs, one per warp.
template <class M, int NC, int W, int S>
__global__ void __launch_bounds__(32 * W) gemv_mma_kernel(const GemvKArgs a) {
#if KPR_MMA_INT8 && KPR_BULK_COPY // launched on 9.0 only (mma_serves)
    using G = MmaGeom<M, NC>;
    extern __shared__ __align__(128) uint8_t mma_ring[]; // [W][S][G::STAGE]
    __shared__ float red[W][G::ROWS * 8];
    __shared__ alignas(8) uint64_t bar[W][S]; // one mbarrier per stage of a warp's ring

    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t g = lane / 4, t = lane % 4;
    const uint32_t row0 = blockIdx.x * G::ROWS;
    const uint32_t nch = a.nb / M::CB; // the launcher checks a.nb % M::CB == 0
    const uint32_t per = (nch + W - 1) / W;
    const uint32_t c0 = min(nch, warp * per), c1 = min(nch, c0 + per);
    const uint32_t ring = smem_addr(mma_ring) + warp * S * G::STAGE;
    const uint8_t *const xt = reinterpret_cast<const uint8_t *>(a.x.q); // the tile layout (ActTiles)

    if (lane == 0) {
#pragma unroll
        for (int st = 0; st < S; ++st) mbar_init(smem_addr(&bar[warp][st]), 1);
        mbar_init_fence();
    }
    __syncwarp();
    // requests the weights of chunk c into stage st (rows past the end repeat the last row): lane 0 arms
    // the stage's barrier for them and for the activations (issue_x), then one bulk copy per row
    auto issue_w = [&](uint32_t c, uint32_t st) {
        const uint64_t off = static_cast<uint64_t>(c) * G::CHUNK;
        const uint32_t b = smem_addr(&bar[warp][st]);
        if (lane == 0) mbar_arrive_expect(b, G::ROWS * G::CHUNK + ActTiles::run_bytes(NC));
        __syncwarp();
        if (lane < G::ROWS) {
            const uint32_t row = min(row0 + lane, a.rows - 1);
            bulk_copy_g2s(ring + st * G::STAGE + lane * G::CHUNK, a.w + static_cast<uint64_t>(row) * a.row_bytes + off,
                          G::CHUNK, b);
        }
    };
    // requests the q8_1 activations of chunk c into stage st (only after the dependency wait): one run
    // of the quantizer's tile layout, one copy
    auto issue_x = [&](uint32_t c, uint32_t st) {
        if (lane == 0)
            bulk_copy_g2s(ring + st * G::STAGE + G::OFF_XQ, xt + size_t(c) * ActTiles::run_bytes(NC),
                          ActTiles::run_bytes(NC), smem_addr(&bar[warp][st]));
    };
    // the weights need nothing from the kernel before: requested before the dependency wait
#pragma unroll
    for (int s = 0; s + 1 < S; ++s)
        if (c0 + s < c1) issue_w(c0 + s, s);
    pdl_wait();              // the activations are written by the quantizer before this kernel
    pdl_launch_dependents(); // the next call's quantizer may launch (it waits for us before writing)
#pragma unroll
    for (int s = 0; s + 1 < S; ++s)
        if (c0 + s < c1) issue_x(c0 + s, s);

    const bool colb = g < NC, cold0 = 2 * t < NC, cold1 = 2 * t + 1 < NC;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint32_t c = c0; c < c1; ++c) {
        const uint32_t i = c - c0, st = i % S;
        if (c + S - 1 < c1) {
            issue_w(c + S - 1, (i + S - 1) % S);
            issue_x(c + S - 1, (i + S - 1) % S);
        }
        mbar_wait(smem_addr(&bar[warp][st]), (i / S) & 1u);
        __syncwarp();
        const uint32_t stage = ring + st * G::STAGE;
        const uint32_t rg = stage + g * G::CHUNK, rg8 = rg + 8 * G::CHUNK;
        const uint32_t xq = stage + G::OFF_XQ + g * G::XQS;
        const uint32_t xd0 = stage + G::OFF_XD + 2 * t * G::XFS, xd1 = xd0 + G::XFS;
        // one block (its index a compile-time constant: frag<B> depends on its alignment)
        auto block = [&](auto bc) {
            constexpr uint32_t bb = decltype(bc)::value;
            uint32_t af[4], bf[2] = {0, 0};
            float dw0, dw1, dx0 = 0.0f, dx1 = 0.0f;
            M::template frag<bb>(rg, t, af[0], af[2], dw0);
            M::template frag<bb>(rg8, t, af[1], af[3], dw1);
            if (colb) {
                bf[0] = lds_u32(xq + bb * 32u + 4u * t);
                bf[1] = lds_u32(xq + bb * 32u + 16u + 4u * t);
            }
            if (cold0) dx0 = __uint_as_float(lds_u32(xd0 + 4u * bb));
            if (cold1) dx1 = __uint_as_float(lds_u32(xd1 + 4u * bb));
            int sum[4];
            M::mma(af, bf, sum);
            acc[0] = M::fold(sum[0], dw0, dx0, acc[0]);
            acc[1] = M::fold(sum[1], dw0, dx1, acc[1]);
            acc[2] = M::fold(sum[2], dw1, dx0, acc[2]);
            acc[3] = M::fold(sum[3], dw1, dx1, acc[3]);
        };
        unrolled(block, std::make_integer_sequence<uint32_t, M::CB>{});
        __syncwarp(); // stage st is refilled by a later issue
    }
    red[warp][g * 8 + 2 * t] = acc[0];
    red[warp][g * 8 + 2 * t + 1] = acc[1];
    red[warp][(g + 8) * 8 + 2 * t] = acc[2];
    red[warp][(g + 8) * 8 + 2 * t + 1] = acc[3];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < G::ROWS * NC; i += 32 * W) {
        const uint32_t r = i / NC, j = i % NC;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) v += red[w][r * 8 + j];
        if (row0 + r < a.rows) a.y[static_cast<uint64_t>(j) * a.rows + row0 + r] = v;
    }
#endif
}

// The tile kernel's block type for T (void: none).
template <class T>
struct MmaFor {
    using type = void;
};
template <>
struct MmaFor<TQ8_0> {
    using type = MmaQ8_0;
};

// Whether the tile kernel serves this plain GEMV (a.sm90: compute capability 9.0+, aligned rows), from
// H200 measurements of Q8_0, the tile kernel forced on against the row kernel in one lease, us per call
// (docs/benchmarks.md "The tensor-core tile kernel"). Its time hardly grows with the column count; the
// row kernel's does. While all 16-row tiles fit in one wave (two blocks per SM) it is faster from 2
// columns on (4096 x 14336: 19.3 -> 19.0 at 2, 32.4 -> 19.8 at 8; 4096 x 4096 7.7 -> 7.4, 13.1 -> 7.3;
// 1024 x 4096 even at 2) and slower at one (18.0 -> 18.7). Over several waves each tile pays its ramp,
// so short rows need more columns: from 5 on with 2-4 chunks per warp (14336 x 4096: 23.6 -> 22.9 at 5,
// 21.8 -> 22.7 at 4; 28672 x 8192: 76.1 -> 69.3 at 5, 69.8 -> 68.2 at 4), from 3 on with long rows
// (8192 x 28672, 14 chunks per warp: 70.8 -> 67.4 at 3, 67.1 -> 66.9 at 2).
inline bool mma_serves(const GemvArgs &a, uint32_t ncols) {
    if (!a.sm90 || a.ids != nullptr || a.xq_n == 0 || a.sms == 0 || ncols < 2) return false;
    const uint32_t tiles = (a.rows + 15) / 16;
    if (tiles <= 2 * a.sms) return true;
    const uint32_t chunks_per_warp = a.nb / MmaQ8_0::CB / kMmaWarps;
    return ncols >= 5 || (ncols >= 3 && chunks_per_warp >= 8);
}

// Launches the quantizer (into the tile layout, in x's scratch) and the tile kernel for NC columns.
// cudaErrorNotSupported, with nothing launched: not this shape or device (the caller takes the row kernel).
template <class M, int NC, int W = kMmaWarps, int S = kMmaStages>
cudaError_t launch_mma(const GemvArgs &a, bool pdl, cudaStream_t stream) {
    const size_t dyn = static_cast<size_t>(W) * S * MmaGeom<M, NC>::STAGE;
    if (a.xq_n != size_t(NC) * a.x.cols || a.x.vbase != 0 || a.nb % M::CB != 0 ||
        a.row_bytes != uint64_t(a.nb) * M::Block::BS || a.x.cols != a.nb * M::Block::QK ||
        dyn + sizeof(float) * W * 16 * 8 + 8 * W * S > a.smem_optin)
        return cudaErrorNotSupported;
    auto k = gemv_mma_kernel<M, NC, W, S>;
    static std::atomic<bool> set[64]; // per device: the dynamic shared memory allowance is set
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= 64 || !set[dev].load(std::memory_order_relaxed)) {
        e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dyn));
        if (e != cudaSuccess) return e;
        if (dev >= 0 && dev < 64) set[dev].store(true, std::memory_order_relaxed);
    }
    // the tile layout takes the bytes of the planes (act_q8_bytes), which the scratch holds
    e = launch_pdl(quantize_act_q8_1_tiles, dim3(static_cast<unsigned>((a.xq_n + 255) / 256)), dim3(256), 0, pdl,
                   stream, a.xf, static_cast<uint32_t>(NC), a.x.cols,
                   reinterpret_cast<uint8_t *>(const_cast<int8_t *>(a.x.q)));
    if (e != cudaSuccess) return e;
    const uint32_t tiles = (a.rows + 15) / 16;
    return launch_pdl(k, dim3(tiles), dim3(32 * W), dyn, pdl, stream, static_cast<const GemvKArgs &>(a));
}

// On the runtime column count, 2..8 (mma_serves never asks for one column).
template <class M>
cudaError_t launch_mma_nc(const GemvArgs &a, uint32_t ncols, bool pdl, cudaStream_t s) {
    switch (ncols) {
    case 2: return launch_mma<M, 2>(a, pdl, s);
    case 3: return launch_mma<M, 3>(a, pdl, s);
    case 4: return launch_mma<M, 4>(a, pdl, s);
    case 5: return launch_mma<M, 5>(a, pdl, s);
    case 6: return launch_mma<M, 6>(a, pdl, s);
    case 7: return launch_mma<M, 7>(a, pdl, s);
    case 8: return launch_mma<M, 8>(a, pdl, s);
    default: return cudaErrorNotSupported;
    }
}

} // namespace kpr::cuda

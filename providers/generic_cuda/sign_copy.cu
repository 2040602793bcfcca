// generic_cuda: the sign_copy option. IQ3_XXS one-column calls on compute capability 9.0 read a copy of the weights
// that holds each sub-block's 32 signs spelled out, so the decode needs no 7-bit sign field, multiply or parity. The
// copy has one of two layouts, chosen per op by its rows per multiprocessor (SignCopyLayout): GGUF's blocks with the
// signs spelled out for the whole-vector kernel, or each row as planes for the lanes kernel. Other column counts, and
// ops the copy does not serve, read the caller's GGUF rows. Measured in docs/cuda-tuning-log.md "IQ3_XXS signs
// spelled out in a copy" and "The IQ3_XXS lanes kernel measured".
#include "kernels.hpp"
#include "sign_copy.hpp"
#include "kpr_cuda_planar.cuh"

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace kpr::generic_cuda {
namespace {

constexpr uint32_t kGgufBytes = cuda::TIQ3_XXS::BS, kCopyBytes = cuda::TIQ3_XXS_Signs::BS;
static_assert(kGgufBytes == 98 && kCopyBytes == 104, "the copy adds 6 bytes to each block: d twice, 8 scales");

// What both layouts keep of GGUF block s (2-byte pieces, 2-byte aligned) besides its qs: sub-block ib's aux word (28
// sign bits and a 4-bit scale) as its spelled-out sign word sw[ib], and d with four scales a word, ds[h] holding d
// (bits 0-15) and the scales of sub-blocks 4h..4h+3 (bits 16-31, the first lowest). sw and ds point into the copy.
__device__ __forceinline__ void spell_signs_and_scales(const uint16_t *s, uint32_t *sw, uint32_t *ds) {
    uint32_t dsw[2] = {s[0], s[0]};
    for (int ib = 0; ib < 8; ++ib) {
        const uint32_t aux = s[33 + 2 * ib] | static_cast<uint32_t>(s[34 + 2 * ib]) << 16;
        sw[ib] = cuda::iq3_xxs_spelled_signs(aux);
        dsw[ib / 4] |= (aux >> 28) << (16 + 4 * (ib % 4));
    }
    ds[0] = dsw[0];
    ds[1] = dsw[1];
}

// One thread per block: qs as it is, then the sign words, then d with four scales a word (TIQ3_XXS_Signs).
__global__ void repack_signs(const uint16_t *__restrict__ src, uint32_t *__restrict__ dst, uint64_t blocks) {
    const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
    if (i >= blocks) return;
    const uint16_t *s = src + i * (kGgufBytes / 2);
    uint32_t *d = dst + i * (kCopyBytes / 4);
    for (int h = 0; h < 16; ++h) d[h] = s[1 + 2 * h] | static_cast<uint32_t>(s[2 + 2 * h]) << 16; // bytes 0-63
    spell_signs_and_scales(s, d + 16, d + 24);
}

cudaError_t launch_blocks(const cuda::GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s) {
    if (ncols != 1 || tasks != 1 || a.ids != nullptr) return cudaErrorInvalidValue; // (sign_copy_plan)
    cuda::GemvArgs b = a;
    b.row_bytes = static_cast<uint64_t>(a.nb) * kCopyBytes;
    b.expert_bytes = b.row_bytes * a.rows;
    b.aligned = b.row_bytes % 16 == 0 ? 1u : 0u; // (the copy itself is cudaMalloc'd)
    b.sm80 = b.rows80 && b.aligned ? 1u : 0u;
    return cuda::launch_gemv_one<cuda::TIQ3_XXS_Signs, cuda::TabGlobal>(b, pdl, s);
}

// The lanes layout: a thread per 32-weight sub-block position of every row (kpr_cuda_planar.cuh's scheme), its
// activations in registers, so the one shared-memory read left per 4 weights is the per-lane grid word.
// Row r of the copy, nb = cols / 32 sub-blocks, nb256 = cols / 256 blocks, rs = lanes_row_bytes(nb256):
//   [0, 8 nb)                   sub-block i's 8 grid indices at 8 i (GGUF's qs)
//   [8 nb, 12 nb)               sub-block i's spelled-out sign word (iq3_xxs_spelled_signs) at 8 nb + 4 i
//   [12 nb, 13 nb)              a word per 4 sub-blocks, at 12 nb + 4 (i / 4): bits 0-15 the block's d (f16), bits
//                               16-31 the 4-bit scales of sub-blocks 4 (i / 4) .. 4 (i / 4) + 3, the first lowest
// 104 bytes per 256 weights (d is stored twice), so that a thread's d and scale come in one 4-byte load: merged
// from two loads, the merge waited on both where the loads were issued (ncu: a third of the warp stalls), not where
// the next batch uses them.
constexpr uint64_t lanes_row_bytes(uint64_t nb256) { return (104 * nb256 + 15) / 16 * 16; }

__global__ void repack_lanes(const uint16_t *__restrict__ src, uint8_t *__restrict__ dst, uint64_t rows,
                             uint64_t nb256) {
    const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
    if (i >= rows * nb256) return;
    const uint64_t r = i / nb256, b = i % nb256, nb = 8 * nb256;
    const uint16_t *s = src + i * (kGgufBytes / 2);
    uint8_t *row = dst + r * lanes_row_bytes(nb256);
    uint16_t *qs = reinterpret_cast<uint16_t *>(row + 64 * b);
    for (int h = 0; h < 32; ++h) qs[h] = s[1 + h];
    spell_signs_and_scales(s, reinterpret_cast<uint32_t *>(row + 8 * nb + 32 * b),
                           reinterpret_cast<uint32_t *>(row + 12 * nb + 8 * b));
}

constexpr uint32_t kLanesGridBytes = 256 * 256; // TabLaneGrid's per-lane grid

// One column: q8_1 activations from generic_cuda's quantizer (xq), rows to teams round-robin, two batches of
// four rows in flight, sums as planar_gemv's.
__global__ void __launch_bounds__(cuda::kPlanarThreads, 1) lanes_iq3_xxs(const cuda::PlanarArgs a, const cuda::ActQ8 xq) {
#if defined(__CUDA_ARCH__) && KPR_ARCH >= 900
    constexpr uint32_t R = cuda::kPlanarRowsPerBatch;
    extern __shared__ __align__(16) uint8_t dyn[];
    float *const part0 = reinterpret_cast<float *>(dyn + kLanesGridBytes);
    const uint32_t T = a.T, tid = threadIdx.x, lane = tid & 31u, lane4 = 4 * lane;
    const uint32_t tpb = blockDim.x / T, tm = tid / T, tt = tid % T, wpt = T / 32, wt = tt / 32;
    const uint32_t teams = gridDim.x * tpb, g = blockIdx.x * tpb + tm;
    const uint32_t n_rows = g < a.rows ? (a.rows - g + teams - 1) / teams : 0;
    const uint32_t nbat = (n_rows + R - 1) / R;
    float *part = part0 + size_t(tm) * a.cap * wpt;
    const bool has = tt < a.nb;
    const uint64_t nb = a.nb;
    const uint64_t rstride = uint64_t(teams) * a.rb;
    const uint8_t *src = a.w + uint64_t(g) * a.rb;
    const uint64_t o_q = 8 * uint64_t(tt), o_s = 8 * nb + 4 * uint64_t(tt), o_d = 12 * nb + 4 * uint64_t(tt / 4);
    uint32_t next_row = g;
    uint2 qa[R], qb[R];
    uint32_t sa[R], sb[R], da[R], db[R];
    auto load = [&](uint2 (&q)[R], uint32_t (&sw)[R], uint32_t (&dl)[R]) {
#pragma unroll
        for (uint32_t r = 0; r < R; ++r) {
            if (has && next_row < a.rows) {
                q[r] = __ldg(reinterpret_cast<const uint2 *>(src + o_q));
                sw[r] = __ldg(reinterpret_cast<const uint32_t *>(src + o_s));
                dl[r] = __ldg(reinterpret_cast<const uint32_t *>(src + o_d));
            } else {
                q[r] = make_uint2(0, 0), sw[r] = 0, dl[r] = 0;
            }
            src += rstride;
            next_row += teams;
        }
    };
    load(qa, sa, da); // the weights do not depend on the kernel before: requested first
    load(qb, sb, db);
    const uint32_t base = cuda::fill_lane_grid(dyn, cuda::g_iq3xxs_grid, 256, 256); // (a barrier)
    cuda::pdl_launch_dependents();
    cuda::pdl_wait();
    int xw[8];
    float dx = 0.0f;
    if (has) {
        const int4 q0 = __ldg(reinterpret_cast<const int4 *>(xq.q + 32 * uint64_t(tt)));
        const int4 q1 = __ldg(reinterpret_cast<const int4 *>(xq.q + 32 * uint64_t(tt)) + 1);
        xw[0] = q0.x, xw[1] = q0.y, xw[2] = q0.z, xw[3] = q0.w, xw[4] = q1.x, xw[5] = q1.y, xw[6] = q1.z, xw[7] = q1.w;
        dx = __ldg(xq.d + tt);
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) xw[i] = 0;
    }
    const uint32_t nib = 4 * (tt & 3u);
    constexpr uint32_t LV = R == 8 ? 3 : R == 4 ? 2 : R == 2 ? 1 : 0;
    auto compute = [&](uint32_t k, const uint2 (&q)[R], const uint32_t (&sw)[R], const uint32_t (&dl)[R]) {
        float acc[R];
#pragma unroll
        for (uint32_t r = 0; r < R; ++r) {
            int s = 0, sm = 0;
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                const uint32_t w = m < 4 ? q[r].x : q[r].y;
                const uint32_t gv = cuda::lds_table_u32(base + cuda::prmt(w, lane4, 0x7704u | (static_cast<uint32_t>(m % 4) << 4)));
                const uint32_t mask = cuda::prmt(sw[r] << m, 0u, 0xBA98u);
                s = cuda::dp4a(static_cast<int>(gv ^ mask), xw[m], s);
                sm = cuda::dp4a(static_cast<int>(mask), xw[m], sm);
            }
            const uint32_t ls = (dl[r] >> (16 + nib)) & 0xFu;
            const float ds = __fmul_rn(cuda::f16_to_float(static_cast<uint16_t>(dl[r])), static_cast<float>(2 * ls + 1) * 0.25f);
            acc[r] = __fmul_rn(static_cast<float>(s - sm), __fmul_rn(ds, dx));
        }
        const float v = cuda::reduce_scatter_rows<R>(acc, lane);
        if ((lane & ((32u >> LV) - 1)) == 0) part[(k * R + (lane >> (5 - LV))) * wpt + wt] = v;
    };
    for (uint32_t k = 0; k < nbat; k += 2) {
        compute(k, qa, sa, da);
        load(qa, sa, da);
        if (k + 1 >= nbat) break;
        compute(k + 1, qb, sb, db);
        load(qb, sb, db);
    }
    __syncthreads();
    cuda::store_row_sums<1>(part0, a, tpb, wpt, teams);
#endif
}

cudaError_t launch_lanes(const cuda::GemvArgs &a, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t s) {
    if (ncols != 1 || tasks != 1 || a.ids != nullptr) return cudaErrorInvalidValue; // (sign_copy_plan)
    const uint32_t nb256 = a.nb, nb = 8 * a.nb;
    cuda::PlanarPlan plan;
    if (a.smem_optin <= kLanesGridBytes ||
        !cuda::planar_plan(a.rows, nb, a.sms, a.smem_optin - kLanesGridBytes, &plan, 1))
        return cudaErrorNotSupported;
    cuda::PlanarArgs pa{a.w, lanes_row_bytes(nb256), a.rows, nb, plan.T, plan.cap, a.xf, a.y};
    const cuda::ActQ8 xq{a.x.q, a.x.d, a.x.s, a.x.cols};
    cudaError_t e = cudaSuccess;
    if (a.xq_n != 0) {
        e = cuda::launch_quantizer(a, pdl, s, cuda::act_nibble_order(KPR_TYPE_IQ3_XXS, 1));
        if (e != cudaSuccess) return e;
    }
    const uint32_t smem = kLanesGridBytes + plan.smem;
    static std::atomic<uint32_t> raised{48 * 1024};
    e = cuda::raise_dyn_smem(lanes_iq3_xxs, raised, smem);
    if (e != cudaSuccess) return e;
    return cuda::launch_pdl(lanes_iq3_xxs, dim3(a.sms), dim3(plan.tpb * plan.T), smem, pdl, s, pa, xq);
}

} // namespace

GemvLaunchFnPtr sign_copy_launcher(SignCopyLayout layout) {
    return layout == SignCopyLayout::lanes ? launch_lanes : launch_blocks;
}

SignCopyPlan sign_copy_plan(const kpr_op_desc *op, const kpr_device_desc *dev) {
    if (op->weight_type != KPR_TYPE_IQ3_XXS) return {"not an IQ3_XXS weight"};
    if (op->kind != KPR_OP_GEMV) return {"grouped GEMV reads the GGUF rows"};
    if (dev->cc_major < 9) return {"compute capability below 9.0 (measured on 9.0 only)"};
    const uint32_t rows = static_cast<uint32_t>(std::min<uint64_t>(op->rows, UINT32_MAX)), sms = dev->sm_count;
    if (cuda::whole_vector_rows_ok(KPR_TYPE_IQ3_XXS, rows, sms)) return {nullptr, SignCopyLayout::blocks};
    // Below the window neither kernel was measured (the lanes kernel would run a few rows per team)
    if (uint64_t(rows) < 8ull * sms) return {"fewer than 8 rows per multiprocessor (not measured there)"};
    cuda::PlanarPlan plan;
    if (op->rows > UINT32_MAX || dev->smem_per_block_optin <= kLanesGridBytes ||
        !cuda::planar_plan(rows, static_cast<uint32_t>(op->cols / 32), sms, dev->smem_per_block_optin - kLanesGridBytes,
                           &plan, 1))
        return {"over 32 rows per multiprocessor, and rows wider than 16384 weights or row sums beyond a block's "
                "shared memory (lanes kernel)"};
    return {nullptr, SignCopyLayout::lanes};
}

// Rounded up to 16 bytes: the cp.async rings read a row's last 16-byte line with a source size of only its own bytes,
// which compute-sanitizer's memcheck still counts as a 16-byte read (GGUF tensors in the self-tests have guard bytes
// after them; the copy has these). The lanes layout pads every row to 16 bytes.
uint64_t sign_copy_bytes(const kpr_op_desc *op, SignCopyLayout layout) {
    if (layout == SignCopyLayout::lanes) return op->rows * lanes_row_bytes(op->cols / 256);
    return (op->rows * (op->cols / 256) * kCopyBytes + 15) / 16 * 16;
}

cudaError_t sign_copy_repack(const void *gguf, void *copy, uint64_t rows, uint64_t nb256, SignCopyLayout layout) {
    const uint64_t blocks = rows * nb256;
    if (blocks == 0) return cudaSuccess;
    const unsigned grid = static_cast<unsigned>((blocks + 255) / 256);
    if (layout == SignCopyLayout::lanes)
        repack_lanes<<<grid, 256>>>(static_cast<const uint16_t *>(gguf), static_cast<uint8_t *>(copy), rows, nb256);
    else
        repack_signs<<<grid, 256>>>(static_cast<const uint16_t *>(gguf), static_cast<uint32_t *>(copy), blocks);
    return cudaGetLastError();
}

} // namespace kpr::generic_cuda

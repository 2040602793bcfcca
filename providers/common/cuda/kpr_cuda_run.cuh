// kpr_cuda_run.cuh -- prepare/run plumbing for providers built on gemv_rows_kernel (generic_cuda,
// iq_stage_tables): checks, per-stream activation scratch, the q8_1 quantizer launch, then the GEMV.
#pragma once

#include "kpr_cuda_act.cuh"
#include "kpr_cuda_gemv.cuh"
#include "kpr_cuda_host.hpp"
#include "kpr_cuda_weight_copy.hpp"

#include <algorithm>
#include <memory>
#include <new>

namespace kpr::cuda {

using GemvLaunchFn = cudaError_t (*)(const GemvArgs &, uint32_t ncols, uint32_t tasks, bool pdl, cudaStream_t);

struct GemvPrepared {
    kpr_op_desc op{};
    const TypeDesc *td = nullptr;
    const uint8_t *w = nullptr;
    uint64_t row_bytes = 0;
    int ordinal = 0;
    bool pdl = false;
    bool aligned = false;
    bool float_x = false;
    bool rows80 = false;     // the row kernel's 8.0+ layouts may run, on aligned rows or not (GemvArgs::rows80)
    // the other 8.0+ layouts may run too (compute capability 8.0+, 16-byte aligned rows; GemvArgs::sm80)
    bool sm80() const { return rows80 && aligned; }
    uint32_t mma_mode = kMmaAuto; // the tensor-core tile kernel (GemvArgs::mma_mode)
    uint32_t sms = 0;
    uint32_t smem_optin = 0; // shared memory per block, opt-in maximum
    uint32_t smem_sm = 0;    // shared memory per multiprocessor
    GemvLaunchFn launch = nullptr;
    std::unique_ptr<StreamScratch> scratch;
    // (optional) another launcher, for the column counts in alt_mask (bit c - 1: c columns), and the
    // repacked copy of the weights it reads (null: it reads the caller's); generic_cuda's planar_weights,
    // block_lanes and sign_copy. Other column counts read the caller's weights with `launch`.
    GemvLaunchFn alt_launch = nullptr;
    uint32_t alt_mask = 0;
    std::shared_ptr<WeightCopy> alt_copy;
};

inline size_t gemv_scratch_bytes(const kpr_op_desc *op, bool float_x) {
    const size_t nvec = op_vectors(op);
    if (float_x) return nvec * op->cols * sizeof(float) + 256; // only used when x is not 16-byte aligned
    // the planes, or the tile kernel's layout with block sums (kpr_cuda_mma.cuh) of the most vectors it computes
    // for a call of up to nvec columns (tile_vectors), whichever is larger
    size_t tiles = nvec;
    for (uint32_t n = 1; n <= nvec && n <= 8; ++n) tiles = std::max<size_t>(tiles, tile_vectors(op->weight_type, n));
    return std::max(act_q8_bytes(nvec, op->cols), act_tiles_bytes(tiles, op->cols, true));
}

inline kpr_status gemv_prepare(const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_weights *wt,
                               bool float_x, GemvLaunchFn launch, GemvPrepared **out, kpr_error *err) {
    if (op == nullptr || dev == nullptr || wt == nullptr || out == nullptr)
        return fail(err, KPR_ERR_INVALID_ARGUMENT, "prepare: null argument");
    if (dev->simulated) return fail(err, KPR_ERR_INVALID_ARGUMENT, "prepare: device %s is simulated", dev->name);
    const TypeDesc *td = type_desc(op->weight_type);
    if (td == nullptr) return fail(err, KPR_ERR_UNSUPPORTED, "prepare: weight type %u unsupported", op->weight_type);
    const uint64_t rb = row_bytes(td, op->cols);
    const uint64_t n_exp = op->kind == KPR_OP_GEMV_GROUPED ? op->n_experts : 1;
    if (wt->data == nullptr || wt->bytes != n_exp * op->rows * rb)
        return fail(err, KPR_ERR_INVALID_ARGUMENT, "prepare: weights are %llu bytes, the op needs %llu",
                    (unsigned long long)wt->bytes, (unsigned long long)(n_exp * op->rows * rb));
    cudaError_t e = use_device(dev->ordinal);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
    auto p = std::unique_ptr<GemvPrepared>(new (std::nothrow) GemvPrepared());
    if (!p) return fail(err, KPR_ERR_OUT_OF_MEMORY, "prepare: host allocation failed");
    p->op = *op;
    p->td = td;
    p->w = static_cast<const uint8_t *>(wt->data);
    p->row_bytes = rb;
    p->ordinal = dev->ordinal;
    p->pdl = dev->cc_major >= 9;
    const uint64_t exp_bytes = op->rows * rb;
    p->aligned = (reinterpret_cast<uintptr_t>(wt->data) % 16 == 0) && rb % 16 == 0 && exp_bytes % 16 == 0;
    p->float_x = float_x;
    p->sms = dev->sm_count;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev->ordinal) != cudaSuccess) optin = 0;
    p->smem_optin = optin > 0 ? static_cast<uint32_t>(optin) : 0;
    int per_sm = 0;
    if (cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev->ordinal) != cudaSuccess) per_sm = 0;
    p->smem_sm = per_sm > 0 ? static_cast<uint32_t>(per_sm) : 0;
    p->rows80 = dev->cc_major >= 8 && !float_x && op->kind == KPR_OP_GEMV && p->sms > 0;
    p->launch = launch;
    p->scratch.reset(new (std::nothrow) StreamScratch(gemv_scratch_bytes(op, float_x)));
    if (!p->scratch) return fail(err, KPR_ERR_OUT_OF_MEMORY, "prepare: host allocation failed");
    *out = p.release();
    return KPR_OK;
}

inline kpr_status gemv_run(GemvPrepared &p, const kpr_run_args *args, kpr_error *err) {
    if (args == nullptr || args->struct_size < sizeof(kpr_run_args) || args->x == nullptr || args->y == nullptr)
        return fail(err, KPR_ERR_INVALID_ARGUMENT, "run: null or short arguments");
    const bool grouped = p.op.kind == KPR_OP_GEMV_GROUPED;
    const uint32_t ncols = args->ncols;
    if (ncols < 1 || ncols > p.op.ncols)
        return fail(err, KPR_ERR_INVALID_ARGUMENT, "run: ncols %u outside 1..%u", ncols, p.op.ncols);
    if (grouped && args->ids == nullptr) return fail(err, KPR_ERR_INVALID_ARGUMENT, "run: grouped op without ids");
    cudaError_t e = use_device(p.ordinal);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
    cudaStream_t s = static_cast<cudaStream_t>(args->stream);
    void *scratch = nullptr;
    e = p.scratch->get(s, &scratch);
    if (e != cudaSuccess) return cuda_fail(err, e, "run: scratch allocation");

    const uint32_t nvec = grouped ? ncols * p.op.x_slots : ncols;
    const uint64_t cols = p.op.cols;
    GemvArgs a{};
    a.w = p.w;
    a.row_bytes = p.row_bytes;
    a.expert_bytes = p.op.rows * p.row_bytes;
    a.rows = static_cast<uint32_t>(p.op.rows);
    a.nb = static_cast<uint32_t>(cols / p.td->qk * (p.td->qk == 1 ? 1 : 1));
    if (p.td->qk == 1) a.nb = static_cast<uint32_t>(cols / 32); // float types: 32-weight pseudo blocks
    a.ids = grouped ? args->ids : nullptr;
    a.n_used = grouped ? p.op.n_used : 1;
    a.x_slots = grouped ? p.op.x_slots : 1;
    a.n_experts = grouped ? p.op.n_experts : 1;
    a.aligned = p.aligned ? 1u : 0u;
    a.y = args->y;
    a.x.cols = static_cast<uint32_t>(cols);
    a.x.vbase = 0;
    a.sm80 = p.sm80() ? 1u : 0u;
    a.rows80 = p.rows80 ? 1u : 0u;
    a.sm90 = p.rows80 && p.pdl ? 1u : 0u; // (pdl: compute capability 9.0+; rows aligned or not)
    a.mma_mode = p.mma_mode;
    a.sms = p.sms;
    a.smem_optin = p.smem_optin;
    a.smem_sm = p.smem_sm;
    bool pdl = false;
    if (p.float_x) {
        const float *xf = args->x;
        if (reinterpret_cast<uintptr_t>(xf) % 16 != 0) {
            e = cudaMemcpyAsync(scratch, xf, size_t(nvec) * cols * sizeof(float), cudaMemcpyDeviceToDevice, s);
            if (e != cudaSuccess) return cuda_fail(err, e, "run: staging x");
            xf = static_cast<const float *>(scratch);
        }
        a.x.f = xf;
    } else {
        // the launcher quantizes x into the scratch (quantize_act_q8_1) before the GEMV kernel
        const ActQ8 v = act_q8_view(scratch, nvec, cols);
        a.x.q = v.q;
        a.x.d = v.d;
        a.x.s = v.s;
        a.xf = args->x;
        a.xq_n = size_t(nvec) * cols;
        a.xq_bytes = p.scratch->bytes();
        pdl = p.pdl;
    }
    const uint32_t tasks = grouped ? ncols * p.op.n_used : 1;
    if (p.alt_launch != nullptr && ((p.alt_mask >> (ncols - 1)) & 1u)) { // (plain GEMV only: generic_cuda's alt_plan)
        if (p.alt_copy) a.w = static_cast<const uint8_t *>(p.alt_copy->data);
        e = p.alt_launch(a, ncols, 1, pdl, s);
    } else {
        e = p.launch(a, grouped ? 1u : ncols, tasks, pdl, s);
    }
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_fail(err, e, "run: gemv launch");
    return KPR_OK;
}

} // namespace kpr::cuda

// generic_cuda: the portable CUDA baseline. GEMV and grouped GEMV for every weight type kpr serves,
// ncols 1..8, activations quantized on the device to q8_1 (float types keep float activations).
#include "kernels.hpp"
#include "kpr_cuda_host.hpp"
#include "kpr_cuda_run.cuh"
#include "planar.hpp"
#include "sign_copy.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

namespace kpr::generic_cuda {

cudaError_t launch_q8_0(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q4_0(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q4_1(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q5_0(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q5_1(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q2_k(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q3_k(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q4_k(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q5_k(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_q6_k(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_iq4_nl(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_iq4_xs(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_iq3_xxs(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_iq3_s(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_f32(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_f16(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_bf16(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);

const TypeKernel *find_kernel(uint32_t type) {
    static const TypeKernel k[] = {
        {KPR_TYPE_Q8_0, false, launch_q8_0},       {KPR_TYPE_Q4_0, false, launch_q4_0},
        {KPR_TYPE_Q4_1, false, launch_q4_1},       {KPR_TYPE_Q5_0, false, launch_q5_0},
        {KPR_TYPE_Q5_1, false, launch_q5_1},       {KPR_TYPE_Q2_K, false, launch_q2_k},
        {KPR_TYPE_Q3_K, false, launch_q3_k},       {KPR_TYPE_Q4_K, false, launch_q4_k},
        {KPR_TYPE_Q5_K, false, launch_q5_k},       {KPR_TYPE_Q6_K, false, launch_q6_k},
        {KPR_TYPE_IQ4_NL, false, launch_iq4_nl},   {KPR_TYPE_IQ4_XS, false, launch_iq4_xs},
        {KPR_TYPE_IQ3_XXS, false, launch_iq3_xxs}, {KPR_TYPE_IQ3_S, false, launch_iq3_s},
        {KPR_TYPE_F32, true, launch_f32},          {KPR_TYPE_F16, true, launch_f16},
        {KPR_TYPE_BF16, true, launch_bf16},
    };
    for (const auto &e : k)
        if (e.type == type) return &e;
    return nullptr;
}

namespace {

cuda::HostLog g_log;
cuda::WeightCopies g_copies; // planar_weights' and sign_copy's copies, shared by tensor identity

const kpr_option_decl kOptions[] = {
    {sizeof(kpr_option_decl), KPR_OPTION_STRING, "tile_kernel", "auto",
     "the int8 tensor-core tile kernel (Q8_0, Q4_0, Q4_K, Q5_K, IQ4_NL, IQ4_XS at 1..8 columns, compute "
     "capability 9.0): "
     "auto: where it measured faster than the row kernels; on: wherever it fits; off: never; wide: on, with "
     "16 warps per 16-row tile (at 2..8 columns where that ring fits); wide32: wide, and at one column Q4_0, "
     "IQ4_NL, Q4_K and Q5_K with 32 rows (two tiles) per block of 16 warps",
     0, 0, "auto,on,off,wide,wide32"},
    {sizeof(kpr_option_decl), KPR_OPTION_BOOL, "planar_weights", "false",
     "Q4_0 and IQ4_NL on compute capability 9.0: keep a planar copy of the weights (as many bytes again as "
     "the tensor, counted in prepared bytes, shared by prepared ops on the same tensor) for the lanes kernel "
     "(block_lanes; by default one-column calls), each thread owning one block position of every row",
     0, 0, nullptr},
    {sizeof(kpr_option_decl), KPR_OPTION_STRING, "block_lanes", "auto",
     "the lanes kernel at 1-2 columns on compute capability 9.0 (each thread owns one 32-weight position of "
     "every row, its activations in registers): Q4_K on its GGUF rows in place, Q4_0 / IQ4_NL on the copy "
     "planar_weights makes. auto: where it measured faster (Q4_K above 32 rows per SM; the planar types at "
     "one column); on: wherever it fits; off: never",
     0, 0, "auto,on,off"},
    {sizeof(kpr_option_decl), KPR_OPTION_BOOL, "sign_copy", "false",
     "IQ3_XXS on compute capability 9.0: keep a copy of the weights with every sign spelled out (102-104 bytes a "
     "block against 98, counted in prepared bytes, shared by prepared ops on the same tensor) for one-column "
     "plain GEMV calls from 8 rows per multiprocessor, whose decode then needs no sign arithmetic: on 8..32 rows "
     "per multiprocessor as blocks for the whole-vector kernel, above that as planes per row for the lanes kernel "
     "(rows up to 16384 weights); other calls read the GGUF rows",
     0, 0, nullptr},
};
constexpr uint32_t kNOptions = sizeof(kOptions) / sizeof(kOptions[0]);

// The weight bytes of op (all experts).
uint64_t weight_bytes(const kpr_op_desc *op, const cuda::TypeDesc *td) {
    return (op->kind == KPR_OP_GEMV_GROUPED ? op->n_experts : 1) * op->rows * cuda::row_bytes(td, op->cols);
}

// tile_kernel's value (the core has checked it against the choices)
uint32_t mma_mode(const kpr_option_set *opts) {
    const char *v = cuda::option_value(opts, "tile_kernel");
    if (v != nullptr && std::strcmp(v, "on") == 0) return cuda::kMmaOn;
    if (v != nullptr && std::strcmp(v, "off") == 0) return cuda::kMmaOff;
    if (v != nullptr && std::strcmp(v, "wide") == 0) return cuda::kMmaWide;
    if (v != nullptr && std::strcmp(v, "wide32") == 0) return cuda::kMmaWide32;
    return cuda::kMmaAuto;
}

// block_lanes's value for op at ncols columns (the core has checked it against the choices)
bool block_lanes_wanted(const kpr_option_set *opts, const kpr_op_desc *op, uint32_t sms, uint32_t ncols) {
    const char *v = cuda::option_value(opts, "block_lanes");
    if (v != nullptr && std::strcmp(v, "on") == 0) return true;
    if (v != nullptr && std::strcmp(v, "off") == 0) return false;
    // tile_kernel = on / wide keep the tile kernel, and so does auto at one column where the 8-warp tile kernel
    // or two tiles per block of 8 warps measured faster than the lanes kernel (k_quant_eight_warps,
    // mma_two_tiles_eight_warps; tile_kernel = off leaves those to the lanes kernel)
    const uint32_t tile = mma_mode(opts);
    if (tile == cuda::kMmaAuto && ncols == 1 &&
        (cuda::k_quant_eight_warps(op->weight_type, op->rows, op->cols, sms) ||
         cuda::mma_two_tiles_eight_warps(op->weight_type, op->rows, op->cols, sms)))
        return false;
    return tile != cuda::kMmaOn && !cuda::mma_mode_wide(tile) && lanes_auto(op, sms, ncols);
}

// The other launcher op takes at some column counts, decided once for query and prepare: the lanes kernel
// (planar_q4.cu: planar_weights, block_lanes) or the IQ3_XXS sign copy (sign_copy.cu). Its launcher, whether it
// reads a repacked copy (and which), the column counts it takes (bit c - 1 for c columns), or why an option's copy
// is not made. aligned_rows: the caller's rows are 16-byte aligned (the lanes kernel needs them; query assumes so).
struct AltPlan {
    GemvLaunchFnPtr launch = nullptr;
    bool copy = false;
    uint32_t mask = 0;
    const char *no = nullptr; // why there is no copy although planar_weights or sign_copy asks for one
    bool signs = false;       // the copy is sign_copy's (else planar_weights')
    SignCopyLayout sign_layout = SignCopyLayout::blocks; // (signs) which of its layouts
};
// WeightCopyKey layouts (the copies of the two options never share memory; sign_copy's are SignCopyLayout's values)
constexpr uint32_t kPlanarLayout = 1;
AltPlan alt_plan(const kpr_op_desc *op, const kpr_device_desc *dev, uint32_t smem_optin, const kpr_option_set *opts,
                 bool aligned_rows) {
    AltPlan L;
    if (op->weight_type == KPR_TYPE_IQ3_XXS) {
        if (!cuda::option_bool(opts, "sign_copy", false)) return L;
        const SignCopyPlan sp = sign_copy_plan(op, dev);
        L.signs = true;
        L.sign_layout = sp.layout;
        L.no = sp.no;
        if (L.no == nullptr) L.launch = sign_copy_launcher(sp.layout), L.copy = true, L.mask = 1;
        return L;
    }
    if (!aligned_rows) return L;
    if (cuda::option_bool(opts, "planar_weights", false) && planar_launcher(op->weight_type) != nullptr) {
        L.no = planar_declines(op, dev, smem_optin);
        if (L.no == nullptr) L.launch = planar_launcher(op->weight_type), L.copy = true;
    } else if (block_lanes_launcher(op->weight_type) != nullptr &&
               block_lanes_declines(op, dev, smem_optin) == nullptr) {
        L.launch = block_lanes_launcher(op->weight_type);
    }
    if (L.launch == nullptr) return L;
    for (uint32_t c = 1; c <= std::min<uint32_t>(kLanesMaxColumns, op->ncols); ++c)
        if (block_lanes_wanted(opts, op, dev->sm_count, c)) L.mask |= 1u << (c - 1);
    if (L.mask == 0) {
        if (L.copy) L.no = "block_lanes takes no column count of this op";
        L = AltPlan{nullptr, false, 0, L.no};
    }
    return L;
}

kpr_status p_init(const kpr_host_api *host, void **state, kpr_error *) {
    g_log.host = host;
    if (state) *state = nullptr;
    return KPR_OK;
}

const kpr_provider_identity *p_identity(void *) {
    static kpr_provider_identity id = [] {
        kpr_provider_identity i{};
        i.struct_size = sizeof(i);
        i.device_kind = KPR_DEVICE_CUDA;
        i.name = "generic_cuda";
        i.version = "0.1.0";
        i.family = "generic";
        i.description = "portable CUDA GEMV and grouped GEMV for every GGUF type kpr serves (q8_1 activations)";
        i.sass_archs = cuda::sass_archs(&i.n_sass_archs);
        i.ptx_archs = cuda::ptx_archs(&i.n_ptx_archs);
        return i;
    }();
    return &id;
}

uint32_t p_option_count(void *) { return kNOptions; }
const kpr_option_decl *p_option_get(void *, uint32_t i) { return i < kNOptions ? &kOptions[i] : nullptr; }

kpr_status p_query(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *opts,
                   kpr_offer *offer, kpr_error *err) {
    if (op == nullptr || dev == nullptr || offer == nullptr || offer->struct_size < sizeof(kpr_offer))
        return cuda::fail(err, KPR_ERR_INVALID_ARGUMENT, "query: null or short arguments");
    if (dev->kind != KPR_DEVICE_CUDA) {
        cuda::decline(offer, KPR_ERR_UNSUPPORTED, "generic_cuda runs on CUDA devices only");
        return KPR_OK;
    }
    char why[KPR_REASON_CAPACITY];
    if (!cuda::arch_runs_on(dev->cc_major, dev->cc_minor, why, sizeof(why))) {
        cuda::decline(offer, KPR_ERR_WRONG_ARCH, "%s", why);
        return KPR_OK;
    }
    const cuda::TypeDesc *td = cuda::type_desc(op->weight_type);
    const TypeKernel *k = find_kernel(op->weight_type);
    if (td == nullptr || k == nullptr) {
        char tb[16];
        cuda::decline(offer, KPR_ERR_UNSUPPORTED, "type %s is not implemented by generic_cuda",
                      cuda::type_label(op->weight_type, tb));
        return KPR_OK;
    }
    if (!cuda::check_op_shape(op, offer, td->qk == 1 ? 32 : td->qk)) return KPR_OK;
    offer->accepted = 1;
    offer->score = 100;
    offer->decline_code = KPR_OK;
    offer->prepared_bytes = cuda::gemv_scratch_bytes(op, k->float_x);
    offer->workspace_bytes = 0;
    // the layout a call takes (kpr_cuda_gemv.cuh: launch_gemv_nc), for weights at a 16-byte-aligned address
    const bool sm80 = dev->cc_major >= 8 && !k->float_x && op->kind == KPR_OP_GEMV;
    // the tile kernel: mma_serves on what it decides from (the launcher may still decline: unaligned
    // weights, a row length that is not a multiple of its chunk)
    cuda::GemvArgs ta{};
    ta.sm90 = sm80 && dev->cc_major >= 9 ? 1u : 0u;
    ta.aligned = cuda::row_bytes(td, op->cols) % 16 == 0 ? 1u : 0u; // (the weights' address is not known here)
    ta.mma_mode = mma_mode(opts);
    ta.xq_n = 1;
    ta.sms = dev->sm_count;
    ta.smem_optin = dev->smem_per_block_optin;
    ta.smem_sm = dev->smem_per_sm;
    ta.rows = static_cast<uint32_t>(op->rows);
    ta.nb = static_cast<uint32_t>(op->cols / td->qk);
    ta.x.cols = static_cast<uint32_t>(op->cols);
    const bool tile = cuda::mma_serves_type(op->weight_type, ta, op->ncols);
    const bool wide = tile && cuda::mma_wide(op->weight_type, ta, op->ncols);
    const bool two = tile && cuda::mma_two_tiles(op->weight_type, ta, op->ncols);
    // the 4-row kernel (launch_gemv_nc): on rows that are not aligned for the types with its UA instance
    const bool quad = sm80 && op->ncols >= 3 && td->qk == 256 &&
                      (ta.aligned || (td->bytes % 16 != 0 && op->ncols >= cuda::quad_unaligned_min_cols(op->weight_type)));
    const bool two8 = two && cuda::mma_two_tiles_eight_warps(op->weight_type, ta);
    const char *layout = two8 ? "the int8 tensor-core tile kernel (16 rows x 8 columns per mma, two tiles per block of 8 warps)"
                         : two ? "the int8 tensor-core tile kernel (16 rows x 8 columns per mma, two tiles per block)"
                         : tile && wide ? "the int8 tensor-core tile kernel (16 rows x 8 columns per mma, 16 warps per tile)"
                         : tile ? "the int8 tensor-core tile kernel (16 rows x 8 columns per mma)"
                         : quad ? "four rows per warp"
                         : op->kind == KPR_OP_GEMV && (sm80 || op->ncols >= 3) ? "two rows per warp"
                                                                               : "a row per warp";
    // where a one-column call reads its activations (where the whole vector does not fit the
    // shared-memory budget, the launcher takes the staged or the L1 path)
    const bool one = sm80 && op->ncols == 1;
    const char *xsrc = one && tile                                  ? ", quantized in the kernel (one kernel per call)"
                       : !one                                       ? ""
                       : cuda::copies_whole_vector(op->weight_type) ? ", the vector in shared memory per block where it fits"
                       : cuda::stages_activations(op->weight_type)  ? ", staged with the weight chunks"
                                                                    : "";
    char planar[160] = "";
    const AltPlan L = alt_plan(op, dev, dev->smem_per_block_optin, opts, true);
    if (L.launch != nullptr) {
        const uint64_t copy_bytes = L.signs ? sign_copy_bytes(op, L.sign_layout) : weight_bytes(op, td);
        if (L.copy) offer->prepared_bytes += copy_bytes;
        char copy[64] = "";
        if (L.copy)
            std::snprintf(copy, sizeof(copy), ", on a %s copy (%.1f MiB)", L.signs ? "sign" : "planar",
                          copy_bytes / 1048576.0);
        const char *what = !L.signs ? "a thread per 32-weight position of every row"
                           : L.sign_layout == SignCopyLayout::lanes
                               ? "IQ3_XXS signs spelled out, a thread per 32-weight position of every row"
                               : "IQ3_XXS signs spelled out";
        std::snprintf(planar, sizeof(planar), "; %s: %s%s",
                      L.mask == 3 ? "1-2 columns" : L.mask == 1 ? "1 column" : "2 columns", what, copy);
    } else if (L.no != nullptr) {
        std::snprintf(planar, sizeof(planar), "; no %s copy: %s", L.signs ? "sign" : "planar", L.no);
    }
    cuda::set_reason(offer, "%s %s, ncols %u, %s activations%s, %s%s", td->name,
                     op->kind == KPR_OP_GEMV ? "gemv" : "grouped gemv (ids on the device)", op->ncols,
                     k->float_x ? "float" : "q8_1", xsrc, layout, planar);
    return KPR_OK;
}

kpr_status p_prepare(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *opts,
                     const kpr_weights *w, kpr_prepared **out, kpr_error *err) {
    try {
        const TypeKernel *k = op ? find_kernel(op->weight_type) : nullptr;
        if (k == nullptr) return cuda::fail(err, KPR_ERR_UNSUPPORTED, "prepare: weight type unsupported");
        cuda::GemvPrepared *p = nullptr;
        const kpr_status st = cuda::gemv_prepare(op, dev, w, k->float_x, k->launch, &p, err);
        if (st != KPR_OK) return st;
        std::unique_ptr<cuda::GemvPrepared> hold(p);
        p->mma_mode = mma_mode(opts);
        const AltPlan L = p->rows80 ? alt_plan(op, dev, p->smem_optin, opts, p->sm80()) : AltPlan{};
        if (L.copy && L.signs) {
            const SignCopyLayout sl = L.sign_layout;
            auto fill = [&](void *dst) { return sign_copy_repack(w->data, dst, op->rows, op->cols / 256, sl); };
            const kpr_status pst = g_copies.acquire(
                cuda::WeightCopyKey{w->identity, w->data, w->bytes, dev->ordinal, static_cast<uint32_t>(sl)},
                sign_copy_bytes(op, sl), fill, &p->alt_copy, err);
            if (pst != KPR_OK) return pst;
        } else if (L.copy) {
            const uint64_t bytes = w->bytes, rb = p->row_bytes, rows = op->rows;
            const uint32_t nb = static_cast<uint32_t>(op->cols / 32);
            auto fill = [&](void *dst) { return planar_repack(w->data, dst, rb, rows, nb); };
            const kpr_status pst = g_copies.acquire(
                cuda::WeightCopyKey{w->identity, w->data, bytes, dev->ordinal, kPlanarLayout}, bytes, fill,
                &p->alt_copy, err);
            if (pst != KPR_OK) return pst;
        }
        p->alt_launch = L.launch;
        p->alt_mask = L.mask;
        *out = reinterpret_cast<kpr_prepared *>(hold.release());
        return KPR_OK;
    } catch (const std::exception &e) {
        return cuda::fail(err, KPR_ERR_INTERNAL, "prepare: %s", e.what());
    } catch (...) {
        return cuda::fail(err, KPR_ERR_INTERNAL, "prepare: unknown exception");
    }
}

kpr_status p_run(void *, kpr_prepared *prepared, const kpr_run_args *args, kpr_error *err) {
    try {
        if (prepared == nullptr) return cuda::fail(err, KPR_ERR_INVALID_ARGUMENT, "run: null prepared op");
        return cuda::gemv_run(*reinterpret_cast<cuda::GemvPrepared *>(prepared), args, err);
    } catch (const std::exception &e) {
        return cuda::fail(err, KPR_ERR_INTERNAL, "run: %s", e.what());
    } catch (...) {
        return cuda::fail(err, KPR_ERR_INTERNAL, "run: unknown exception");
    }
}

void p_release(void *, kpr_prepared *prepared) {
    if (prepared == nullptr) return;
    auto *p = reinterpret_cast<cuda::GemvPrepared *>(prepared);
    cuda::use_device(p->ordinal);
    delete p;
}

// ---- self-tests ------------------------------------------------------------------------------------
// Tolerances (justified in providers/generic_cuda/README.md): against the float reference, 2e-2 for
// every type that quantizes activations to q8_1 (the activation rounding alone is ~5e-3 of max|ref|
// on random data), 1e-5 for float types; against the reference that rounds activations to q8_1 the
// same way, 1e-4 (float accumulation over up to 28672 products, scales rounded once).
constexpr double kTolQ = 2e-2, kTolF = 1e-5, kQTol = 1e-4;

// Every type generic_cuda serves, the headline types first (case names use cuda::type_desc's names).
constexpr uint32_t kTypes[] = {
    KPR_TYPE_Q8_0, KPR_TYPE_Q4_0, KPR_TYPE_Q4_K, KPR_TYPE_IQ4_NL, KPR_TYPE_IQ3_XXS, KPR_TYPE_IQ3_S,
    KPR_TYPE_Q4_1, KPR_TYPE_Q5_0, KPR_TYPE_Q5_1, KPR_TYPE_Q2_K,   KPR_TYPE_Q3_K,    KPR_TYPE_Q5_K,
    KPR_TYPE_Q6_K, KPR_TYPE_IQ4_XS, KPR_TYPE_F32, KPR_TYPE_F16,   KPR_TYPE_BF16,
};

struct Shape {
    const char *tag;
    uint32_t op_kind;
    uint64_t rows, cols;
    uint32_t ncols, n_experts, n_used, x_slots;
};
// Per type: dense 7B-70B shapes, odd rows, every ncols, MoE (grouped, ids on the device).
constexpr Shape kShapes[] = {
    {"4096x4096", KPR_OP_GEMV, 4096, 4096, 1, 1, 1, 1},
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 8, 1, 1, 1},
    {"14336x4096", KPR_OP_GEMV, 14336, 4096, 2, 1, 1, 1},
    {"14339x4096", KPR_OP_GEMV, 14339, 4096, 1, 1, 1, 1}, // one column over several waves (lean_over_waves)
    {"1001x5120", KPR_OP_GEMV, 1001, 5120, 3, 1, 1, 1},
    {"77x1536", KPR_OP_GEMV, 77, 1536, 4, 1, 1, 1},
    {"257x2048", KPR_OP_GEMV, 257, 2048, 5, 1, 1, 1},
    {"130x768", KPR_OP_GEMV, 130, 768, 6, 1, 1, 1},
    {"4097x512", KPR_OP_GEMV, 4097, 512, 7, 1, 1, 1},
    {"4093x14336", KPR_OP_GEMV, 4093, 14336, 1, 1, 1, 1}, // whole vector per block, a block with an idle warp
    {"509x28672", KPR_OP_GEMV, 509, 28672, 1, 1, 1, 1},   // wide: the whole vector fits only 16-warp blocks
    // rows that are not 16-byte aligned at one and two columns (the cp.async rings read the lines around
    // them): 43 super-blocks (IQ3_XXS, IQ3_S, Q3_K, Q6_K) and 241 32-weight blocks (Q8_0, Q4_0, IQ4_NL, ...)
    {"4093x11008", KPR_OP_GEMV, 4093, 11008, 1, 1, 1, 1},
    {"2053x7712", KPR_OP_GEMV, 2053, 7712, 1, 1, 1, 1},
    {"1001x7712", KPR_OP_GEMV, 1001, 7712, 2, 1, 1, 1},
    // and at 3..8 columns (the 4-row kernel's UA instance): 31 and 35 super-blocks (every 256-weight type
    // but Q4_K and Q5_K unaligned), 4-row groups with 1 and 3 rows past the end
    {"1001x7712", KPR_OP_GEMV, 1001, 7712, 8, 1, 1, 1},
    {"263x8960", KPR_OP_GEMV, 263, 8960, 5, 1, 1, 1},
    {"moe 32e8u 768x2048", KPR_OP_GEMV_GROUPED, 768, 2048, 1, 32, 8, 1},
    {"moe 32e8u 2048x768 slots", KPR_OP_GEMV_GROUPED, 2048, 768, 3, 32, 8, 8},
};

// Extra big or model-sized cases for the headline types.
constexpr Shape kExtra[] = {
    {"8192x28672", KPR_OP_GEMV, 8192, 28672, 1, 1, 1, 1},
    {"moe 128e8u 768x2048", KPR_OP_GEMV_GROUPED, 768, 2048, 2, 128, 8, 1},
    {"28672x8192", KPR_OP_GEMV, 28672, 8192, 8, 1, 1, 1}, // the tile kernel over several waves
    {"2048x2048", KPR_OP_GEMV, 2048, 2048, 2, 1, 1, 1},   // Q8_0: the tile kernel at two columns
    {"6144x6144", KPR_OP_GEMV, 6144, 6144, 1, 1, 1, 1},   // Q4_0, Q4_K: 8 warps per tile over several waves
    {"4093x4096", KPR_OP_GEMV, 4093, 4096, 1, 1, 1, 1},   // Q4_0, Q4_K, IQ4_NL: two tiles per block of 8 warps,
                                                          // the last block partial
};
constexpr uint32_t kExtraTypes[] = {KPR_TYPE_Q8_0, KPR_TYPE_Q4_K, KPR_TYPE_Q4_0, KPR_TYPE_IQ4_NL};

// The tile kernel forced on (tile_kernel = on) at every column count 1..8, for each type that has one:
// odd row counts (a partial tile), several waves of tiles, warps without a chunk (512 columns). At one
// column the kernel quantizes the activations itself.
constexpr Shape kTileShapes[] = {
    {"77x1536", KPR_OP_GEMV, 77, 1536, 2, 1, 1, 1},       {"1001x5120", KPR_OP_GEMV, 1001, 5120, 3, 1, 1, 1},
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 4, 1, 1, 1}, {"257x2048", KPR_OP_GEMV, 257, 2048, 5, 1, 1, 1},
    {"4097x512", KPR_OP_GEMV, 4097, 512, 6, 1, 1, 1},     {"14336x4096", KPR_OP_GEMV, 14336, 4096, 7, 1, 1, 1},
    {"4093x14336", KPR_OP_GEMV, 4093, 14336, 8, 1, 1, 1}, {"4093x14336", KPR_OP_GEMV, 4093, 14336, 1, 1, 1, 1},
    {"77x1536", KPR_OP_GEMV, 77, 1536, 1, 1, 1, 1},       {"4097x512", KPR_OP_GEMV, 4097, 512, 1, 1, 1, 1},
    {"14336x4096", KPR_OP_GEMV, 14336, 4096, 1, 1, 1, 1},
};
constexpr uint32_t kTileTypes[] = {KPR_TYPE_Q8_0, KPR_TYPE_Q4_0, KPR_TYPE_Q4_K, KPR_TYPE_Q5_K, KPR_TYPE_IQ4_NL,
                                   KPR_TYPE_IQ4_XS};
const kpr_option_value kTileOn[] = {{"tile_kernel", "on"}};
// tile_kernel = wide (16 warps per block): the one-column shapes above and the target shape, and 2..8
// columns (the quantizer, then the kernel) on a partial tile, several waves and warps without a chunk
constexpr Shape kWideShapes[] = {
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 1, 1, 1, 1}, {"4093x14336", KPR_OP_GEMV, 4093, 14336, 1, 1, 1, 1},
    {"77x1536", KPR_OP_GEMV, 77, 1536, 1, 1, 1, 1},       {"4097x512", KPR_OP_GEMV, 4097, 512, 1, 1, 1, 1},
    {"14336x4096", KPR_OP_GEMV, 14336, 4096, 1, 1, 1, 1}, {"77x1536", KPR_OP_GEMV, 77, 1536, 2, 1, 1, 1},
    {"1001x5120", KPR_OP_GEMV, 1001, 5120, 3, 1, 1, 1},   {"14336x4096", KPR_OP_GEMV, 14336, 4096, 4, 1, 1, 1},
    {"257x2048", KPR_OP_GEMV, 257, 2048, 5, 1, 1, 1},     {"4097x512", KPR_OP_GEMV, 4097, 512, 6, 1, 1, 1},
    {"2048x8192", KPR_OP_GEMV, 2048, 8192, 7, 1, 1, 1},   {"4093x14336", KPR_OP_GEMV, 4093, 14336, 8, 1, 1, 1},
    // 35 super-blocks: IQ4_XS rows not 16-byte aligned (chunks of one block, MmaOneBlock)
    {"1536x8960", KPR_OP_GEMV, 1536, 8960, 1, 1, 1, 1},   {"263x8960", KPR_OP_GEMV, 263, 8960, 3, 1, 1, 1},
};
const kpr_option_value kTileWide[] = {{"tile_kernel", "wide"}};
// tile_kernel = wide32 (32 rows per block at one column: Q4_0, IQ4_NL, Q4_K, Q5_K): a partial block of rows (4093),
// several waves, warps without a chunk
constexpr Shape kWide32Shapes[] = {
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 1, 1, 1, 1}, {"4093x14336", KPR_OP_GEMV, 4093, 14336, 1, 1, 1, 1},
    {"77x1536", KPR_OP_GEMV, 77, 1536, 1, 1, 1, 1},       {"4097x512", KPR_OP_GEMV, 4097, 512, 1, 1, 1, 1},
    {"14336x4096", KPR_OP_GEMV, 14336, 4096, 1, 1, 1, 1}, {"509x28672", KPR_OP_GEMV, 509, 28672, 1, 1, 1, 1},
};
constexpr uint32_t kWide32Types[] = {KPR_TYPE_Q4_0, KPR_TYPE_IQ4_NL, KPR_TYPE_Q4_K, KPR_TYPE_Q5_K};
const kpr_option_value kTileWide32[] = {{"tile_kernel", "wide32"}};

// tile_kernel = off: the row kernels that serve these types below 9.0 (and on 9.0 where auto leaves them): IQ4_NL's
// and IQ4_XS's one- and two-column decode with the activations in the nibble order, on rows 16-byte aligned
// (4096 x 14336: the whole vector; 4093 rows: a partial row group) and not (7712 columns: 241 blocks of 18 bytes,
// or 31 super-blocks of 136 bytes once rounded up to 7936), several waves (14336 x 4096), the 4-row kernel at 3 columns
constexpr Shape kTileOffShapes[] = {
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 1, 1, 1, 1}, {"4093x14336", KPR_OP_GEMV, 4093, 14336, 2, 1, 1, 1},
    {"2053x7712", KPR_OP_GEMV, 2053, 7712, 1, 1, 1, 1},   {"1001x7712", KPR_OP_GEMV, 1001, 7712, 2, 1, 1, 1},
    {"14336x4096", KPR_OP_GEMV, 14336, 4096, 1, 1, 1, 1}, {"1001x5120", KPR_OP_GEMV, 1001, 5120, 3, 1, 1, 1},
};
const kpr_option_value kTileOff[] = {{"tile_kernel", "off"}};

// The lanes kernel forced on (block_lanes = on; Q4_0 and IQ4_NL with planar_weights = true) at one and two
// columns: one kernel per call (>= 2^25 weights) and the quantizer + kernel (smaller), odd row counts,
// several teams per block (4097 x 512: 16), a team of 512 threads (16384 columns), and shapes the planar
// path does not take (rows of 2080 weights are not 16-byte aligned; 28672 columns are wider than a team),
// which must fall back to the GGUF-layout kernels.
constexpr Shape kPlanarShapes[] = {
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 1, 1, 1, 1}, {"4093x14336", KPR_OP_GEMV, 4093, 14336, 1, 1, 1, 1},
    {"14336x4096", KPR_OP_GEMV, 14336, 4096, 1, 1, 1, 1}, {"4096x4096", KPR_OP_GEMV, 4096, 4096, 1, 1, 1, 1},
    {"77x1536", KPR_OP_GEMV, 77, 1536, 1, 1, 1, 1},       {"4097x512", KPR_OP_GEMV, 4097, 512, 1, 1, 1, 1},
    {"509x16384", KPR_OP_GEMV, 509, 16384, 1, 1, 1, 1},   {"2053x16384", KPR_OP_GEMV, 2053, 16384, 1, 1, 1, 1},
    {"257x2080", KPR_OP_GEMV, 257, 2080, 1, 1, 1, 1},     {"509x28672", KPR_OP_GEMV, 509, 28672, 1, 1, 1, 1},
    {"1001x5120", KPR_OP_GEMV, 1001, 5120, 3, 1, 1, 1},    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 2, 1, 1, 1},
    {"14336x4096", KPR_OP_GEMV, 14336, 4096, 2, 1, 1, 1}, {"4096x4096", KPR_OP_GEMV, 4096, 4096, 2, 1, 1, 1},
    {"77x1536", KPR_OP_GEMV, 77, 1536, 2, 1, 1, 1},       {"4097x512", KPR_OP_GEMV, 4097, 512, 2, 1, 1, 1},
    {"2053x16384", KPR_OP_GEMV, 2053, 16384, 2, 1, 1, 1},
};
constexpr uint32_t kPlanarTypes[] = {KPR_TYPE_Q4_0, KPR_TYPE_IQ4_NL};
// Q4_K runs the same shapes with block_lanes = on (its GGUF rows in place; the 2080-wide rows become 2304).
constexpr uint32_t kLanesTypes[] = {KPR_TYPE_Q4_K};
const kpr_option_value kPlanarOn[] = {{"planar_weights", "true"}, {"block_lanes", "on"}};
const kpr_option_value kLanesOn[] = {{"block_lanes", "on"}};

// sign_copy = true (IQ3_XXS; the copy serves one-column plain GEMV on 9.0 from 8 rows per SM of 132: in the
// whole-vector kernel's window, 8..32 rows per SM, its blocks layout; above it, the lanes layout): 4096 and 2048 rows,
// 4093 a partial block, rows that are not 16-byte aligned (43 blocks of 104 bytes); the lanes layout on 14336 and
// 14339 rows (17 blocks: 136 sub-blocks, a team of 160 threads with 24 idle); ops that make no copy and read the GGUF
// rows: below the window (509, 77 rows), grouped; and an op prepared for 4 columns (its 4-column calls read the GGUF
// rows). kSignCopyLanesShapes, a later group, adds lanes shapes.
constexpr Shape kSignCopyShapes[] = {
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 1, 1, 1, 1}, {"4093x14336", KPR_OP_GEMV, 4093, 14336, 1, 1, 1, 1},
    {"2048x8192", KPR_OP_GEMV, 2048, 8192, 1, 1, 1, 1},   {"14336x4096", KPR_OP_GEMV, 14336, 4096, 1, 1, 1, 1},
    {"77x1536", KPR_OP_GEMV, 77, 1536, 1, 1, 1, 1},       {"509x28672", KPR_OP_GEMV, 509, 28672, 1, 1, 1, 1},
    {"4093x11008", KPR_OP_GEMV, 4093, 11008, 1, 1, 1, 1}, {"14339x4352", KPR_OP_GEMV, 14339, 4352, 1, 1, 1, 1},
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 4, 1, 1, 1}, {"moe 32e8u 768x2048", KPR_OP_GEMV_GROUPED, 768, 2048, 1, 32, 8, 1},
};
constexpr uint32_t kSignCopyTypes[] = {KPR_TYPE_IQ3_XXS};
// sign_copy's lanes layout on more shapes: a 512-thread team (16384 weights, one team per block), 13824 weights (432
// sub-blocks in a team of 448), and 4225 rows, one over the whole-vector window on 132 SMs (a team of 64 threads,
// 8 teams a block, 4 or 5 rows a team: the second batch empty or partial)
constexpr Shape kSignCopyLanesShapes[] = {
    {"8192x16384", KPR_OP_GEMV, 8192, 16384, 1, 1, 1, 1},
    {"5120x13824", KPR_OP_GEMV, 5120, 13824, 1, 1, 1, 1},
    {"4225x2048", KPR_OP_GEMV, 4225, 2048, 1, 1, 1, 1},
};
const kpr_option_value kSignCopyOn[] = {{"sign_copy", "true"}};

// IQ3_XXS and IQ3_S at one column outside the whole-vector window on 9.0 (the row kernel, two rows per warp) on rows
// that are not 16-byte aligned (6, 17 and 43 blocks: its UA instance), which no case above reaches
constexpr Shape kIq3RowShapes[] = {
    {"77x1536", KPR_OP_GEMV, 77, 1536, 1, 1, 1, 1},
    {"14339x4352", KPR_OP_GEMV, 14339, 4352, 1, 1, 1, 1},
    {"509x11008", KPR_OP_GEMV, 509, 11008, 1, 1, 1, 1},
};
constexpr uint32_t kIq3Types[] = {KPR_TYPE_IQ3_XXS, KPR_TYPE_IQ3_S};

// The case list: each group runs every one of its types on every one of its shapes (type-major), with its options
// and a name suffix that names them. Case i is found by walking the groups in order, so a new group goes at the end
// (case indices, and `kpr selftest --list`, stay put).
struct CaseGroup {
    const uint32_t *types;
    uint32_t n_types;
    const Shape *shapes;
    uint32_t n_shapes;
    const kpr_option_value *options; // null: the defaults
    uint32_t n_options;
    const char *suffix;              // after "<type> <shape> n<ncols>"
    constexpr uint32_t size() const { return n_types * n_shapes; }
};
template <size_t NT, size_t NS>
constexpr CaseGroup group(const uint32_t (&types)[NT], const Shape (&shapes)[NS]) {
    return CaseGroup{types, NT, shapes, NS, nullptr, 0, ""};
}
template <size_t NT, size_t NS, size_t NO>
constexpr CaseGroup group(const uint32_t (&types)[NT], const Shape (&shapes)[NS], const kpr_option_value (&options)[NO],
                          const char *suffix) {
    return CaseGroup{types, NT, shapes, NS, options, NO, suffix};
}
constexpr CaseGroup kGroups[] = {
    group(kTypes, kShapes),
    group(kExtraTypes, kExtra),
    group(kTileTypes, kTileShapes, kTileOn, " tile_kernel=on"),
    group(kPlanarTypes, kPlanarShapes, kPlanarOn, " planar_weights block_lanes=on"),
    group(kLanesTypes, kPlanarShapes, kLanesOn, " block_lanes=on"),
    group(kTileTypes, kWideShapes, kTileWide, " tile_kernel=wide"),
    group(kWide32Types, kWide32Shapes, kTileWide32, " tile_kernel=wide32"),
    group(kTileTypes, kTileOffShapes, kTileOff, " tile_kernel=off"),
    group(kSignCopyTypes, kSignCopyShapes, kSignCopyOn, " sign_copy"),
    group(kIq3Types, kIq3RowShapes),
    group(kSignCopyTypes, kSignCopyLanesShapes, kSignCopyOn, " sign_copy"),
};
constexpr uint32_t kNCases = [] {
    uint32_t n = 0;
    for (const CaseGroup &g : kGroups) n += g.size();
    return n;
}();

uint32_t p_selftest_count(void *, const kpr_device_desc *) { return kNCases; }

kpr_status p_selftest_get(void *, const kpr_device_desc *, uint32_t index, kpr_selftest_case *out, kpr_error *err) {
    static char names[kNCases][96];
    if (index >= kNCases) return cuda::fail(err, KPR_ERR_INVALID_ARGUMENT, "selftest_get: index %u out of range", index);
    uint32_t e = index;
    const CaseGroup *g = kGroups;
    while (e >= g->size()) e -= (g++)->size();
    const uint32_t type = g->types[e / g->n_shapes];
    const Shape *s = &g->shapes[e % g->n_shapes];
    // legal shapes only: K-quant/IQ types need cols % 256
    uint64_t cols = s->cols;
    const cuda::TypeDesc *td = cuda::type_desc(type);
    if (cols % td->qk) cols = (cols / 256 + 1) * 256;
    std::snprintf(names[index], sizeof(names[index]), "%s %s n%u%s", td->name, s->tag, s->ncols, g->suffix);
    const bool fx = find_kernel(type)->float_x;
    cuda::CaseSpec c{names[index], KPR_SELFTEST_REFERENCE, s->op_kind, type, s->ncols, s->rows, cols,
                     s->n_experts, s->n_used, s->x_slots, fx ? kTolF : kTolQ,
                     static_cast<uint32_t>(fx ? KPR_ACT_FLOAT : KPR_ACT_Q8_1), kQTol, nullptr, g->options, g->n_options};
    return cuda::fill_case(c, out, err);
}

const kpr_provider_v1 kTable = {
    sizeof(kpr_provider_v1), KPR_ABI_VERSION, p_init, nullptr, p_identity, p_option_count, p_option_get,
    p_query, p_prepare, p_run, p_release, p_selftest_count, p_selftest_get, nullptr,
};

} // namespace
} // namespace kpr::generic_cuda

extern "C" KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry(const kpr_handshake_offer *offer,
                                                             kpr_handshake_answer *answer, kpr_error *err) {
    return kpr::cuda::handshake(offer, answer, err, &kpr::generic_cuda::kTable);
}

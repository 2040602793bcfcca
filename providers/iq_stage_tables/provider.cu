// iq_stage_tables: IQ3_XXS and IQ3_S GEMV and grouped GEMV with the codebook and the sign-mask tables
// staged in shared memory by every block, signs applied as (g ^ m) + (m & 0x01010101). It runs the same
// row-streaming kernel and the same block arithmetic as generic_cuda (providers/common/cuda), so its
// output is bitwise identical to generic_cuda's; the PARITY self-tests check that on every case.
// On by default only on compute capability 6.0 (where the tables in shared memory pay); `mode` forces.
#include "kpr_cuda_host.hpp"
#include "kpr_cuda_run.cuh"

#include <cstring>
#include <exception>

namespace kpr::iq_stage_tables {

cudaError_t launch_iq3_xxs(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);
cudaError_t launch_iq3_s(const cuda::GemvArgs &, uint32_t, uint32_t, bool, cudaStream_t);

namespace {
using namespace kpr::cuda;

HostLog g_log;

const kpr_option_decl kOptions[] = {
    {sizeof(kpr_option_decl), KPR_OPTION_STRING, "mode", "auto",
     "auto: accept only on compute capability 6.0; on: accept on any device; off: decline", 0, 0, "auto,on,off"},
};

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
        i.name = "iq_stage_tables";
        i.version = "0.1.0";
        i.family = nullptr;
        i.description = "IQ3_XXS / IQ3_S gemv with codebook and sign masks staged in shared memory "
                        "(bitwise equal to generic_cuda)";
        i.sass_archs = sass_archs(&i.n_sass_archs);
        i.ptx_archs = ptx_archs(&i.n_ptx_archs);
        return i;
    }();
    return &id;
}

uint32_t p_option_count(void *) { return 1; }
const kpr_option_decl *p_option_get(void *, uint32_t i) { return i == 0 ? &kOptions[0] : nullptr; }

GemvLaunchFn kernel_for(uint32_t type) {
    if (type == KPR_TYPE_IQ3_XXS) return launch_iq3_xxs;
    if (type == KPR_TYPE_IQ3_S) return launch_iq3_s;
    return nullptr;
}

kpr_status p_query(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *opts,
                   kpr_offer *offer, kpr_error *err) {
    if (op == nullptr || dev == nullptr || offer == nullptr || offer->struct_size < sizeof(kpr_offer))
        return fail(err, KPR_ERR_INVALID_ARGUMENT, "query: null or short arguments");
    if (dev->kind != KPR_DEVICE_CUDA) {
        decline(offer, KPR_ERR_UNSUPPORTED, "iq_stage_tables runs on CUDA devices only");
        return KPR_OK;
    }
    const char *mode = option_value(opts, "mode");
    if (mode == nullptr) mode = "auto";
    if (std::strcmp(mode, "off") == 0) {
        decline(offer, KPR_ERR_UNSUPPORTED, "mode = off");
        return KPR_OK;
    }
    char why[KPR_REASON_CAPACITY];
    if (!arch_runs_on(dev->cc_major, dev->cc_minor, why, sizeof(why))) {
        decline(offer, KPR_ERR_WRONG_ARCH, "%s", why);
        return KPR_OK;
    }
    if (kernel_for(op->weight_type) == nullptr) {
        char tb[16];
        decline(offer, KPR_ERR_UNSUPPORTED, "iq_stage_tables serves iq3_xxs and iq3_s only, not %s",
                type_label(op->weight_type, tb));
        return KPR_OK;
    }
    if (!check_op_shape(op, offer, 256)) return KPR_OK;
    const bool on60 = dev->cc_major == 6 && dev->cc_minor == 0;
    if (std::strcmp(mode, "on") != 0 && !on60) {
        decline(offer, KPR_ERR_UNSUPPORTED, "staged tables pay only on compute capability 6.0; set mode = on to force");
        return KPR_OK;
    }
    const bool xxs = op->weight_type == KPR_TYPE_IQ3_XXS;
    offer->accepted = 1;
    offer->score = 300;
    offer->decline_code = KPR_OK;
    offer->prepared_bytes = gemv_scratch_bytes(op, false);
    offer->workspace_bytes = 0;
    set_reason(offer, "%s %s with %s staged in shared memory (%u bytes per block), bitwise equal to generic_cuda",
               xxs ? "iq3_xxs" : "iq3_s", op->kind == KPR_OP_GEMV ? "gemv" : "grouped gemv",
               xxs ? "the 256-entry grid and two 128-word sign-mask tables"
                   : "the 512-entry grid and two 256-word sign-mask tables",
               xxs ? (256 + 256) * 4 : (512 + 512) * 4);
    return KPR_OK;
}

kpr_status p_prepare(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *,
                     const kpr_weights *w, kpr_prepared **out, kpr_error *err) {
    try {
        GemvLaunchFn k = op ? kernel_for(op->weight_type) : nullptr;
        if (k == nullptr) return fail(err, KPR_ERR_UNSUPPORTED, "prepare: weight type unsupported");
        GemvPrepared *p = nullptr;
        const kpr_status st = gemv_prepare(op, dev, w, false, k, &p, err);
        if (st != KPR_OK) return st;
        *out = reinterpret_cast<kpr_prepared *>(p);
        return KPR_OK;
    } catch (const std::exception &e) {
        return fail(err, KPR_ERR_INTERNAL, "prepare: %s", e.what());
    } catch (...) {
        return fail(err, KPR_ERR_INTERNAL, "prepare: unknown exception");
    }
}

kpr_status p_run(void *, kpr_prepared *prepared, const kpr_run_args *args, kpr_error *err) {
    try {
        if (prepared == nullptr) return fail(err, KPR_ERR_INVALID_ARGUMENT, "run: null prepared op");
        return gemv_run(*reinterpret_cast<GemvPrepared *>(prepared), args, err);
    } catch (const std::exception &e) {
        return fail(err, KPR_ERR_INTERNAL, "run: %s", e.what());
    } catch (...) {
        return fail(err, KPR_ERR_INTERNAL, "run: unknown exception");
    }
}

void p_release(void *, kpr_prepared *prepared) {
    if (prepared == nullptr) return;
    auto *p = reinterpret_cast<GemvPrepared *>(prepared);
    use_device(p->ordinal);
    delete p;
}

// ---- self-tests: every case is a PARITY case against generic_cuda (bit for bit) ----------------
const kpr_option_value kOn[] = {{"mode", "on"}};

struct S {
    const char *tag;
    uint32_t op_kind;
    uint64_t rows, cols;
    uint32_t ncols, n_experts, n_used, x_slots;
};
const S kShapes[] = {
    {"4096x4096", KPR_OP_GEMV, 4096, 4096, 1, 1, 1, 1},
    {"4093x14336", KPR_OP_GEMV, 4093, 14336, 1, 1, 1, 1}, // one column, a last block of 29 rows
    {"4096x14336", KPR_OP_GEMV, 4096, 14336, 8, 1, 1, 1},
    {"14336x4096", KPR_OP_GEMV, 14336, 4096, 2, 1, 1, 1},
    {"1001x5120", KPR_OP_GEMV, 1001, 5120, 3, 1, 1, 1},
    {"77x1536", KPR_OP_GEMV, 77, 1536, 4, 1, 1, 1},
    {"257x2048", KPR_OP_GEMV, 257, 2048, 5, 1, 1, 1},
    {"130x768", KPR_OP_GEMV, 130, 768, 6, 1, 1, 1},
    {"4097x512", KPR_OP_GEMV, 4097, 512, 7, 1, 1, 1},
    {"moe 128e8u 768x2048", KPR_OP_GEMV_GROUPED, 768, 2048, 1, 128, 8, 1},
    {"moe 32e8u 2048x768 slots", KPR_OP_GEMV_GROUPED, 2048, 768, 3, 32, 8, 8},
};
constexpr uint32_t kN = sizeof(kShapes) / sizeof(kShapes[0]);

uint32_t p_selftest_count(void *, const kpr_device_desc *) { return 2 * kN; }

kpr_status p_selftest_get(void *, const kpr_device_desc *, uint32_t index, kpr_selftest_case *out, kpr_error *err) {
    static char names[2 * kN][96];
    if (index >= 2 * kN) return fail(err, KPR_ERR_INVALID_ARGUMENT, "selftest_get: index %u out of range", index);
    const bool xxs = index < kN;
    const S &s = kShapes[index % kN];
    std::snprintf(names[index], sizeof(names[index]), "%s %s n%u parity", xxs ? "iq3_xxs" : "iq3_s", s.tag, s.ncols);
    // tolerances as generic_cuda's (same arithmetic): providers/iq_stage_tables/README.md
    CaseSpec c{names[index], KPR_SELFTEST_PARITY, s.op_kind, xxs ? KPR_TYPE_IQ3_XXS : KPR_TYPE_IQ3_S, s.ncols,
               s.rows, s.cols, s.n_experts, s.n_used, s.x_slots, 2e-2, KPR_ACT_Q8_1, 1e-4, "generic_cuda", kOn, 1};
    return fill_case(c, out, err);
}

const kpr_provider_v1 kTable = {
    sizeof(kpr_provider_v1), KPR_ABI_VERSION, p_init, nullptr, p_identity, p_option_count, p_option_get,
    p_query, p_prepare, p_run, p_release, p_selftest_count, p_selftest_get, nullptr,
};

} // namespace
} // namespace kpr::iq_stage_tables

extern "C" KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry(const kpr_handshake_offer *offer,
                                                             kpr_handshake_answer *answer, kpr_error *err) {
    return kpr::cuda::handshake(offer, answer, err, &kpr::iq_stage_tables::kTable);
}

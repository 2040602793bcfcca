// sm60_q8: the Pascal GP100 (compute capability 6.0) Q8_0 decode GEMV. Weights repacked once on the
// device into an int8 plane + float scales (shared between prepared ops on the same tensor), q8_1
// activations staged in shared memory, a warp / half warp / quarter warp per row, 16-byte loads through
// the read-only cache, __dp4a or its emulation, persistent blocks (blocks_per_sm per SM).
#include "kpr_cuda_act.cuh"
#include "kpr_cuda_host.hpp"
#include "kpr_cuda_q8plane.cuh"
#include "kpr_cuda_weight_copy.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <new>

namespace kpr::sm60_q8 {
namespace {

using namespace kpr::cuda;

HostLog g_log;

// the packed copies (int8 plane, then float scales), shared by tensor identity between prepared ops
WeightCopies g_packs;

struct Prepared {
    kpr_op_desc op{};
    int ordinal = 0;
    bool pdl = false;
    bool emulate = false;
    uint32_t grid = 0;
    uint64_t smem = 0;
    std::shared_ptr<WeightCopy> pack;
    const int8_t *plane = nullptr;
    const float *scales = nullptr;
    std::unique_ptr<StreamScratch> scratch;
};

// ---- options --------------------------------------------------------------------------------------
const kpr_option_decl kOptions[] = {
    {sizeof(kpr_option_decl), KPR_OPTION_INT, "blocks_per_sm", "4",
     "persistent blocks per multiprocessor (256 threads each)", 1, 32, nullptr},
    {sizeof(kpr_option_decl), KPR_OPTION_BOOL, "emulate_dp4a", "false",
     "use the byte dot-product emulation (the compute capability 6.0 path) even where __dp4a exists", 0, 0, nullptr},
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
        i.name = "sm60_q8";
        i.version = "0.1.0";
        i.family = nullptr;
        i.description = "Q8_0 decode GEMV for Pascal GP100 (cc 6.0): repacked int8 plane, staged q8_1 activations, "
                        "dp4a emulation on 6.0";
        i.sass_archs = sass_archs(&i.n_sass_archs);
        i.ptx_archs = ptx_archs(&i.n_ptx_archs);
        i.opt_in = 1; // off unless enabled: config/pascal-gp100.toml enables it on 6.0 by a rule
        return i;
    }();
    return &id;
}

uint32_t p_option_count(void *) { return 2; }
const kpr_option_decl *p_option_get(void *, uint32_t i) { return i < 2 ? &kOptions[i] : nullptr; }

int group_width(uint64_t cols) { return cols >= 2048 ? 32 : cols >= 1024 ? 16 : 8; }

uint64_t smem_limit(const kpr_device_desc *d) {
    return d->smem_per_block_optin > d->smem_per_block ? d->smem_per_block_optin : d->smem_per_block;
}

kpr_status p_query(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *opts,
                   kpr_offer *offer, kpr_error *err) {
    if (op == nullptr || dev == nullptr || offer == nullptr || offer->struct_size < sizeof(kpr_offer))
        return fail(err, KPR_ERR_INVALID_ARGUMENT, "query: null or short arguments");
    if (dev->kind != KPR_DEVICE_CUDA) {
        decline(offer, KPR_ERR_UNSUPPORTED, "sm60_q8 runs on CUDA devices only");
        return KPR_OK;
    }
    char why[KPR_REASON_CAPACITY];
    if (!arch_runs_on(dev->cc_major, dev->cc_minor, why, sizeof(why))) {
        decline(offer, KPR_ERR_WRONG_ARCH, "%s", why);
        return KPR_OK;
    }
    if (op->weight_type != KPR_TYPE_Q8_0) {
        char tb[16];
        decline(offer, KPR_ERR_UNSUPPORTED, "sm60_q8 serves q8_0 only, not %s", type_label(op->weight_type, tb));
        return KPR_OK;
    }
    if (op->kind != KPR_OP_GEMV) {
        decline(offer, KPR_ERR_UNSUPPORTED, "sm60_q8 serves plain gemv only (grouped gemv goes to generic_cuda)");
        return KPR_OK;
    }
    if (!check_op_shape(op, offer, 32)) return KPR_OK;
    const uint64_t need = q8plane_smem_bytes(op->cols, op->ncols), have = smem_limit(dev);
    if (need > have) {
        decline(offer, KPR_ERR_UNSUPPORTED,
                "staging %u columns of a %llu-wide row needs %.1f KiB shared memory, device allows %.1f KiB per block; "
                "at most %llu columns fit",
                op->ncols, (unsigned long long)op->cols, need / 1024.0, have / 1024.0,
                (unsigned long long)(have / q8plane_smem_bytes(op->cols, 1)));
        return KPR_OK;
    }
    const bool emu = option_bool(opts, "emulate_dp4a", false) || !dev->has_dp4a;
    const long bps = option_int(opts, "blocks_per_sm", 4);
    offer->accepted = 1;
    offer->score = (dev->cc_major == 6 && dev->cc_minor == 0) ? 300 : 50;
    offer->decline_code = KPR_OK;
    offer->prepared_bytes = op->rows * op->cols + op->rows * (op->cols / 32) * 4 + act_q8_bytes(op->ncols, op->cols);
    offer->workspace_bytes = 0;
    set_reason(offer, "q8_0 gemv, int8 plane + float scales, %s per row, %.1f KiB staged, %s, %ld blocks/SM",
               group_width(op->cols) == 32 ? "a warp" : group_width(op->cols) == 16 ? "a half warp" : "a quarter warp",
               need / 1024.0, emu ? "dp4a emulated" : "__dp4a", bps);
    return KPR_OK;
}

template <int NC, int G, bool EMU>
cudaError_t launch3(const Q8PlaneArgs &a, uint32_t grid, uint64_t smem, bool pdl, cudaStream_t s, bool set_attr) {
    auto k = q8plane_gemv<NC, G, EMU>;
    static std::atomic<uint64_t> raised{48 * 1024}; // the dynamic shared memory limit set on this instance
    if (set_attr && smem > raised.load()) {
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        if (e != cudaSuccess) return e;
        raised.store(smem);
    }
    return launch_pdl(k, dim3(grid), dim3(256), smem, pdl, s, a);
}

template <int NC, int G>
cudaError_t launch2(const Q8PlaneArgs &a, bool emu, uint32_t grid, uint64_t smem, bool pdl, cudaStream_t s, bool sa) {
    return emu ? launch3<NC, G, true>(a, grid, smem, pdl, s, sa) : launch3<NC, G, false>(a, grid, smem, pdl, s, sa);
}

template <int NC>
cudaError_t launch1(const Q8PlaneArgs &a, int g, bool emu, uint32_t grid, uint64_t smem, bool pdl, cudaStream_t s,
                    bool sa) {
    switch (g) {
    case 32: return launch2<NC, 32>(a, emu, grid, smem, pdl, s, sa);
    case 16: return launch2<NC, 16>(a, emu, grid, smem, pdl, s, sa);
    default: return launch2<NC, 8>(a, emu, grid, smem, pdl, s, sa);
    }
}

cudaError_t launch(const Q8PlaneArgs &a, uint32_t nc, int g, bool emu, uint32_t grid, uint64_t smem, bool pdl,
                   cudaStream_t s, bool set_attr) {
    switch (nc) {
    case 1: return launch1<1>(a, g, emu, grid, smem, pdl, s, set_attr);
    case 2: return launch1<2>(a, g, emu, grid, smem, pdl, s, set_attr);
    case 3: return launch1<3>(a, g, emu, grid, smem, pdl, s, set_attr);
    case 4: return launch1<4>(a, g, emu, grid, smem, pdl, s, set_attr);
    case 5: return launch1<5>(a, g, emu, grid, smem, pdl, s, set_attr);
    case 6: return launch1<6>(a, g, emu, grid, smem, pdl, s, set_attr);
    case 7: return launch1<7>(a, g, emu, grid, smem, pdl, s, set_attr);
    case 8: return launch1<8>(a, g, emu, grid, smem, pdl, s, set_attr);
    default: return cudaErrorInvalidValue;
    }
}

kpr_status p_prepare(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *opts,
                     const kpr_weights *w, kpr_prepared **out, kpr_error *err) {
    try {
        if (op == nullptr || dev == nullptr || w == nullptr || out == nullptr)
            return fail(err, KPR_ERR_INVALID_ARGUMENT, "prepare: null argument");
        if (dev->simulated) return fail(err, KPR_ERR_INVALID_ARGUMENT, "prepare: device is simulated");
        if (op->weight_type != KPR_TYPE_Q8_0 || op->kind != KPR_OP_GEMV || op->cols % 32 || op->ncols < 1 ||
            op->ncols > 8)
            return fail(err, KPR_ERR_UNSUPPORTED, "prepare: sm60_q8 serves Q8_0 gemv only");
        const uint64_t nb = op->cols / 32, wbytes = op->rows * nb * 34;
        if (w->data == nullptr || w->bytes != wbytes)
            return fail(err, KPR_ERR_INVALID_ARGUMENT, "prepare: weights are %llu bytes, the op needs %llu",
                        (unsigned long long)w->bytes, (unsigned long long)wbytes);
        cudaError_t e = use_device(dev->ordinal);
        if (e != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
        auto p = std::unique_ptr<Prepared>(new Prepared());
        p->op = *op;
        p->ordinal = dev->ordinal;
        p->pdl = dev->cc_major >= 9;
        p->emulate = option_bool(opts, "emulate_dp4a", false) || !dev->has_dp4a;
        const long bps = option_int(opts, "blocks_per_sm", 4);
        p->smem = q8plane_smem_bytes(op->cols, op->ncols);
        if (p->smem > smem_limit(dev))
            return fail(err, KPR_ERR_UNSUPPORTED, "prepare: staging needs %llu bytes of shared memory",
                        (unsigned long long)p->smem);
        const uint64_t rows_per_block = 8ull * (32 / group_width(op->cols));
        uint64_t grid = static_cast<uint64_t>(dev->sm_count ? dev->sm_count : 1) * static_cast<uint64_t>(bps);
        grid = std::min<uint64_t>(grid, (op->rows + rows_per_block - 1) / rows_per_block);
        p->grid = static_cast<uint32_t>(std::max<uint64_t>(grid, 1));
        p->scratch.reset(new StreamScratch(act_q8_bytes(op->ncols, op->cols)));

        // the packed copy: shared by tensor identity
        const uint64_t plane = (op->rows * op->cols + 255) / 256 * 256, nblk = op->rows * nb;
        auto fill = [&](void *mem) {
            repack_q8_0<<<static_cast<unsigned>((nblk + 255) / 256), 256>>>(
                static_cast<const uint8_t *>(w->data), nblk, static_cast<int8_t *>(mem),
                reinterpret_cast<float *>(static_cast<uint8_t *>(mem) + plane));
            return cudaGetLastError();
        };
        const kpr_status st = g_packs.acquire(WeightCopyKey{w->identity, w->data, w->bytes, dev->ordinal, 0u},
                                              plane + nblk * 4, fill, &p->pack, err);
        if (st != KPR_OK) return st;
        p->plane = static_cast<const int8_t *>(p->pack->data);
        p->scales = reinterpret_cast<const float *>(static_cast<const uint8_t *>(p->pack->data) + plane);
        g_log.log(KPR_LOG_DEBUG, "sm60_q8: %llux%llu q8_0 packed (%llu bytes, %ld prepared ops share it)",
                  (unsigned long long)op->rows, (unsigned long long)op->cols,
                  (unsigned long long)p->pack->bytes, p->pack.use_count());
        *out = reinterpret_cast<kpr_prepared *>(p.release());
        return KPR_OK;
    } catch (const std::exception &ex) {
        return fail(err, KPR_ERR_INTERNAL, "prepare: %s", ex.what());
    } catch (...) {
        return fail(err, KPR_ERR_INTERNAL, "prepare: unknown exception");
    }
}

kpr_status p_run(void *, kpr_prepared *prepared, const kpr_run_args *args, kpr_error *err) {
    try {
        auto *p = reinterpret_cast<Prepared *>(prepared);
        if (p == nullptr || args == nullptr || args->struct_size < sizeof(kpr_run_args) || !args->x || !args->y)
            return fail(err, KPR_ERR_INVALID_ARGUMENT, "run: null or short arguments");
        if (args->ncols < 1 || args->ncols > p->op.ncols)
            return fail(err, KPR_ERR_INVALID_ARGUMENT, "run: ncols %u outside 1..%u", args->ncols, p->op.ncols);
        cudaError_t e = use_device(p->ordinal);
        if (e != cudaSuccess) return cuda_fail(err, e, "cudaSetDevice");
        cudaStream_t s = static_cast<cudaStream_t>(args->stream);
        void *scratch = nullptr;
        e = p->scratch->get(s, &scratch);
        if (e != cudaSuccess) return cuda_fail(err, e, "run: scratch");
        const uint32_t nc = args->ncols;
        const ActQ8 v = act_q8_view(scratch, nc, p->op.cols);
        const size_t n = size_t(nc) * p->op.cols;
        e = launch_quantize_act_q8_1(args->x, n, v, p->pdl, s);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess) return cuda_fail(err, e, "run: activation quantizer");
        Q8PlaneArgs a{};
        a.plane = p->plane;
        a.scales = p->scales;
        a.rows = static_cast<uint32_t>(p->op.rows);
        a.cols = static_cast<uint32_t>(p->op.cols);
        a.x = v;
        a.y = args->y;
        const uint64_t smem = q8plane_smem_bytes(p->op.cols, nc);
        e = launch(a, nc, group_width(p->op.cols), p->emulate, p->grid, smem, p->pdl, s, true);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess) return cuda_fail(err, e, "run: gemv launch");
        return KPR_OK;
    } catch (const std::exception &ex) {
        return fail(err, KPR_ERR_INTERNAL, "run: %s", ex.what());
    } catch (...) {
        return fail(err, KPR_ERR_INTERNAL, "run: unknown exception");
    }
}

void p_release(void *, kpr_prepared *prepared) {
    auto *p = reinterpret_cast<Prepared *>(prepared);
    if (!p) return;
    use_device(p->ordinal);
    delete p; // the packed copy goes with the last prepared op holding it
}

// ---- self-tests ------------------------------------------------------------------------------------
const kpr_option_value kEmu[] = {{"emulate_dp4a", "true"}};
const kpr_option_value kEmu1[] = {{"emulate_dp4a", "true"}, {"blocks_per_sm", "1"}};

struct S {
    const char *tag;
    uint64_t rows, cols;
    uint32_t ncols;
};
// widths: warp (>= 2048), half warp (1024..2047), quarter warp (< 1024); the 48 KiB boundary (6144 x 6)
const S kShapes[] = {
    {"4096x4096", 4096, 4096, 1},  {"4096x4096", 4096, 4096, 8},  {"4096x14336", 4096, 14336, 1},
    {"4096x14336", 4096, 14336, 4}, {"14336x4096", 14336, 4096, 2}, {"1001x5120", 1001, 5120, 3},
    {"8192x28672", 8192, 28672, 1}, {"6144 boundary", 4096, 6144, 6}, {"half warp 1536", 333, 1536, 5},
    {"quarter warp 768", 257, 768, 7}, {"quarter warp 512", 4099, 512, 8}, {"2048x2048", 2048, 2048, 2},
};
constexpr uint32_t kN = sizeof(kShapes) / sizeof(kShapes[0]);

uint32_t p_selftest_count(void *, const kpr_device_desc *) { return 2 * kN + 1; }

kpr_status p_selftest_get(void *, const kpr_device_desc *, uint32_t index, kpr_selftest_case *out, kpr_error *err) {
    static char names[2 * kN + 1][96];
    if (index > 2 * kN) return fail(err, KPR_ERR_INVALID_ARGUMENT, "selftest_get: index %u out of range", index);
    const bool emu = index >= kN && index < 2 * kN;
    const S &s = index == 2 * kN ? kShapes[0] : kShapes[index % kN];
    if (index == 2 * kN)
        std::snprintf(names[index], sizeof(names[index]), "q8_0 4096x4096 n1 emulated, 1 block/SM");
    else
        std::snprintf(names[index], sizeof(names[index]), "q8_0 %s n%u%s", s.tag, s.ncols, emu ? " emulated" : "");
    // tolerances: see providers/sm60_q8/README.md (q8_1 activations as generic_cuda)
    CaseSpec c{names[index], KPR_SELFTEST_REFERENCE, KPR_OP_GEMV, KPR_TYPE_Q8_0, s.ncols, s.rows, s.cols, 1, 1, 1,
               2e-2, KPR_ACT_Q8_1, 1e-4, nullptr,
               index == 2 * kN ? kEmu1 : (emu ? kEmu : nullptr), index == 2 * kN ? 2u : (emu ? 1u : 0u)};
    return fill_case(c, out, err);
}

const kpr_provider_v1 kTable = {
    sizeof(kpr_provider_v1), KPR_ABI_VERSION, p_init, nullptr, p_identity, p_option_count, p_option_get,
    p_query, p_prepare, p_run, p_release, p_selftest_count, p_selftest_get, nullptr,
};

} // namespace
} // namespace kpr::sm60_q8

extern "C" KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry(const kpr_handshake_offer *offer,
                                                             kpr_handshake_answer *answer, kpr_error *err) {
    return kpr::cuda::handshake(offer, answer, err, &kpr::sm60_q8::kTable);
}

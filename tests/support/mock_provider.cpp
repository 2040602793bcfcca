// A configurable test-only provider. tests/support/CMakeLists.txt builds it many times, each time with
// compile definitions that pick its behaviour, into its own folder under
// ${PROJECT_BINARY_DIR}/tests/mockproviders/<variant>/ (never into the build tree's providers/ folder,
// which the core searches by default).
//
//   MOCK_NAME="x"          the file's name, libkpr_<x>.so, and the identity name (required)
//   MOCK_IDENTITY_NAME="y" an identity name that differs from the file's
//   MOCK_VERSION="v"       identity version
//   MOCK_SCORE=n           score when accepting (default 100)
//   MOCK_KIND_CUDA         a CUDA provider (answers queries for simulated GPUs; never runs)
//   MOCK_NEEDS_SMEM=b      CUDA: decline when the device allows fewer bytes of shared memory per block
//   MOCK_DECLINE           decline every op with an actionable reason
//   MOCK_ONLY_F32          accept only F32 gemv (decline the rest)
//   MOCK_THROW_QUERY       throw a C++ exception out of query (a provider that breaks the rules)
//   MOCK_THROW_ENTRY       throw a C++ exception out of kpr_provider_entry
//   MOCK_ENTRY_STATUS=s    the handshake's status (default KPR_OK)
//   MOCK_ANSWER_MAJOR=m    the ABI major the handshake answers (default: the core's)
//   MOCK_ANSWER_MINOR=m    the ABI minor the handshake answers (default: the newest the core offers)
//   MOCK_NO_ENTRY          export a misspelt entry point instead of kpr_provider_entry
//   MOCK_INIT_FAIL         init fails with a message
//   MOCK_TABLE_SIZE=n      the table's struct_size (default sizeof(kpr_provider_v1))
//   MOCK_SHORT_TABLE       an older-minor table: it ends before the self-test slots, which are poisoned
//   MOCK_OPT_IN            identity.opt_in = 1
//   MOCK_OPTIONS           declares options fast (bool), blocks_per_sm (int 1..16), mode (string with choices),
//                          ratio (float); the offer's reason echoes every option value it was given
//   MOCK_SELFTESTS         self-test cases: a correct F32 reference case, one computed wrongly (option bug=true),
//                          an internal case that passes and one that fails
//   MOCK_BAD_CASES         with MOCK_SELFTESTS, two more cases that break the ABI's rules: a name holding a
//                          newline and a line of the contained runner's protocol, and an override of an option
//                          the provider does not declare
//   MOCK_MANY_ARCHS        a CPU identity that claims 1000 sass_archs (the list holds 2)
//   MOCK_BAD_OPTION_NAME   declares an option whose name is not [a-z0-9_]+
#include <kpr/ggml_blocks.h>
#include <kpr/provider.h>

#include "mock_stats.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#ifndef MOCK_NAME
#error "MOCK_NAME must be defined"
#endif
#ifndef MOCK_IDENTITY_NAME
#define MOCK_IDENTITY_NAME MOCK_NAME
#endif
#ifndef MOCK_VERSION
#define MOCK_VERSION "0.1.0-mock"
#endif
#ifndef MOCK_SCORE
#define MOCK_SCORE 100
#endif
#ifndef MOCK_ENTRY_STATUS
#define MOCK_ENTRY_STATUS KPR_OK
#endif
#ifndef MOCK_TABLE_SIZE
#define MOCK_TABLE_SIZE sizeof(kpr_provider_v1)
#endif

namespace {

KprMockStats g_stats;
const kpr_host_api *g_host = nullptr;
char g_description[256] = "mock provider (handshake not yet run)";

void set_error(kpr_error *err, const char *fmt, ...) {
    if (!err) return;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

void say(int32_t level, const char *msg) {
    if (g_host && g_host->log && level >= g_host->log_level) g_host->log(g_host->log_user, level, msg);
}

// ---- options ------------------------------------------------------------------------------------

const kpr_option_decl kOptions[] = {
#ifdef MOCK_OPTIONS
    {sizeof(kpr_option_decl), KPR_OPTION_BOOL, "fast", "false", "take the fast path", 0, 0, nullptr},
    {sizeof(kpr_option_decl), KPR_OPTION_INT, "blocks_per_sm", "4", "persistent blocks per SM", 1, 16, nullptr},
    {sizeof(kpr_option_decl), KPR_OPTION_STRING, "mode", "auto", "kernel shape", 0, 0, "auto,wide,narrow"},
    {sizeof(kpr_option_decl), KPR_OPTION_FLOAT, "ratio", "0.5", "a float knob", 0, 0, nullptr},
#endif
#ifdef MOCK_SELFTESTS
    {sizeof(kpr_option_decl), KPR_OPTION_BOOL, "bug", "false", "compute wrongly (for failure detection)", 0, 0, nullptr},
#endif
#ifdef MOCK_BAD_OPTION_NAME
    {sizeof(kpr_option_decl), KPR_OPTION_BOOL, "Fast Path", "false", "a name the core must refuse", 0, 0, nullptr},
#endif
    {0, 0, nullptr, nullptr, nullptr, 0, 0, nullptr}  // sentinel, not counted
};
constexpr uint32_t kOptionCount = sizeof kOptions / sizeof kOptions[0] - 1;

const char *option_value(const kpr_option_set *set, const char *name) {
    if (!set || set->struct_size < sizeof(kpr_option_set) || !set->items) return nullptr;
    for (uint32_t i = 0; i < set->count; ++i)
        if (set->items[i].name && std::strcmp(set->items[i].name, name) == 0) return set->items[i].value;
    return nullptr;
}

// ---- identity -----------------------------------------------------------------------------------

#ifdef MOCK_KIND_CUDA
const uint32_t kSass[] = {60, 90};
const uint32_t kPtx[] = {90};
#endif

kpr_provider_identity make_identity() {
    kpr_provider_identity id{};
    id.struct_size = sizeof id;
#ifdef MOCK_KIND_CUDA
    id.device_kind = KPR_DEVICE_CUDA;
    id.sass_archs = kSass;
    id.n_sass_archs = 2;
    id.ptx_archs = kPtx;
    id.n_ptx_archs = 1;
#else
    id.device_kind = KPR_DEVICE_CPU;
#endif
    id.name = MOCK_IDENTITY_NAME;
    id.version = MOCK_VERSION;
    id.family = "mock";
    id.description = g_description;
#ifdef MOCK_OPT_IN
    id.opt_in = 1;
#endif
#ifdef MOCK_MANY_ARCHS
    static const uint32_t two[] = {60, 90};
    id.sass_archs = two;
    id.n_sass_archs = 1000;
#endif
    return id;
}
const kpr_provider_identity g_identity = make_identity();

// ---- table slots --------------------------------------------------------------------------------

kpr_status p_init(const kpr_host_api *host, void **state, kpr_error *err) {
    g_stats.inits++;
    if (host && host->struct_size >= sizeof(kpr_host_api)) g_host = host;
#ifdef MOCK_INIT_FAIL
    (void)state;
    set_error(err, "%s: init failed: the mock widget is missing (set MOCK_WIDGET=1)", MOCK_NAME);
    return KPR_ERR_DEVICE;
#else
    (void)err;
    *state = &g_stats;
    say(KPR_LOG_DEBUG, "mock init");
    return KPR_OK;
#endif
}

void p_shutdown(void *) {}

const kpr_provider_identity *p_identity(void *) { return &g_identity; }

uint32_t p_option_count(void *) { return kOptionCount; }
const kpr_option_decl *p_option_get(void *, uint32_t i) { return i < kOptionCount ? &kOptions[i] : nullptr; }

kpr_status p_query(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *options,
                   kpr_offer *offer, kpr_error *err) {
    g_stats.queries++;
#ifdef MOCK_THROW_QUERY
    (void)op, (void)dev, (void)options, (void)offer, (void)err;
    throw std::runtime_error("mock_throw: an exception escaped query");
#else
    if (!op || !dev || !offer || offer->struct_size < sizeof(kpr_offer)) {
        set_error(err, "%s: query: null or too-small argument", MOCK_NAME);
        return KPR_ERR_INVALID_ARGUMENT;
    }
    auto decline = [&](uint32_t code, const std::string &why) {
        offer->accepted = 0;
        offer->score = 0;
        offer->decline_code = code;
        std::snprintf(offer->reason, sizeof offer->reason, "%s", why.c_str());
        return KPR_OK;
    };
    (void)decline;
#ifdef MOCK_DECLINE
    return decline(KPR_ERR_UNSUPPORTED, "mock_decline: needs 52 KiB shared memory per block, the device allows 48 KiB");
#endif
#ifdef MOCK_ONLY_F32
    if (op->weight_type != KPR_TYPE_F32 || op->kind != KPR_OP_GEMV)
        return decline(KPR_ERR_UNSUPPORTED, std::string(MOCK_NAME) + ": serves only f32 gemv");
#endif
    char buf[KPR_REASON_CAPACITY];
#ifdef MOCK_KIND_CUDA
#ifdef MOCK_NEEDS_SMEM
    if (dev->smem_per_block_optin < (uint32_t)MOCK_NEEDS_SMEM) {
        std::snprintf(buf, sizeof buf, "%s: needs %u KiB shared memory per block, %s allows %u KiB", MOCK_NAME,
                      (unsigned)(MOCK_NEEDS_SMEM / 1024), dev->name, dev->smem_per_block_optin / 1024);
        return decline(KPR_ERR_UNSUPPORTED, buf);
    }
#endif
    std::snprintf(buf, sizeof buf, "%s on %s cc %d.%d, %u SMs, %u B smem/block%s", MOCK_NAME, dev->name, dev->cc_major,
                  dev->cc_minor, dev->sm_count, dev->smem_per_block, dev->simulated ? ", simulated" : "");
#else
    std::snprintf(buf, sizeof buf, "%s serves %llux%llu n%u", MOCK_NAME, (unsigned long long)op->rows,
                  (unsigned long long)op->cols, op->ncols);
#endif
    std::string reason = buf;
    if (options && options->struct_size >= sizeof(kpr_option_set) && options->count) {
        reason += " options:";
        for (uint32_t i = 0; i < options->count; ++i)
            reason += std::string(" ") + options->items[i].name + "=" + options->items[i].value;
    }
    offer->accepted = 1;
    offer->score = MOCK_SCORE;
    offer->decline_code = 0;
    offer->prepared_bytes = 0;
    offer->workspace_bytes = 64;
    std::snprintf(offer->reason, sizeof offer->reason, "%s", reason.c_str());
    return KPR_OK;
#endif
}

struct Prepared {
    kpr_op_desc op;
    const float *w;
    bool bug;
};

kpr_status p_prepare(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *options,
                     const kpr_weights *weights, kpr_prepared **out, kpr_error *err) {
    g_stats.prepares++;
    if (!op || !dev || !weights || !out) {
        set_error(err, "%s: prepare: null argument", MOCK_NAME);
        return KPR_ERR_INVALID_ARGUMENT;
    }
    if (dev->kind != KPR_DEVICE_CPU || op->weight_type != KPR_TYPE_F32 || op->kind != KPR_OP_GEMV) {
        set_error(err, "%s: prepare: only f32 gemv on the CPU can run", MOCK_NAME);
        return KPR_ERR_UNSUPPORTED;
    }
    if (weights->bytes != op->rows * op->cols * sizeof(float)) {
        set_error(err, "%s: prepare: %llu weight bytes for %llux%llu f32", MOCK_NAME,
                  (unsigned long long)weights->bytes, (unsigned long long)op->rows, (unsigned long long)op->cols);
        return KPR_ERR_INVALID_ARGUMENT;
    }
    auto *p = new (std::nothrow) Prepared{*op, static_cast<const float *>(weights->data), false};
    if (!p) return KPR_ERR_OUT_OF_MEMORY;
    const char *bug = option_value(options, "bug");
    p->bug = bug && std::strcmp(bug, "true") == 0;
    *out = reinterpret_cast<kpr_prepared *>(p);
    return KPR_OK;
}

kpr_status p_run(void *, kpr_prepared *prepared, const kpr_run_args *args, kpr_error *err) {
    g_stats.runs++;
    auto *p = reinterpret_cast<Prepared *>(prepared);
    if (!p || !args || !args->x || !args->y || args->ncols < 1 || args->ncols > p->op.ncols) {
        set_error(err, "%s: run: bad arguments", MOCK_NAME);
        return KPR_ERR_INVALID_ARGUMENT;
    }
    const uint64_t rows = p->op.rows, cols = p->op.cols;
    // The deliberate bug: the last weight of every row is left out of the sum.
    const uint64_t kend = p->bug ? cols - 1 : cols;
    for (uint32_t j = 0; j < args->ncols; ++j)
        for (uint64_t r = 0; r < rows; ++r) {
            double acc = 0;
            for (uint64_t k = 0; k < kend; ++k) acc += double(p->w[r * cols + k]) * double(args->x[j * cols + k]);
            args->y[j * rows + r] = float(acc);
        }
    return KPR_OK;
}

void p_release(void *, kpr_prepared *prepared) {
    if (!prepared) return;
    g_stats.releases++;
    delete reinterpret_cast<Prepared *>(prepared);
}

// ---- self-tests ---------------------------------------------------------------------------------

#ifdef MOCK_SELFTESTS
const kpr_option_value kBug[] = {{"bug", "true"}};
#ifdef MOCK_BAD_CASES
const kpr_option_value kTypo[] = {{"bgu", "true"}}; // not declared: the case would silently run without the bug
#endif

kpr_selftest_case make_case(uint32_t kind, const char *name, uint64_t rows, uint64_t cols, uint32_t ncols,
                            const kpr_option_value *opts, uint32_t nopts) {
    kpr_selftest_case c{};
    c.struct_size = sizeof c;
    c.kind = kind;
    std::snprintf(c.name, sizeof c.name, "%s", name);
    c.op.struct_size = sizeof c.op;
    c.op.kind = KPR_OP_GEMV;
    c.op.weight_type = KPR_TYPE_F32;
    c.op.ncols = ncols;
    c.op.rows = rows;
    c.op.cols = cols;
    c.op.n_experts = c.op.n_used = c.op.x_slots = 1;
    c.tolerance = 1e-5;
    c.act_rounding = KPR_ACT_FLOAT;
    c.quantized_tolerance = 1e-5;
    c.options = opts;
    c.n_options = nopts;
    return c;
}

const kpr_selftest_case kCases[] = {
    make_case(KPR_SELFTEST_REFERENCE, "f32 ok 64x256 n2", 64, 256, 2, nullptr, 0),
    make_case(KPR_SELFTEST_REFERENCE, "f32 wrong 48x128 n1", 48, 128, 1, kBug, 1),
    make_case(KPR_SELFTEST_INTERNAL, "internal ok", 1, 32, 1, nullptr, 0),
    make_case(KPR_SELFTEST_INTERNAL, "internal broken", 1, 32, 1, nullptr, 0),
#ifdef MOCK_BAD_CASES
    make_case(KPR_SELFTEST_REFERENCE, "f32 8x32 n1\nT 0\nE", 8, 32, 1, nullptr, 0),
    make_case(KPR_SELFTEST_REFERENCE, "f32 typo 8x32 n1", 8, 32, 1, kTypo, 1),
#endif
};
constexpr uint32_t kCaseCount = sizeof kCases / sizeof kCases[0];

uint32_t p_selftest_count(void *, const kpr_device_desc *dev) {
    return dev && dev->kind == KPR_DEVICE_CPU ? kCaseCount : 0;
}

kpr_status p_selftest_get(void *, const kpr_device_desc *, uint32_t index, kpr_selftest_case *out, kpr_error *err) {
    g_stats.selftest_gets++;
    if (!out || index >= kCaseCount) {
        set_error(err, "%s: selftest_get: no case %u", MOCK_NAME, index);
        return KPR_ERR_INVALID_ARGUMENT;
    }
    *out = kCases[index];
    return KPR_OK;
}

kpr_status p_selftest_run(void *, const kpr_device_desc *, uint32_t index, double *measured, kpr_error *err) {
    if (index == 2) {
        *measured = 0;
        return KPR_OK;
    }
    *measured = 1;
    set_error(err, "%s: internal check failed: table checksum 0x1234 != 0x5678", MOCK_NAME);
    return KPR_ERR_INTERNAL;
}
#elif defined(MOCK_SHORT_TABLE)
// Slots past the short table's struct_size: the core must not call them.
uint32_t p_selftest_count(void *, const kpr_device_desc *) {
    g_stats.short_table_violations++;
    return 1;
}
kpr_status p_selftest_get(void *, const kpr_device_desc *, uint32_t, kpr_selftest_case *, kpr_error *err) {
    g_stats.short_table_violations++;
    set_error(err, "slot beyond the table's struct_size was called");
    return KPR_ERR_INTERNAL;
}
kpr_status p_selftest_run(void *, const kpr_device_desc *, uint32_t, double *, kpr_error *err) {
    g_stats.short_table_violations++;
    set_error(err, "slot beyond the table's struct_size was called");
    return KPR_ERR_INTERNAL;
}
#endif

kpr_provider_v1 make_table() {
    kpr_provider_v1 t{};
#ifdef MOCK_SHORT_TABLE
    t.struct_size = offsetof(kpr_provider_v1, selftest_count);
#else
    t.struct_size = MOCK_TABLE_SIZE;
#endif
    t.abi_version = KPR_ABI_VERSION;
    t.init = p_init;
    t.shutdown = p_shutdown;
    t.identity = p_identity;
    t.option_count = p_option_count;
    t.option_get = p_option_get;
    t.query = p_query;
    t.prepare = p_prepare;
    t.run = p_run;
    t.release = p_release;
#if defined(MOCK_SELFTESTS) || defined(MOCK_SHORT_TABLE)
    t.selftest_count = p_selftest_count;
    t.selftest_get = p_selftest_get;
    t.selftest_run = p_selftest_run;
#endif
    return t;
}
kpr_provider_v1 g_table = make_table();

kpr_status entry_impl(const kpr_handshake_offer *offer, kpr_handshake_answer *answer, kpr_error *err) {
    g_stats.entries++;
#ifdef MOCK_THROW_ENTRY
    (void)offer, (void)answer, (void)err;
    throw std::runtime_error("mock_throw_entry: an exception escaped the entry point");
#else
    if (!offer || !answer) {
        set_error(err, "%s: null handshake", MOCK_NAME);
        return KPR_ERR_INVALID_ARGUMENT;
    }
    g_stats.offer_min = offer->abi_min;
    g_stats.offer_max = offer->abi_max;
    g_stats.host_ok = offer->host && offer->host->log ? 1 : 0;
    std::snprintf(g_description, sizeof g_description, "mock provider; the core offered ABI %u.%u..%u.%u",
                  KPR_VERSION_MAJOR(offer->abi_min), KPR_VERSION_MINOR(offer->abi_min),
                  KPR_VERSION_MAJOR(offer->abi_max), KPR_VERSION_MINOR(offer->abi_max));
#ifdef MOCK_ANSWER_MAJOR
    const uint32_t major = MOCK_ANSWER_MAJOR;
#else
    const uint32_t major = KPR_ABI_VERSION_MAJOR;
#endif
#ifdef MOCK_ANSWER_MINOR
    const uint32_t minor = MOCK_ANSWER_MINOR;
#else
    const uint32_t minor = KPR_VERSION_MINOR(offer->abi_max);
#endif
    answer->abi_version = KPR_MAKE_VERSION(major, minor);
    g_table.abi_version = answer->abi_version;
    if (MOCK_ENTRY_STATUS != KPR_OK) {
        set_error(err, "%s speaks ABI %u.%u only", MOCK_NAME, major, minor);
        answer->table = nullptr;
        return (kpr_status)MOCK_ENTRY_STATUS;
    }
    answer->table = &g_table;
    return KPR_OK;
#endif
}

} // namespace

extern "C" {

KPR_PROVIDER_EXPORT KprMockStats *kpr_mock_stats(void) { return &g_stats; }

#ifdef MOCK_NO_ENTRY
KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry_v0(const kpr_handshake_offer *offer, kpr_handshake_answer *answer,
                                                     kpr_error *err) {
    return entry_impl(offer, answer, err);
}
#else
KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry(const kpr_handshake_offer *offer, kpr_handshake_answer *answer,
                                                  kpr_error *err) {
    return entry_impl(offer, answer, err);
}
#endif

} // extern "C"

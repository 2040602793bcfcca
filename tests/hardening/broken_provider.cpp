// A provider library that breaks one rule, picked at compile time. tests/hardening/CMakeLists.txt builds it
// once per behaviour into its own folder (${build}/tests/broken/<variant>/libkpr_<name>.so), and the tests
// check that the runtime survives each and reports it as failed with the reason.
//
//   BROKEN_NAME="x"        the file's name and (unless BROKEN_NULL_NAME) the identity's
//   BROKEN_NO_ENTRY        exports no kpr_provider_entry
//   BROKEN_MAJOR=m         answers the handshake with ABI major m (and KPR_OK)
//   BROKEN_THROW_ENTRY     throws out of kpr_provider_entry
//   BROKEN_INIT_FAIL       init returns an error
//   BROKEN_THROW_INIT      init throws
//   BROKEN_NULL_IDENTITY   identity() returns null
//   BROKEN_NULL_NAME       identity.name is null
//   BROKEN_THROW_PREPARE   prepare throws a C++ exception
//   BROKEN_THROW_RUN       run throws a C++ exception
//   BROKEN_IMPOSSIBLE      accepts with prepared_bytes = UINT64_MAX
//   BROKEN_ACCEPTED_7      accepts with accepted = 7 (only 0 and 1 exist)
//   BROKEN_NO_REASON       declines with reason not NUL-terminated (a full buffer of 'x')
//   BROKEN_SELFTEST_SEGV   internal self-test cases "ok before", "segv here", "ok after": the second
//                          dereferences a null pointer
//   BROKEN_SELFTEST_HANG   the same, the second sleeps forever
//   BROKEN_SELFTEST_ABORT  the same, the second calls abort()
//   BROKEN_SELFTEST_OK     the same three cases, all passing
//   BROKEN_SELFTEST_LATIN1 the same three cases with a byte that is not UTF-8 in each name (0xff); the second
//                          fails with a message holding one too
//   BROKEN_SELFTEST_HUGE   one reference self-test case, f32 gemv 1000000000 x 1000000000 (4 * 10^18 bytes of
//                          weights): valid, but no machine holds its data
//   BROKEN_CASE_PREFIX=s   prefixes the self-test case names (calibrate filters cases by weight type)
//   BROKEN_SCORE=n         the score of an accepted offer (default 1000)
// Without a misbehaviour it is a correct F32-only provider (query, prepare, run, release).
#include <kpr/ggml_blocks.h>
#include <kpr/provider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

#ifndef BROKEN_NAME
#error "BROKEN_NAME must be defined"
#endif
#ifndef BROKEN_SCORE
#define BROKEN_SCORE 1000
#endif

namespace {

struct Prepared {
    const float *w;
    uint64_t rows, cols;
};

kpr_provider_identity make_identity() {
    kpr_provider_identity id{};
    id.struct_size = sizeof id;
    id.device_kind = KPR_DEVICE_CPU;
#ifdef BROKEN_NULL_NAME
    id.name = nullptr;
#else
    id.name = BROKEN_NAME;
#endif
    id.version = "0.0.1-broken";
    id.family = "broken";
    id.description = "a provider that breaks the rules, for tests/hardening";
    return id;
}
const kpr_provider_identity g_identity = make_identity();

kpr_status p_init(const kpr_host_api *, void **state, kpr_error *err) {
    *state = nullptr;
#ifdef BROKEN_INIT_FAIL
    std::snprintf(err->message, sizeof err->message, "%s: init failed: no widget on this machine", BROKEN_NAME);
    return KPR_ERR_DEVICE;
#endif
#ifdef BROKEN_THROW_INIT
    throw std::runtime_error("init threw");
#endif
    (void)err;
    return KPR_OK;
}

const kpr_provider_identity *p_identity(void *) {
#ifdef BROKEN_NULL_IDENTITY
    return nullptr;
#else
    return &g_identity;
#endif
}

kpr_status p_query(void *, const kpr_op_desc *op, const kpr_device_desc *, const kpr_option_set *, kpr_offer *offer,
                   kpr_error *) {
#ifdef BROKEN_NO_REASON
    offer->accepted = 0;
    offer->decline_code = KPR_ERR_UNSUPPORTED;
    std::memset(offer->reason, 'x', sizeof offer->reason);
    return KPR_OK;
#endif
    if (op->kind != KPR_OP_GEMV || op->weight_type != KPR_TYPE_F32) {
        offer->accepted = 0;
        offer->decline_code = KPR_ERR_UNSUPPORTED;
        std::snprintf(offer->reason, sizeof offer->reason, "%s: serves only f32 gemv", BROKEN_NAME);
        return KPR_OK;
    }
    offer->accepted = 1;
    offer->score = BROKEN_SCORE;  // beats generic_cpu: a broken answer must not become a plan
#ifdef BROKEN_ACCEPTED_7
    offer->accepted = 7;
#endif
#ifdef BROKEN_IMPOSSIBLE
    offer->prepared_bytes = UINT64_MAX;
#endif
    std::snprintf(offer->reason, sizeof offer->reason, "%s: f32 gemv", BROKEN_NAME);
    return KPR_OK;
}

kpr_status p_prepare(void *, const kpr_op_desc *op, const kpr_device_desc *, const kpr_option_set *,
                     const kpr_weights *w, kpr_prepared **out, kpr_error *) {
#ifdef BROKEN_THROW_PREPARE
    throw std::runtime_error("prepare threw");
#endif
    *out = reinterpret_cast<kpr_prepared *>(new Prepared{static_cast<const float *>(w->data), op->rows, op->cols});
    return KPR_OK;
}

kpr_status p_run(void *, kpr_prepared *pp, const kpr_run_args *a, kpr_error *) {
#ifdef BROKEN_THROW_RUN
    throw std::logic_error("run threw");
#endif
    auto *p = reinterpret_cast<Prepared *>(pp);
    for (uint32_t j = 0; j < a->ncols; ++j)
        for (uint64_t r = 0; r < p->rows; ++r) {
            double acc = 0;
            for (uint64_t k = 0; k < p->cols; ++k) acc += double(p->w[r * p->cols + k]) * a->x[j * p->cols + k];
            a->y[j * p->rows + r] = float(acc);
        }
    return KPR_OK;
}

void p_release(void *, kpr_prepared *pp) { delete reinterpret_cast<Prepared *>(pp); }

#if defined(BROKEN_SELFTEST_SEGV) || defined(BROKEN_SELFTEST_HANG) || defined(BROKEN_SELFTEST_ABORT) || \
    defined(BROKEN_SELFTEST_OK) || defined(BROKEN_SELFTEST_LATIN1)
#define BROKEN_SELFTESTS 1
#if defined(BROKEN_SELFTEST_LATIN1) && !defined(BROKEN_CASE_PREFIX)
#define BROKEN_CASE_PREFIX "caf\xe9 \xff "
#endif
#ifndef BROKEN_CASE_PREFIX
#define BROKEN_CASE_PREFIX ""  // e.g. "f32_": a case name kpr calibrate's per-type filter selects
#endif
const char *const kCases[] = {BROKEN_CASE_PREFIX "hardening ok before", BROKEN_CASE_PREFIX "hardening bad here",
                              BROKEN_CASE_PREFIX "hardening ok after"};
uint32_t p_selftest_count(void *, const kpr_device_desc *) { return 3; }
kpr_status p_selftest_get(void *, const kpr_device_desc *, uint32_t i, kpr_selftest_case *c, kpr_error *err) {
    if (i >= 3) {
        std::snprintf(err->message, sizeof err->message, "no case %u", i);
        return KPR_ERR_INVALID_ARGUMENT;
    }
    c->kind = KPR_SELFTEST_INTERNAL;
    std::snprintf(c->name, sizeof c->name, "%s", kCases[i]);
    return KPR_OK;
}
// Not instrumented for UBSan: under -fsanitize=undefined the null store below would be reported (and the
// process exit 1) before it faults; the tests want a real SIGSEGV.
__attribute__((no_sanitize("undefined")))
kpr_status p_selftest_run(void *, const kpr_device_desc *, uint32_t i, double *measured, kpr_error *err) {
    *measured = 0;
    (void)err;
    if (i == 1) {
#if defined(BROKEN_SELFTEST_OK)
        return KPR_OK;
#elif defined(BROKEN_SELFTEST_LATIN1)
        std::snprintf(err->message, sizeof err->message, "r\xe9sultat \xff faux");
        return KPR_ERR_INTERNAL;
#elif defined(BROKEN_SELFTEST_SEGV)
        volatile int *volatile nowhere = nullptr;
        *nowhere = 42;
#elif defined(BROKEN_SELFTEST_HANG)
        for (;;) pause();
#else
        std::abort();
#endif
    }
    return KPR_OK;
}
#endif

#ifdef BROKEN_SELFTEST_HUGE
uint32_t p_selftest_count(void *, const kpr_device_desc *) { return 1; }
kpr_status p_selftest_get(void *, const kpr_device_desc *, uint32_t, kpr_selftest_case *c, kpr_error *) {
    c->kind = KPR_SELFTEST_REFERENCE;
    std::snprintf(c->name, sizeof c->name, "%s", "huge f32");
    c->op = kpr_op_desc{sizeof(kpr_op_desc), KPR_OP_GEMV, KPR_TYPE_F32, 1, 1000000000, 1000000000, 1, 1, 1, 0};
    c->tolerance = 1e-5;
    return KPR_OK;
}
#endif

kpr_provider_v1 make_table() {
    kpr_provider_v1 t{};
    t.struct_size = sizeof t;
    t.abi_version = KPR_ABI_VERSION;
    t.init = p_init;
    t.identity = p_identity;
    t.query = p_query;
    t.prepare = p_prepare;
    t.run = p_run;
    t.release = p_release;
#ifdef BROKEN_SELFTESTS
    t.selftest_count = p_selftest_count;
    t.selftest_get = p_selftest_get;
    t.selftest_run = p_selftest_run;
#endif
#ifdef BROKEN_SELFTEST_HUGE
    t.selftest_count = p_selftest_count;
    t.selftest_get = p_selftest_get;
#endif
    return t;
}
const kpr_provider_v1 g_table = make_table();

} // namespace

#ifdef BROKEN_NO_ENTRY
extern "C" KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry_v2(const kpr_handshake_offer *, kpr_handshake_answer *, kpr_error *) {
    return KPR_ERR_INTERNAL;
}
#else
extern "C" KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry(const kpr_handshake_offer *offer, kpr_handshake_answer *answer,
                                                             kpr_error *err) {
    (void)offer;
    (void)err;
#ifdef BROKEN_THROW_ENTRY
    throw std::runtime_error("entry threw");
#endif
#ifdef BROKEN_MAJOR
    answer->abi_version = KPR_MAKE_VERSION(BROKEN_MAJOR, 0);
#else
    answer->abi_version = KPR_ABI_VERSION;
#endif
    answer->table = &g_table;
    return KPR_OK;
}
#endif

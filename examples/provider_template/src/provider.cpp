// example_q8: a complete, small kpr provider -- a Q8_0 GEMV on the CPU with float activations.
//
// It shows every part of the contract (kpr/provider.h) a real provider needs, with as little kernel as
// possible: the handshake, identity, one option, query (accept with a score and memory, or decline with
// a reason a person can act on), prepare / run / release, and self-test cases the core checks against
// its double-precision reference (`kpr selftest --provider example_q8`).
//
// The kernel is plain scalar C++: correct and portable, slower than generic_cpu. Its score (50) says so,
// so the core only picks it when the configuration asks (priority, force) -- which is what a new
// provider should do until it is measured faster (see docs/providers.md, "Scores").
#include <kpr/ggml_blocks.h>
#include <kpr/provider.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>

#ifndef EXAMPLE_NAME
#define EXAMPLE_NAME "example_q8"
#endif
#ifndef EXAMPLE_VERSION
#define EXAMPLE_VERSION "0.1.0"
#endif

namespace {

// ---- helpers --------------------------------------------------------------------------------------

const kpr_host_api *g_host = nullptr;  // set by init; the core's logger

void logf(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void logf(int level, const char *fmt, ...) {
    if (!g_host || !g_host->log || level < g_host->log_level) return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_host->log(g_host->log_user, level, buf);
}

void set_error(kpr_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void set_error(kpr_error *err, const char *fmt, ...) {
    if (!err) return;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

// IEEE binary16 -> binary32 (the Q8_0 scale). Exact for every input.
float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);  // inf / NaN
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;  // +-0
    } else {          // subnormal: normalise
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// GGML's name of a weight type, for messages.
const char *type_name(uint32_t t) {
    static const char *const names[] = {"f32",     "f16",    "q4_0",    "q4_1",  "type 4", "type 5",  "q5_0",
                                        "q5_1",    "q8_0",   "q8_1",    "q2_K",  "q3_K",   "q4_K",    "q5_K",
                                        "q6_K",    "q8_K",   "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl",
                                        "iq3_s",   "iq2_s",  "iq4_xs",  "i8",    "i16",    "i32",     "i64",
                                        "f64",     "iq1_m",  "bf16"};
    return t < sizeof names / sizeof names[0] ? names[t] : "an unknown type";
}

// ---- options ----------------------------------------------------------------------------------------

// Declared once; the core checks configured values against the declaration (type, choices) before a
// provider sees them, and passes every option (configured or default) to query and prepare.
const kpr_option_decl kOptions[] = {
    {sizeof(kpr_option_decl), KPR_OPTION_STRING, "accumulator", "float",
     "sum each row in float (fast) or double (exact to the last bit of the output)", 0, 0, "float,double"},
};

struct Options {
    bool double_acc = false;
};

bool parse_options(const kpr_option_set *set, Options &o, char *why, size_t n) {
    if (!set || set->struct_size < sizeof(kpr_option_set) || !set->items) return true;
    for (uint32_t i = 0; i < set->count; ++i) {
        const kpr_option_value &v = set->items[i];
        if (!v.name || !v.value) continue;
        if (std::strcmp(v.name, "accumulator") == 0) {
            if (std::strcmp(v.value, "double") == 0) o.double_acc = true;
            else if (std::strcmp(v.value, "float") == 0) o.double_acc = false;
            else {
                std::snprintf(why, n, "option accumulator=%s is not one of float,double", v.value);
                return false;
            }
        }
    }
    return true;
}

// ---- identity ---------------------------------------------------------------------------------------

const kpr_provider_identity kIdentity = {
    sizeof(kpr_provider_identity),
    KPR_DEVICE_CPU,
    EXAMPLE_NAME,
    EXAMPLE_VERSION,
    "example",  // family
    "template provider: scalar Q8_0 GEMV on the CPU, float activations (examples/provider_template)",
    nullptr, 0, nullptr, 0,  // no CUDA architectures
    0,                       // opt_in: 0 = on unless the config disables it
};

// ---- the decision, shared by query and prepare -------------------------------------------------------

constexpr int32_t kScore = 50;  // below the portable baseline (100): correct but not faster

// KPR_OK to accept; otherwise a decline code (UNSUPPORTED or WRONG_ARCH) with `why` filled.
kpr_status decide(const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *options, Options &opts,
                  char *why, size_t n) {
    if (dev && dev->struct_size >= offsetof(kpr_device_desc, ordinal) && dev->kind != KPR_DEVICE_CPU) {
        std::snprintf(why, n, EXAMPLE_NAME " runs on the CPU only");
        return KPR_ERR_UNSUPPORTED;
    }
    if (!parse_options(options, opts, why, n)) return KPR_ERR_UNSUPPORTED;
    if (op->kind != KPR_OP_GEMV) {
        std::snprintf(why, n, "only gemv is implemented (gemv_grouped is not): use generic_cpu for expert tensors");
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->weight_type != KPR_TYPE_Q8_0) {
        std::snprintf(why, n, "only q8_0 weights are implemented, not %s; `kpr requant` converts a model's dense "
                              "tensors to q8_0", type_name(op->weight_type));
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->ncols < 1 || op->ncols > KPR_MAX_NCOLS) {
        std::snprintf(why, n, "ncols %u is outside 1..%u", op->ncols, KPR_MAX_NCOLS);
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->rows == 0 || op->cols == 0 || op->cols % KPR_QK != 0) {
        std::snprintf(why, n, "shape %" PRIu64 "x%" PRIu64 ": rows must be > 0 and cols a multiple of %d", op->rows,
                      op->cols, KPR_QK);
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->rows > (1ull << 40) || op->cols > (1ull << 40)) {
        std::snprintf(why, n, "shape %" PRIu64 "x%" PRIu64 " is too large", op->rows, op->cols);
        return KPR_ERR_UNSUPPORTED;
    }
    return KPR_OK;
}

bool op_ok(const kpr_op_desc *op) { return op && op->struct_size >= sizeof(kpr_op_desc); }

// ---- the kernel ---------------------------------------------------------------------------------------

struct Prepared {
    kpr_op_desc op;
    const kpr_block_q8_0 *w;  // the caller's weights, read in place (they outlive the prepared op)
    bool double_acc;
};

// y[j][r] = sum_k W[r][k] * x[j][k] for rows [0, rows), columns j < ncols.
template <typename Acc>
void gemv_q8_0(const Prepared &p, const float *x, float *y, uint32_t ncols) {
    const uint64_t rows = p.op.rows, cols = p.op.cols, nb = cols / KPR_QK;
    for (uint64_t r = 0; r < rows; ++r) {
        const kpr_block_q8_0 *row = p.w + r * nb;
        for (uint32_t j = 0; j < ncols; ++j) {
            const float *xj = x + (uint64_t)j * cols;
            Acc acc = 0;
            for (uint64_t b = 0; b < nb; ++b) {
                const float d = f16_to_f32(row[b].d);
                Acc s = 0;
                for (int i = 0; i < KPR_QK; ++i) s += (Acc)(d * (float)row[b].qs[i]) * (Acc)xj[b * KPR_QK + i];
                acc += s;
            }
            y[(uint64_t)j * rows + r] = (float)acc;
        }
    }
}

// ---- the table entries ---------------------------------------------------------------------------------
// Every entry is noexcept and catches everything: no C++ exception may cross the C boundary.

kpr_status p_init(const kpr_host_api *host, void **state, kpr_error *) noexcept {
    if (host && host->struct_size >= sizeof(kpr_host_api)) g_host = host;
    if (state) *state = nullptr;  // this provider keeps no state of its own
    return KPR_OK;
}

const kpr_provider_identity *p_identity(void *) noexcept { return &kIdentity; }
uint32_t p_option_count(void *) noexcept { return (uint32_t)(sizeof kOptions / sizeof kOptions[0]); }
const kpr_option_decl *p_option_get(void *, uint32_t i) noexcept {
    return i < p_option_count(nullptr) ? &kOptions[i] : nullptr;
}

kpr_status p_query(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *options,
                   kpr_offer *offer, kpr_error *err) noexcept {
    try {
        if (!op_ok(op) || !offer || offer->struct_size < offsetof(kpr_offer, reason)) {
            set_error(err, EXAMPLE_NAME " query: null or too-small op/offer");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        Options opts;
        char why[KPR_REASON_CAPACITY] = {};
        const kpr_status st = decide(op, dev, options, opts, why, sizeof why);
        kpr_offer o{};
        o.struct_size = offer->struct_size < sizeof(kpr_offer) ? offer->struct_size : (uint32_t)sizeof(kpr_offer);
        if (st != KPR_OK) {
            o.accepted = 0;
            o.decline_code = st;
            std::snprintf(o.reason, sizeof o.reason, "%s", why);
        } else {
            o.accepted = 1;
            o.score = kScore;
            o.prepared_bytes = 0;   // weights are read in place: nothing repacked
            o.workspace_bytes = 0;  // no scratch
            std::snprintf(o.reason, sizeof o.reason, "scalar q8_0 gemv, %s accumulator, one thread, weights read in place",
                          opts.double_acc ? "double" : "float");
        }
        std::memcpy(offer, &o, o.struct_size);  // only as much as the caller's struct holds
        return KPR_OK;
    } catch (...) {
        set_error(err, EXAMPLE_NAME " query: internal error");
        return KPR_ERR_INTERNAL;
    }
}

kpr_status p_prepare(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *options,
                     const kpr_weights *weights, kpr_prepared **out, kpr_error *err) noexcept {
    try {
        if (!op_ok(op) || !out || !weights || weights->struct_size < sizeof(kpr_weights)) {
            set_error(err, EXAMPLE_NAME " prepare: null or too-small op/weights/out");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        Options opts;
        char why[KPR_REASON_CAPACITY] = {};
        const kpr_status st = decide(op, dev, options, opts, why, sizeof why);
        if (st != KPR_OK) {
            set_error(err, EXAMPLE_NAME " prepare: %s", why);
            return st;
        }
        const uint64_t need = op->rows * (op->cols / KPR_QK) * sizeof(kpr_block_q8_0);
        if (!weights->data || weights->bytes != need) {
            set_error(err, EXAMPLE_NAME " prepare: weights hold %" PRIu64 " bytes at %p, q8_0 %" PRIu64 "x%" PRIu64
                           " needs %" PRIu64, weights->bytes, weights->data, op->rows, op->cols, need);
            return KPR_ERR_INVALID_ARGUMENT;
        }
        Prepared *p = new (std::nothrow) Prepared{*op, static_cast<const kpr_block_q8_0 *>(weights->data), opts.double_acc};
        if (!p) {
            set_error(err, EXAMPLE_NAME " prepare: out of memory");
            return KPR_ERR_OUT_OF_MEMORY;
        }
        logf(KPR_LOG_DEBUG, "prepared q8_0 %" PRIu64 "x%" PRIu64 " ncols %u", op->rows, op->cols, op->ncols);
        *out = reinterpret_cast<kpr_prepared *>(p);
        return KPR_OK;
    } catch (...) {
        set_error(err, EXAMPLE_NAME " prepare: internal error");
        return KPR_ERR_INTERNAL;
    }
}

// Stateless: safe to call concurrently on one prepared op from several threads.
kpr_status p_run(void *, kpr_prepared *prepared, const kpr_run_args *args, kpr_error *err) noexcept {
    try {
        if (!prepared || !args || args->struct_size < offsetof(kpr_run_args, ids) || !args->x || !args->y) {
            set_error(err, EXAMPLE_NAME " run: null prepared op, args, x or y");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        const Prepared &p = *reinterpret_cast<const Prepared *>(prepared);
        if (args->ncols < 1 || args->ncols > p.op.ncols) {
            set_error(err, EXAMPLE_NAME " run: ncols %u is outside 1..%u (the prepared op's)", args->ncols, p.op.ncols);
            return KPR_ERR_INVALID_ARGUMENT;
        }
        if (p.double_acc)
            gemv_q8_0<double>(p, args->x, args->y, args->ncols);
        else
            gemv_q8_0<float>(p, args->x, args->y, args->ncols);
        return KPR_OK;
    } catch (...) {
        set_error(err, EXAMPLE_NAME " run: internal error");
        return KPR_ERR_INTERNAL;
    }
}

void p_release(void *, kpr_prepared *prepared) noexcept { delete reinterpret_cast<Prepared *>(prepared); }

// ---- self-test cases -------------------------------------------------------------------------------------
// The core draws random q8_0 weights and float x, runs prepare/run, and checks
// max|y - ref| / max|ref| <= tolerance against its double-precision reference.

const kpr_option_value kDoubleAcc[] = {{"accumulator", "double"}};

struct Case {
    const char *name;
    uint64_t rows, cols;
    uint32_t ncols;
    double tolerance;
    const kpr_option_value *options;
    uint32_t n_options;
};

// Float accumulation of K products: relative error grows ~ sqrt(K) * 2^-24; 1e-5 leaves room at K=4096.
// Double accumulation: each product is exact in double, only the final rounding to float remains (6e-8).
const Case kCases[] = {
    {"q8_0 256x512 n1", 256, 512, 1, 1e-5, nullptr, 0},
    {"q8_0 64x4096 n3", 64, 4096, 3, 1e-5, nullptr, 0},
    {"q8_0 37x96 n8", 37, 96, 8, 1e-5, nullptr, 0},
    {"q8_0 128x1024 n2 accumulator=double", 128, 1024, 2, 1e-7, kDoubleAcc, 1},
};
constexpr uint32_t kCaseCount = sizeof kCases / sizeof kCases[0];

uint32_t p_selftest_count(void *, const kpr_device_desc *dev) noexcept {
    return dev && dev->kind == KPR_DEVICE_CPU ? kCaseCount : 0;
}

kpr_status p_selftest_get(void *, const kpr_device_desc *, uint32_t index, kpr_selftest_case *out,
                          kpr_error *err) noexcept {
    if (!out || index >= kCaseCount) {
        set_error(err, EXAMPLE_NAME " selftest_get: index %u out of range (%u cases)", index, kCaseCount);
        return KPR_ERR_INVALID_ARGUMENT;
    }
    const Case &k = kCases[index];
    kpr_selftest_case c{};
    c.struct_size = sizeof c;
    c.kind = KPR_SELFTEST_REFERENCE;
    std::snprintf(c.name, sizeof c.name, "%s", k.name);
    c.op.struct_size = sizeof c.op;
    c.op.kind = KPR_OP_GEMV;
    c.op.weight_type = KPR_TYPE_Q8_0;
    c.op.ncols = k.ncols;
    c.op.rows = k.rows;
    c.op.cols = k.cols;
    c.op.n_experts = c.op.n_used = c.op.x_slots = 1;
    c.tolerance = k.tolerance;
    c.act_rounding = KPR_ACT_FLOAT;  // x is used as given
    c.quantized_tolerance = k.tolerance;
    c.options = k.options;
    c.n_options = k.n_options;
    std::memcpy(out, &c, out->struct_size && out->struct_size < sizeof c ? out->struct_size : sizeof c);
    return KPR_OK;
}

const kpr_provider_v1 kTable = {
    sizeof(kpr_provider_v1),
    KPR_ABI_VERSION,
    p_init,
    nullptr,  // shutdown: nothing to free
    p_identity,
    p_option_count,
    p_option_get,
    p_query,
    p_prepare,
    p_run,
    p_release,
    p_selftest_count,
    p_selftest_get,
    nullptr,  // selftest_run: no INTERNAL cases
};

} // namespace

// The one exported symbol: the version handshake. The core offers the range [abi_min, abi_max] it speaks;
// pick the newest version both sides speak -- ours (KPR_ABI_VERSION, from the headers we were built
// against) or the core's newest, if that is older but of the same major. A different major: refuse.
extern "C" KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry(const kpr_handshake_offer *offer,
                                                             kpr_handshake_answer *answer, kpr_error *err) {
    if (!offer || !answer || offer->struct_size < offsetof(kpr_handshake_offer, host) ||
        answer->struct_size < sizeof(kpr_handshake_answer)) {
        set_error(err, EXAMPLE_NAME " handshake: null or too-small offer/answer");
        return KPR_ERR_INVALID_ARGUMENT;
    }
    const uint32_t ours = KPR_ABI_VERSION, lo = offer->abi_min, hi = offer->abi_max;
    const uint32_t pick = hi < ours ? hi : ours;
    if (lo <= hi && pick >= lo && KPR_VERSION_MAJOR(pick) == KPR_ABI_VERSION_MAJOR) {
        answer->abi_version = pick;
        answer->table = &kTable;  // static storage: valid as long as the library is loaded
        return KPR_OK;
    }
    answer->abi_version = ours;
    answer->table = nullptr;
    set_error(err, EXAMPLE_NAME " speaks ABI %u.%u; the core offers %u.%u..%u.%u", KPR_ABI_VERSION_MAJOR,
              KPR_ABI_VERSION_MINOR, KPR_VERSION_MAJOR(lo), KPR_VERSION_MINOR(lo), KPR_VERSION_MAJOR(hi),
              KPR_VERSION_MINOR(hi));
    return KPR_ERR_VERSION;
}

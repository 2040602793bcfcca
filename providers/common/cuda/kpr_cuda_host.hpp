// kpr_cuda_host.hpp -- host-side plumbing shared by the CUDA providers: the architectures compiled in
// and the "no kernel image" decline, option lookup, error reporting, the weight type table, per-stream
// activation scratch, and the handshake. Header-only; every function is inline.
#pragma once

#include <kpr/ggml_blocks.h>
#include <kpr/provider.h>

#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#ifndef KPR_CUDA_SASS_MASK
#error "KPR_CUDA_SASS_MASK must be defined by the build (cmake/KprCuda.cmake)"
#endif

namespace kpr::cuda {

// ---- architectures ------------------------------------------------------------------------------

// The order of cmake/KprCuda.cmake's _kpr_known: bit i of KPR_CUDA_SASS_MASK = kKnownArchs[i] compiled.
inline constexpr uint32_t kKnownArchs[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121};

inline const uint32_t *sass_archs(uint32_t *n) {
    static uint32_t a[sizeof(kKnownArchs) / sizeof(kKnownArchs[0])];
    static const uint32_t count = [] {
        uint32_t c = 0;
        const unsigned long long mask = static_cast<unsigned long long>(KPR_CUDA_SASS_MASK);
        for (uint32_t i = 0; i < sizeof(kKnownArchs) / sizeof(kKnownArchs[0]); ++i)
            if (mask & (1ull << i)) a[c++] = kKnownArchs[i];
        return c;
    }();
    *n = count;
    return a;
}

inline const uint32_t *ptx_archs(uint32_t *n) {
    static const uint32_t a[] = {KPR_CUDA_PTX_LIST + 0u};
    *n = (a[0] == 0u) ? 0u : 1u;
    return a;
}

// True when the binary holds machine code for the device (same major, minor <= device's) or PTX for
// an architecture <= the device's. Otherwise fills `reason` with the rebuild advice.
inline bool arch_runs_on(int cc_major, int cc_minor, char *reason, size_t cap) {
    const uint32_t cc = static_cast<uint32_t>(cc_major * 10 + cc_minor);
    uint32_t ns = 0, np = 0;
    const uint32_t *s = sass_archs(&ns);
    const uint32_t *p = ptx_archs(&np);
    for (uint32_t i = 0; i < ns; ++i)
        if (s[i] / 10 == cc / 10 && s[i] <= cc) return true;
    for (uint32_t i = 0; i < np; ++i)
        if (p[i] <= cc) return true;
    std::string built;
    for (uint32_t i = 0; i < ns; ++i) built += (i ? "," : "") + std::to_string(s[i]);
    if (np) built += " (+PTX " + std::to_string(p[0]) + ")";
    std::snprintf(reason, cap,
                  "no kernel image for compute capability %d.%d: built for %s; rebuild with KPR_CUDA_ARCHS=%u%s",
                  cc_major, cc_minor, built.c_str(), cc,
                  cc < 75 ? " (a CUDA 12.x toolkit: see docs/older-gpus.md)" : "");
    return false;
}

// ---- errors, options ------------------------------------------------------------------------------

inline kpr_status fail(kpr_error *err, kpr_status st, const char *fmt, ...) {
    if (err != nullptr && err->struct_size >= sizeof(uint32_t) + 1) {
        va_list ap;
        va_start(ap, fmt);
        size_t cap = err->struct_size - offsetof(kpr_error, message);
        if (cap > KPR_ERROR_MESSAGE_CAPACITY) cap = KPR_ERROR_MESSAGE_CAPACITY;
        std::vsnprintf(err->message, cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

inline kpr_status cuda_fail(kpr_error *err, cudaError_t e, const char *what) {
    return fail(err, e == cudaErrorMemoryAllocation ? KPR_ERR_OUT_OF_MEMORY : KPR_ERR_DEVICE, "%s: %s (%s)",
                what, cudaGetErrorString(e), cudaGetErrorName(e));
}

inline const char *option_value(const kpr_option_set *opts, const char *name) {
    if (opts == nullptr || opts->struct_size < sizeof(kpr_option_set) || opts->items == nullptr) return nullptr;
    for (uint32_t i = 0; i < opts->count; ++i)
        if (opts->items[i].name != nullptr && std::strcmp(opts->items[i].name, name) == 0) return opts->items[i].value;
    return nullptr;
}

inline bool option_bool(const kpr_option_set *opts, const char *name, bool dflt) {
    const char *v = option_value(opts, name);
    if (v == nullptr) return dflt;
    return std::strcmp(v, "true") == 0 || std::strcmp(v, "1") == 0 || std::strcmp(v, "on") == 0;
}

inline long option_int(const kpr_option_set *opts, const char *name, long dflt) {
    const char *v = option_value(opts, name);
    if (v == nullptr || *v == '\0') return dflt;
    char *end = nullptr;
    const long r = std::strtol(v, &end, 10);
    return (end != nullptr && *end == '\0') ? r : dflt;
}

inline void set_reason(kpr_offer *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(o->reason, sizeof(o->reason), fmt, ap);
    va_end(ap);
}

inline void decline(kpr_offer *o, kpr_status code, const char *fmt, ...) {
    o->accepted = 0;
    o->score = 0;
    o->decline_code = static_cast<uint32_t>(code);
    o->prepared_bytes = 0;
    o->workspace_bytes = 0;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(o->reason, sizeof(o->reason), fmt, ap);
    va_end(ap);
}

// ---- weight types ---------------------------------------------------------------------------------

struct TypeDesc {
    uint32_t id;
    const char *name;
    uint32_t qk;    // weights per block
    uint32_t bytes; // bytes per block
};

inline const TypeDesc *type_desc(uint32_t id) {
    static const TypeDesc t[] = {
        {KPR_TYPE_F32, "f32", 1, 4},           {KPR_TYPE_F16, "f16", 1, 2},
        {KPR_TYPE_BF16, "bf16", 1, 2},         {KPR_TYPE_Q8_0, "q8_0", 32, 34},
        {KPR_TYPE_Q4_0, "q4_0", 32, 18},       {KPR_TYPE_Q4_1, "q4_1", 32, 20},
        {KPR_TYPE_Q5_0, "q5_0", 32, 22},       {KPR_TYPE_Q5_1, "q5_1", 32, 24},
        {KPR_TYPE_Q2_K, "q2_K", 256, 84},      {KPR_TYPE_Q3_K, "q3_K", 256, 110},
        {KPR_TYPE_Q4_K, "q4_K", 256, 144},     {KPR_TYPE_Q5_K, "q5_K", 256, 176},
        {KPR_TYPE_Q6_K, "q6_K", 256, 210},     {KPR_TYPE_IQ4_NL, "iq4_nl", 32, 18},
        {KPR_TYPE_IQ4_XS, "iq4_xs", 256, 136}, {KPR_TYPE_IQ3_XXS, "iq3_xxs", 256, 98},
        {KPR_TYPE_IQ3_S, "iq3_s", 256, 110},
    };
    for (const auto &d : t)
        if (d.id == id) return &d;
    return nullptr;
}

// The ggml name of a weight type id for a decline reason ("q8_0", "iq2_xxs"), or "type N" (in buf) for an id
// this table does not name.
inline const char *type_label(uint32_t id, char (&buf)[16]) {
    static const char *const names[] = {"f32",   "f16",     "q4_0",   "q4_1",    nullptr, nullptr, "q5_0",   "q5_1",
                                        "q8_0",  "q8_1",    "q2_K",   "q3_K",    "q4_K",    "q5_K",    "q6_K",   "q8_K",
                                        "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl",  "iq3_s",   "iq2_s",  "iq4_xs",
                                        "i8",    "i16",     "i32",    "i64",     "f64",     "iq1_m",   "bf16"};
    if (id < sizeof(names) / sizeof(names[0]) && names[id] != nullptr) return names[id];
    std::snprintf(buf, sizeof(buf), "type %u", id);
    return buf;
}

inline uint64_t row_bytes(const TypeDesc *t, uint64_t cols) { return cols / t->qk * t->bytes; }

// ---- op checks shared by the GEMV providers ---------------------------------------------------------

// Returns false (and declines) when the op's shape is not one a GEMV provider can serve at all.
inline bool check_op_shape(const kpr_op_desc *op, kpr_offer *o, uint32_t col_multiple) {
    if (op->kind != KPR_OP_GEMV && op->kind != KPR_OP_GEMV_GROUPED) {
        decline(o, KPR_ERR_UNSUPPORTED, "op kind %u is not gemv or gemv_grouped", op->kind);
        return false;
    }
    if (op->ncols < 1 || op->ncols > KPR_MAX_NCOLS) {
        decline(o, KPR_ERR_UNSUPPORTED, "ncols %u outside 1..%u", op->ncols, KPR_MAX_NCOLS);
        return false;
    }
    if (op->rows == 0 || op->cols == 0 || op->rows > 0x7fffffffull || op->cols > 0x7fffffffull) {
        decline(o, KPR_ERR_UNSUPPORTED, "shape %llux%llu out of range", (unsigned long long)op->rows,
                (unsigned long long)op->cols);
        return false;
    }
    if (op->cols % col_multiple != 0) {
        decline(o, KPR_ERR_UNSUPPORTED, "cols %llu is not a multiple of %u", (unsigned long long)op->cols,
                col_multiple);
        return false;
    }
    if (op->kind == KPR_OP_GEMV_GROUPED) {
        if (op->n_experts == 0 || op->n_used == 0 || op->n_used > op->n_experts ||
            (op->x_slots != 1 && op->x_slots != op->n_used)) {
            decline(o, KPR_ERR_UNSUPPORTED, "grouped op with n_experts %u, n_used %u, x_slots %u is malformed",
                    op->n_experts, op->n_used, op->x_slots);
            return false;
        }
        if (uint64_t(op->ncols) * op->n_used > 65535u) {
            decline(o, KPR_ERR_UNSUPPORTED, "ncols * n_used = %llu exceeds 65535 grid rows",
                    (unsigned long long)(uint64_t(op->ncols) * op->n_used));
            return false;
        }
    }
    return true;
}

inline uint32_t op_vectors(const kpr_op_desc *op) {
    return op->kind == KPR_OP_GEMV_GROUPED ? op->ncols * op->x_slots : op->ncols;
}

// ---- device selection --------------------------------------------------------------------------

inline cudaError_t use_device(int ordinal) {
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur == ordinal) return cudaSuccess;
    return cudaSetDevice(ordinal);
}

// ---- per-stream scratch ------------------------------------------------------------------------
// A run's activation scratch must not be shared by runs that may execute concurrently: one buffer per
// stream (runs on one stream are ordered). Allocated on first use of a stream, freed on release.
class StreamScratch {
  public:
    explicit StreamScratch(size_t bytes) : bytes_(bytes) {}
    StreamScratch(const StreamScratch &) = delete;
    StreamScratch &operator=(const StreamScratch &) = delete;
    ~StreamScratch() {
        for (auto &kv : bufs_) cudaFree(kv.second);
    }
    cudaError_t get(cudaStream_t s, void **out) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = bufs_.find(s);
        if (it != bufs_.end()) {
            *out = it->second;
            return cudaSuccess;
        }
        void *p = nullptr;
        cudaError_t e = cudaMalloc(&p, bytes_ ? bytes_ : 256);
        if (e != cudaSuccess) return e;
        bufs_.emplace(s, p);
        *out = p;
        return cudaSuccess;
    }
    size_t bytes() const { return bytes_; }

  private:
    size_t bytes_;
    std::mutex mu_;
    std::map<cudaStream_t, void *> bufs_;
};

// ---- handshake ------------------------------------------------------------------------------------

inline kpr_status handshake(const kpr_handshake_offer *offer, kpr_handshake_answer *answer, kpr_error *err,
                            const kpr_provider_v1 *table) {
    if (offer == nullptr || answer == nullptr || answer->struct_size < sizeof(kpr_handshake_answer))
        return fail(err, KPR_ERR_INVALID_ARGUMENT, "handshake: null or short structs");
    answer->abi_version = KPR_ABI_VERSION;
    if (KPR_VERSION_MAJOR(offer->abi_min) > KPR_ABI_VERSION_MAJOR ||
        KPR_VERSION_MAJOR(offer->abi_max) < KPR_ABI_VERSION_MAJOR) {
        answer->table = nullptr;
        return fail(err, KPR_ERR_VERSION, "provider speaks ABI %u.%u; core offers %u.%u..%u.%u", KPR_ABI_VERSION_MAJOR,
                    KPR_ABI_VERSION_MINOR, KPR_VERSION_MAJOR(offer->abi_min), KPR_VERSION_MINOR(offer->abi_min),
                    KPR_VERSION_MAJOR(offer->abi_max), KPR_VERSION_MINOR(offer->abi_max));
    }
    answer->table = table;
    return KPR_OK;
}

// Log through the host callback (set at init).
struct HostLog {
    const kpr_host_api *host = nullptr;
    void log(int level, const char *fmt, ...) const {
        if (host == nullptr || host->log == nullptr || level < host->log_level) return;
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        host->log(host->log_user, level, buf);
    }
};

// ---- self-test case lists -------------------------------------------------------------------------

struct CaseSpec {
    const char *name;
    uint32_t kind;       // kpr_selftest_kind
    uint32_t op_kind;    // kpr_op_kind
    uint32_t type;
    uint32_t ncols;
    uint64_t rows, cols;
    uint32_t n_experts, n_used, x_slots;
    double tolerance;
    uint32_t act;
    double qtol;
    const char *parity;
    const kpr_option_value *options;
    uint32_t n_options;
};

inline kpr_status fill_case(const CaseSpec &c, kpr_selftest_case *out, kpr_error *err) {
    if (out == nullptr || out->struct_size < sizeof(kpr_selftest_case))
        return fail(err, KPR_ERR_INVALID_ARGUMENT, "selftest_get: case struct too small");
    const uint32_t sz = out->struct_size;
    std::memset(out, 0, sizeof(kpr_selftest_case));
    out->struct_size = sz < sizeof(kpr_selftest_case) ? sz : static_cast<uint32_t>(sizeof(kpr_selftest_case));
    out->kind = c.kind;
    std::snprintf(out->name, sizeof(out->name), "%s", c.name);
    out->op.struct_size = sizeof(kpr_op_desc);
    out->op.kind = c.op_kind;
    out->op.weight_type = c.type;
    out->op.ncols = c.ncols;
    out->op.rows = c.rows;
    out->op.cols = c.cols;
    out->op.n_experts = c.op_kind == KPR_OP_GEMV_GROUPED ? c.n_experts : 1;
    out->op.n_used = c.op_kind == KPR_OP_GEMV_GROUPED ? c.n_used : 1;
    out->op.x_slots = c.op_kind == KPR_OP_GEMV_GROUPED ? c.x_slots : 1;
    out->tolerance = c.tolerance;
    out->act_rounding = c.act;
    out->quantized_tolerance = c.qtol;
    out->parity_provider = c.parity;
    out->options = c.options;
    out->n_options = c.n_options;
    return KPR_OK;
}

} // namespace kpr::cuda

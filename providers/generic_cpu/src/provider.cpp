// generic_cpu: the always-present CPU provider. ABI plumbing: handshake, options, query, prepare, run,
// self-test cases. Kernels live in one translation unit per ISA (kernels_*.cpp).
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <sched.h>
#include <unistd.h>

#include "cpu_common.h"
#include "thread_pool.h"

namespace kpr_cpu {
namespace {

constexpr const char *kName = "generic_cpu";
constexpr const char *kVersion = "1.0.0";

// ---- small helpers ------------------------------------------------------------------------------

void set_error(kpr_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void set_error(kpr_error *err, const char *fmt, ...) {
    if (!err) return;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

const kpr_host_api *g_host = nullptr;

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_msg(int level, const char *fmt, ...) {
    const kpr_host_api *h = g_host;
    if (!h || !h->log || level < h->log_level) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    h->log(h->log_user, level, buf);
}

enum class Isa { Portable = 0, Avx2 = 1, Avx512 = 2, Auto = 3 };

const char *isa_name(Isa i) {
    switch (i) {
    case Isa::Portable: return "portable";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    default: return "auto";
    }
}

struct Options {
    Isa isa = Isa::Auto;
    long threads = 0;
};

// Parses the option set; returns false with a message on a bad value.
bool parse_options(const kpr_option_set *set, Options &o, char *why, size_t why_size) {
    if (!set || set->struct_size < sizeof(kpr_option_set) || !set->items) return true;
    for (uint32_t i = 0; i < set->count; ++i) {
        const kpr_option_value &v = set->items[i];
        if (!v.name || !v.value) continue;
        const std::string_view name(v.name), value(v.value);
        if (name == "isa") {
            if (value == "auto") o.isa = Isa::Auto;
            else if (value == "avx512") o.isa = Isa::Avx512;
            else if (value == "avx2") o.isa = Isa::Avx2;
            else if (value == "portable") o.isa = Isa::Portable;
            else {
                std::snprintf(why, why_size, "option isa=%s is not one of auto,avx512,avx2,portable", v.value);
                return false;
            }
        } else if (name == "threads") {
            char *end = nullptr;
            const long t = std::strtol(v.value, &end, 10);
            if (!end || *end != '\0' || end == v.value || t < 0 || t > 1024) {
                std::snprintf(why, why_size, "option threads=%s is not an integer in [0, 1024]", v.value);
                return false;
            }
            o.threads = t;
        }
    }
    return true;
}

// What the device (as described) supports, and what this process can actually execute.
constexpr uint64_t kAvx2Bits = KPR_CPU_AVX2 | KPR_CPU_FMA | KPR_CPU_F16C;
constexpr uint64_t kAvx512Bits = KPR_CPU_AVX512F | KPR_CPU_AVX512BW | KPR_CPU_AVX512VL | KPR_CPU_AVX512DQ;

struct HostIsa {
    bool avx2 = false, avx512 = false, vnni = false;
};

const HostIsa &host_isa() {
    static const HostIsa h = [] {
        HostIsa r;
        __builtin_cpu_init();
        r.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        r.avx512 = r.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
        r.vnni = r.avx512 && __builtin_cpu_supports("avx512vnni");
        return r;
    }();
    return h;
}

bool device_has(const kpr_device_desc *dev, uint64_t bits) {
    if (!dev || dev->struct_size < offsetof(kpr_device_desc, cpu_features) + sizeof(uint64_t)) return false;
    return (dev->cpu_features & bits) == bits;
}

struct IsaChoice {
    Isa isa;
    bool vnni;
};

// The best path that both the device description and (unless simulated) this process allow.
IsaChoice best_isa(const kpr_device_desc *dev, bool check_host) {
    const HostIsa &h = host_isa();
    bool a2 = device_has(dev, kAvx2Bits), a512 = a2 && device_has(dev, kAvx512Bits);
    bool vnni = a512 && device_has(dev, KPR_CPU_AVX512VNNI);
    if (check_host) {
        a2 = a2 && h.avx2;
        a512 = a512 && h.avx512;
        vnni = vnni && h.vnni;
    }
    if (a512) return {Isa::Avx512, vnni};
    if (a2) return {Isa::Avx2, false};
    return {Isa::Portable, false};
}

const KernelTable &table_for(IsaChoice c) {
    switch (c.isa) {
    case Isa::Avx512: return c.vnni ? avx512vnni_kernels() : avx512_kernels();
    case Isa::Avx2: return avx2_kernels();
    default: return portable_kernels();
    }
}

// A null entry in a table means "use the next lower path" (AVX-512 -> AVX2 -> portable).
const KernelTable &kernel_table_for(IsaChoice c, uint32_t type) {
    const KernelTable &t = table_for(c);
    if (t.fn[type]) return t;
    if (c.isa == Isa::Avx512 && avx2_kernels().fn[type]) return avx2_kernels();
    return portable_kernels();
}
KernelFn kernel_for(IsaChoice c, uint32_t type) { return kernel_table_for(c, type).fn[type]; }

unsigned usable_threads(const kpr_device_desc *dev) {
    cpu_set_t set;
    CPU_ZERO(&set);
    unsigned n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = (unsigned)CPU_COUNT(&set);
    if (n == 0) {
        const long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (unsigned)c : 1u;
    }
    if (dev && dev->struct_size >= offsetof(kpr_device_desc, cpu_cores) && dev->cpu_threads > 0 && !dev->simulated)
        n = std::min(n, dev->cpu_threads);
    return n;
}

// ---- shape checks shared by query and prepare -----------------------------------------------------

struct Shape {
    const TypeInfo *ti = nullptr;
    uint64_t row_bytes = 0;
    uint64_t matrix_bytes = 0; // one expert
    uint64_t total_bytes = 0;
    uint32_t n_experts = 1, n_used = 1, x_slots = 1;
};

// Returns KPR_OK, or a decline code with `why` filled.
kpr_status check_shape(const kpr_op_desc *op, Shape &s, char *why, size_t n) {
    if (op->kind != KPR_OP_GEMV && op->kind != KPR_OP_GEMV_GROUPED) {
        std::snprintf(why, n, "op kind %u is not implemented by generic_cpu (gemv and gemv_grouped are)", op->kind);
        return KPR_ERR_UNSUPPORTED;
    }
    s.ti = type_info(op->weight_type);
    if (!s.ti) {
        const char *tn = ggml_type_name(op->weight_type);
        if (tn)
            std::snprintf(why, n, "type %s is not implemented by generic_cpu", tn);
        else
            std::snprintf(why, n, "type id %u is not a GGML type", op->weight_type);
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->ncols < 1 || op->ncols > KPR_MAX_NCOLS) {
        if (op->ncols == 0)
            std::snprintf(why, n, "ncols 0: at least one activation column is needed");
        else
            std::snprintf(why, n, "ncols %u exceeds %u", op->ncols, KPR_MAX_NCOLS);
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->rows < 1) {
        std::snprintf(why, n, "rows 0: the weight needs at least one row");
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->cols < 1 || op->cols % s.ti->block != 0) {
        std::snprintf(why, n, "cols %" PRIu64 " is not a multiple of %s's block of %u", op->cols, s.ti->name,
                      s.ti->block);
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->cols > (1ull << 40) || op->rows > (1ull << 40)) {
        std::snprintf(why, n, "shape %" PRIu64 "x%" PRIu64 " is too large", op->rows, op->cols);
        return KPR_ERR_UNSUPPORTED;
    }
    if (op->kind == KPR_OP_GEMV) {
        if (op->n_experts > 1 || op->n_used > 1 || op->x_slots > 1) {
            std::snprintf(why, n, "gemv needs n_experts = n_used = x_slots = 1 (got %u, %u, %u); use gemv_grouped",
                          op->n_experts, op->n_used, op->x_slots);
            return KPR_ERR_UNSUPPORTED;
        }
    } else {
        if (op->n_experts < 1 || op->n_used < 1) {
            std::snprintf(why, n, "gemv_grouped needs n_experts >= 1 and n_used >= 1 (got %u, %u)", op->n_experts,
                          op->n_used);
            return KPR_ERR_UNSUPPORTED;
        }
        if (op->x_slots != 1 && op->x_slots != op->n_used) {
            std::snprintf(why, n, "x_slots %u must be 1 or n_used (%u)", op->x_slots, op->n_used);
            return KPR_ERR_UNSUPPORTED;
        }
        if (op->n_used > 4096 || op->n_experts > (1u << 20)) {
            std::snprintf(why, n, "n_used %u / n_experts %u too large", op->n_used, op->n_experts);
            return KPR_ERR_UNSUPPORTED;
        }
        s.n_experts = op->n_experts;
        s.n_used = op->n_used;
        s.x_slots = op->x_slots;
    }
    s.row_bytes = op->cols / s.ti->block * s.ti->bytes;
    const unsigned __int128 mb = (unsigned __int128)s.row_bytes * op->rows;
    const unsigned __int128 tb = mb * s.n_experts;
    if (tb >> 62) {
        std::snprintf(why, n, "the weight would be too large");
        return KPR_ERR_UNSUPPORTED;
    }
    s.matrix_bytes = (uint64_t)mb;
    s.total_bytes = (uint64_t)tb;
    return KPR_OK;
}

// Per-vector scratch for the quantized activations.
struct XLayout {
    size_t q_off, d_off, s_off, bytes_per_vec;
    size_t nd, ns;
};
XLayout x_layout(const TypeInfo *ti, size_t cols) {
    XLayout l{};
    if (ti->act == Act::Float) return l;
    const size_t blk = ti->act == Act::Q8_0 ? 32 : 256;
    l.nd = cols / blk;
    l.ns = ti->act == Act::Q8_0 ? cols / 32 : cols / 16;
    const size_t q = (cols + 63) & ~size_t(63);
    const size_t d = (l.nd * 4 + 63) & ~size_t(63);
    const size_t s = (l.ns * 2 + 63) & ~size_t(63);
    l.q_off = 0;
    l.d_off = q;
    l.s_off = q + d;
    l.bytes_per_vec = q + d + s;
    return l;
}

// ---- prepared op ----------------------------------------------------------------------------------

struct Prepared {
    kpr_op_desc op;
    Shape shape;
    const uint8_t *w;
    KernelFn fn;
    QuantFn quant;
    IsaChoice isa;
    unsigned threads;
};

// ---- provider table entries -------------------------------------------------------------------------

const kpr_option_decl kOptions[] = {
    {sizeof(kpr_option_decl), KPR_OPTION_STRING, "isa", "auto",
     "kernel path: auto picks the best the CPU has; avx512, avx2 or portable force that path (declined if absent)",
     0, 0, "auto,avx512,avx2,portable"},
    {sizeof(kpr_option_decl), KPR_OPTION_INT, "threads", "0",
     "worker threads per run, the caller included; 0 = all usable cores", 0, 1024, nullptr},
};

const kpr_provider_identity kIdentity = {
    sizeof(kpr_provider_identity),
    KPR_DEVICE_CPU,
    kName,
    kVersion,
    "generic",
    "portable CPU GEMV for every supported GGML type, with AVX2 and AVX-512 (VNNI) kernels chosen at load time",
    nullptr,
    0,
    nullptr,
    0,
    0, // opt_in: always on
};

kpr_status p_init(const kpr_host_api *host, void **state, kpr_error *err) noexcept {
    (void)err;
    if (host && host->struct_size >= sizeof(kpr_host_api)) g_host = host;
    if (state) *state = nullptr;
    return KPR_OK;
}

void p_shutdown(void *) noexcept {
    try {
        ThreadPool::instance().stop();
    } catch (...) {
    }
}

const kpr_provider_identity *p_identity(void *) noexcept { return &kIdentity; }
uint32_t p_option_count(void *) noexcept { return (uint32_t)(sizeof kOptions / sizeof kOptions[0]); }
const kpr_option_decl *p_option_get(void *, uint32_t i) noexcept {
    return i < p_option_count(nullptr) ? &kOptions[i] : nullptr;
}

// The decision shared by query and prepare. Returns KPR_OK when accepted; otherwise a decline code.
kpr_status decide(const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *options, bool real,
                  Shape &shape, Options &opts, IsaChoice &isa, char *why, size_t n) {
    if (dev && dev->struct_size >= offsetof(kpr_device_desc, kind) + 4 && dev->kind != KPR_DEVICE_CPU) {
        std::snprintf(why, n, "generic_cpu runs on the CPU only (the device is not a CPU)");
        return KPR_ERR_UNSUPPORTED;
    }
    if (!parse_options(options, opts, why, n)) return KPR_ERR_UNSUPPORTED;
    kpr_status st = check_shape(op, shape, why, n);
    if (st != KPR_OK) return st;
    const bool simulated = dev && dev->struct_size >= offsetof(kpr_device_desc, name) && dev->simulated;
    const IsaChoice best = best_isa(dev, real || !simulated);
    isa = best;
    if (opts.isa != Isa::Auto) {
        if ((int)opts.isa > (int)best.isa) {
            std::snprintf(why, n, "isa=%s was requested but the %s has only %s; use isa=auto or isa=%s",
                          isa_name(opts.isa), simulated ? "described device" : "CPU", isa_name(best.isa),
                          isa_name(best.isa));
            return KPR_ERR_WRONG_ARCH;
        }
        isa.isa = opts.isa;
        if (opts.isa != Isa::Avx512) isa.vnni = false;
    }
    return KPR_OK;
}

bool op_ok(const kpr_op_desc *op) { return op && op->struct_size >= sizeof(kpr_op_desc); }

kpr_status p_query(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *options,
                   kpr_offer *offer, kpr_error *err) noexcept {
    try {
        if (!op_ok(op) || !offer || offer->struct_size < sizeof(kpr_offer)) {
            set_error(err, "generic_cpu query: null or too-small op/offer struct");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        Shape shape;
        Options opts;
        IsaChoice isa{};
        char why[KPR_REASON_CAPACITY] = {};
        const kpr_status st = decide(op, dev, options, false, shape, opts, isa, why, sizeof why);
        kpr_offer o{};
        o.struct_size = offer->struct_size < sizeof(kpr_offer) ? offer->struct_size : (uint32_t)sizeof(kpr_offer);
        if (st != KPR_OK) {
            o.accepted = 0;
            o.score = 0;
            o.decline_code = st;
            std::snprintf(o.reason, sizeof o.reason, "%s", why);
        } else {
            o.accepted = 1;
            o.score = 100;
            o.decline_code = KPR_OK;
            o.prepared_bytes = 0;
            const XLayout xl = x_layout(shape.ti, op->cols);
            o.workspace_bytes = (uint64_t)xl.bytes_per_vec * op->ncols * shape.x_slots;
            const unsigned thr = opts.threads > 0 ? (unsigned)opts.threads : usable_threads(dev);
            std::snprintf(o.reason, sizeof o.reason, "%s %s on %s%s (%s), %u thread%s, weights read in place",
                          shape.ti->name, op->kind == KPR_OP_GEMV ? "gemv" : "gemv_grouped", isa_name(isa.isa),
                          isa.vnni ? "+vnni" : "",
                          shape.ti->act == Act::Float  ? "x kept in f32"
                          : shape.ti->act == Act::Q8_0 ? "x quantized to q8_0"
                                                       : "x quantized to q8_K",
                          thr, thr == 1 ? "" : "s");
        }
        std::memcpy(offer, &o, o.struct_size);
        return KPR_OK;
    } catch (...) {
        set_error(err, "generic_cpu query: internal error");
        return KPR_ERR_INTERNAL;
    }
}

kpr_status p_prepare(void *, const kpr_op_desc *op, const kpr_device_desc *dev, const kpr_option_set *options,
                     const kpr_weights *weights, kpr_prepared **out, kpr_error *err) noexcept {
    try {
        if (!op_ok(op) || !out || !weights || weights->struct_size < sizeof(kpr_weights)) {
            set_error(err, "generic_cpu prepare: null or too-small op/weights/out");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        Shape shape;
        Options opts;
        IsaChoice isa{};
        char why[KPR_REASON_CAPACITY] = {};
        const kpr_status st = decide(op, dev, options, true, shape, opts, isa, why, sizeof why);
        if (st != KPR_OK) {
            set_error(err, "generic_cpu prepare: %s", why);
            return st;
        }
        if (!weights->data) {
            set_error(err, "generic_cpu prepare: weights->data is null");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        if (weights->bytes != shape.total_bytes) {
            set_error(err,
                      "generic_cpu prepare: weights hold %" PRIu64 " bytes, the op needs %" PRIu64
                      " (%u x %" PRIu64 " rows x %" PRIu64 " bytes per %s row)",
                      weights->bytes, shape.total_bytes, shape.n_experts, op->rows, shape.row_bytes, shape.ti->name);
            return KPR_ERR_INVALID_ARGUMENT;
        }
        Prepared *p = new (std::nothrow) Prepared{};
        if (!p) {
            set_error(err, "generic_cpu prepare: out of memory");
            return KPR_ERR_OUT_OF_MEMORY;
        }
        p->op = *op;
        p->shape = shape;
        p->w = static_cast<const uint8_t *>(weights->data);
        p->isa = isa;
        p->fn = kernel_for(isa, op->weight_type);
        const KernelTable &tbl = table_for(isa);
        if (shape.ti->act == Act::Q8_0) p->quant = tbl.quant_q8_0 ? tbl.quant_q8_0 : quantize_q8_0;
        if (shape.ti->act == Act::Q8_K) p->quant = tbl.quant_q8_K ? tbl.quant_q8_K : quantize_q8_K;
        // A kernel that reads the activations in its own layout brings its own quantizer (same table).
        if (const QuantFn qx = kernel_table_for(isa, op->weight_type).quant_x[op->weight_type]) p->quant = qx;
        p->threads = opts.threads > 0 ? (unsigned)opts.threads : usable_threads(dev);
        log_msg(KPR_LOG_DEBUG, "prepared %s %" PRIu64 "x%" PRIu64 " ncols %u on %s%s, %u threads", shape.ti->name,
                op->rows, op->cols, op->ncols, isa_name(isa.isa), isa.vnni ? "+vnni" : "", p->threads);
        *out = reinterpret_cast<kpr_prepared *>(p);
        return KPR_OK;
    } catch (...) {
        set_error(err, "generic_cpu prepare: internal error");
        return KPR_ERR_INTERNAL;
    }
}

// ---- run ------------------------------------------------------------------------------------------

struct RunCtx {
    const Prepared *p;
    KernelFn fn;
    const Job *jobs;
    size_t rows;
    size_t chunk_rows;
    size_t chunks_per_job;
};

void run_chunk(void *vctx, size_t c) {
    const RunCtx &ctx = *static_cast<const RunCtx *>(vctx);
    const size_t job = c / ctx.chunks_per_job;
    const size_t r0 = (c % ctx.chunks_per_job) * ctx.chunk_rows;
    const size_t r1 = std::min(ctx.rows, r0 + ctx.chunk_rows);
    if (r0 < r1) ctx.fn(ctx.jobs[job], r0, r1);
}

struct Scratch {
    std::vector<uint8_t> x;
    std::vector<Job> jobs;
};

kpr_status p_run(void *, kpr_prepared *prepared, const kpr_run_args *args, kpr_error *err) noexcept {
    try {
        if (!prepared || !args || args->struct_size < offsetof(kpr_run_args, stream)) {
            set_error(err, "generic_cpu run: null prepared op or run args");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        const Prepared &p = *reinterpret_cast<const Prepared *>(prepared);
        const kpr_op_desc &op = p.op;
        const uint32_t ncols = args->ncols;
        if (ncols < 1 || ncols > op.ncols) {
            set_error(err, "generic_cpu run: ncols %u is outside 1..%u (the prepared op's ncols)", ncols, op.ncols);
            return KPR_ERR_INVALID_ARGUMENT;
        }
        if (!args->x || !args->y) {
            set_error(err, "generic_cpu run: x or y is null");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        const bool grouped = op.kind == KPR_OP_GEMV_GROUPED;
        const uint32_t n_used = p.shape.n_used, x_slots = p.shape.x_slots;
        if (grouped) {
            if (!args->ids) {
                set_error(err, "generic_cpu run: gemv_grouped needs ids");
                return KPR_ERR_INVALID_ARGUMENT;
            }
            for (uint32_t i = 0; i < ncols * n_used; ++i)
                if (args->ids[i] < 0 || (uint32_t)args->ids[i] >= p.shape.n_experts) {
                    set_error(err, "generic_cpu run: ids[%u] = %d is outside [0, %u)", i, args->ids[i],
                              p.shape.n_experts);
                    return KPR_ERR_INVALID_ARGUMENT;
                }
        }
        thread_local Scratch scratch;
        const size_t cols = op.cols, rows = op.rows;
        const TypeInfo *ti = p.shape.ti;
        const size_t nvec = (size_t)ncols * x_slots;
        const XLayout xl = x_layout(ti, cols);
        if (ti->act != Act::Float) {
            scratch.x.resize(xl.bytes_per_vec * nvec + 64);
        }
        uint8_t *xbase = reinterpret_cast<uint8_t *>(((uintptr_t)scratch.x.data() + 63) & ~uintptr_t(63));
        auto vec_q = [&](size_t v) { return reinterpret_cast<int8_t *>(xbase + v * xl.bytes_per_vec + xl.q_off); };
        auto vec_d = [&](size_t v) { return reinterpret_cast<float *>(xbase + v * xl.bytes_per_vec + xl.d_off); };
        auto vec_s = [&](size_t v) { return reinterpret_cast<int16_t *>(xbase + v * xl.bytes_per_vec + xl.s_off); };
        if (ti->act != Act::Float)
            for (size_t v = 0; v < nvec; ++v) p.quant(args->x + v * cols, cols, vec_q(v), vec_d(v), vec_s(v));

        auto fill_col = [&](Job &job, uint32_t slot, size_t v, float *y) {
            if (ti->act == Act::Float) {
                job.xf[slot] = args->x + v * cols;
            } else {
                job.xq[slot] = vec_q(v);
                job.xd[slot] = vec_d(v);
                job.xs[slot] = vec_s(v);
            }
            job.y[slot] = y;
        };

        std::vector<Job> &jobs = scratch.jobs;
        jobs.clear();
        if (!grouped) {
            Job job;
            job.w = p.w;
            job.row_bytes = p.shape.row_bytes;
            job.cols = cols;
            job.ncols = ncols;
            for (uint32_t j = 0; j < ncols; ++j) fill_col(job, j, j, args->y + j * rows);
            jobs.push_back(job);
        } else {
            // Gather the (column, slot) pairs of each expert into jobs of at most 8 columns, so each expert's
            // weights are read once for all the columns that use it.
            for (uint32_t e = 0; e < p.shape.n_experts; ++e) {
                Job job;
                bool any = false;
                for (uint32_t j = 0; j < ncols; ++j)
                    for (uint32_t s = 0; s < n_used; ++s) {
                        if ((uint32_t)args->ids[j * n_used + s] != e) continue;
                        if (!any) {
                            job = Job{};
                            job.w = p.w + (size_t)e * p.shape.matrix_bytes;
                            job.row_bytes = p.shape.row_bytes;
                            job.cols = cols;
                            any = true;
                        }
                        const size_t v = (size_t)j * x_slots + (x_slots == 1 ? 0 : s);
                        fill_col(job, job.ncols, v, args->y + ((size_t)j * n_used + s) * rows);
                        if (++job.ncols == KPR_MAX_NCOLS) {
                            jobs.push_back(job);
                            any = false;
                        }
                    }
                if (any) jobs.push_back(job);
            }
        }

        const unsigned threads = std::max(1u, p.threads);
        // Chunks of rows: at least 4 per thread, and at most about 256 KiB of weights each, never under 16
        // rows. The byte cap keeps the threads' finishing times within a few tens of microseconds of each
        // other on a large matrix (with 4 chunks per thread, a 4096 x 14336 Q4_K GEMV had chunks of 4 MiB,
        // ~0.3 ms each, and the thread that took the last one ran alone for up to that long).
        size_t chunk_rows = rows;
        if (threads > 1) {
            const size_t per_job_chunks = std::max<size_t>(1, (threads * 4 + jobs.size() - 1) / jobs.size());
            chunk_rows = std::max<size_t>(16, (rows + per_job_chunks - 1) / per_job_chunks);
            const size_t cap_rows = std::max<size_t>(16, (size_t(256) << 10) / std::max<size_t>(1, p.shape.row_bytes));
            chunk_rows = std::min({chunk_rows, cap_rows, rows});
        }
        RunCtx ctx{&p, p.fn, jobs.data(), rows, chunk_rows, (rows + chunk_rows - 1) / chunk_rows};
        ThreadPool::instance().run(ctx.chunks_per_job * jobs.size(), threads, run_chunk, &ctx);
        return KPR_OK;
    } catch (const std::bad_alloc &) {
        set_error(err, "generic_cpu run: out of memory");
        return KPR_ERR_OUT_OF_MEMORY;
    } catch (...) {
        set_error(err, "generic_cpu run: internal error");
        return KPR_ERR_INTERNAL;
    }
}

void p_release(void *, kpr_prepared *prepared) noexcept { delete reinterpret_cast<Prepared *>(prepared); }

// ---- self-test cases --------------------------------------------------------------------------------

const kpr_option_value kOptPortable[] = {{"isa", "portable"}};
const kpr_option_value kOptAvx2[] = {{"isa", "avx2"}};
const kpr_option_value kOptAvx512[] = {{"isa", "avx512"}};
const kpr_option_value kOptThreads1[] = {{"threads", "1"}};

struct CaseSpec {
    kpr_selftest_case c;
    Isa needs; // the path the case forces (Portable: runs anywhere)
};

// Tolerances (see README.md): float-x types against the float reference; quantized-x types against the
// float reference at the level of 8-bit activation rounding, and against the same-rounding reference tightly.
void tolerances(const TypeInfo *ti, double &tol, uint32_t &act, double &qtol) {
    switch (ti->act) {
    case Act::Float:
        tol = 1e-5;
        act = KPR_ACT_FLOAT;
        qtol = 1e-5;
        break;
    case Act::Q8_0:
        tol = 3e-2;
        act = KPR_ACT_Q8_0;
        qtol = 1e-5;
        break;
    case Act::Q8_K:
        tol = 4e-2;
        act = KPR_ACT_Q8_K;
        qtol = 1e-5;
        break;
    }
}

std::vector<CaseSpec> build_cases() {
    static const uint32_t kOrder[] = {
        KPR_TYPE_F32,  KPR_TYPE_F16,  KPR_TYPE_BF16,  KPR_TYPE_Q8_0,   KPR_TYPE_Q4_0,    KPR_TYPE_Q4_1,
        KPR_TYPE_Q5_0, KPR_TYPE_Q5_1, KPR_TYPE_Q2_K,  KPR_TYPE_Q3_K,   KPR_TYPE_Q4_K,    KPR_TYPE_Q5_K,
        KPR_TYPE_Q6_K, KPR_TYPE_IQ4_NL, KPR_TYPE_IQ4_XS, KPR_TYPE_IQ3_XXS, KPR_TYPE_IQ3_S};
    std::vector<CaseSpec> out;
    for (uint32_t type : kOrder) {
        const TypeInfo *ti = type_info(type);
        double tol = 0, qtol = 0;
        uint32_t act = 0;
        tolerances(ti, tol, act, qtol);
        auto add = [&](uint32_t kind, uint32_t ncols, uint64_t rows, uint64_t cols, uint32_t ne, uint32_t nu,
                       uint32_t xs, const kpr_option_value *opt, uint32_t nopt, Isa needs, const char *tag) {
            CaseSpec s{};
            kpr_selftest_case &c = s.c;
            c.struct_size = sizeof(kpr_selftest_case);
            c.kind = KPR_SELFTEST_REFERENCE;
            if (kind == KPR_OP_GEMV)
                std::snprintf(c.name, sizeof c.name, "%s %" PRIu64 "x%" PRIu64 " n%u%s%s", ti->name, rows, cols,
                              ncols, tag[0] ? " " : "", tag);
            else
                std::snprintf(c.name, sizeof c.name, "%s grouped %ue%uu xs%u %" PRIu64 "x%" PRIu64 " n%u%s%s", ti->name,
                              ne, nu, xs, rows, cols, ncols, tag[0] ? " " : "", tag);
            c.op.struct_size = sizeof(kpr_op_desc);
            c.op.kind = kind;
            c.op.weight_type = type;
            c.op.ncols = ncols;
            c.op.rows = rows;
            c.op.cols = cols;
            c.op.n_experts = ne;
            c.op.n_used = nu;
            c.op.x_slots = xs;
            c.tolerance = tol;
            c.act_rounding = act;
            c.quantized_tolerance = qtol;
            c.options = opt;
            c.n_options = nopt;
            s.needs = needs;
            out.push_back(s);
        };
        const uint64_t b = ti->block == 1 ? 32 : ti->block; // a "block" for odd shapes of float types
        for (uint32_t n : {1u, 3u, 8u}) add(KPR_OP_GEMV, n, 4096, 4096, 1, 1, 1, nullptr, 0, Isa::Portable, "");
        add(KPR_OP_GEMV, 2, 37, b * 3, 1, 1, 1, nullptr, 0, Isa::Portable, "");
        add(KPR_OP_GEMV, 5, 37, ti->block == 1 ? 1000 : b * 7, 1, 1, 1, kOptThreads1, 1, Isa::Portable, "threads=1");
        add(KPR_OP_GEMV_GROUPED, 3, 256, 1024, 8, 2, 1, nullptr, 0, Isa::Portable, "");
        add(KPR_OP_GEMV_GROUPED, 4, 256, 1024, 8, 2, 2, nullptr, 0, Isa::Portable, "");
        add(KPR_OP_GEMV, 4, 300, 2048, 1, 1, 1, kOptPortable, 1, Isa::Portable, "isa=portable");
        add(KPR_OP_GEMV, 4, 300, 2048, 1, 1, 1, kOptAvx2, 1, Isa::Avx2, "isa=avx2");
        add(KPR_OP_GEMV, 4, 300, 2048, 1, 1, 1, kOptAvx512, 1, Isa::Avx512, "isa=avx512");
    }
    return out;
}

const std::vector<CaseSpec> &all_cases() {
    static const std::vector<CaseSpec> cases = build_cases();
    return cases;
}

// The cases that apply to `dev`: those forcing a path the device lacks are left out.
bool case_applies(const CaseSpec &s, const kpr_device_desc *dev) {
    if (s.needs == Isa::Portable) return true;
    const bool simulated = dev && dev->struct_size >= offsetof(kpr_device_desc, name) && dev->simulated;
    return (int)best_isa(dev, !simulated).isa >= (int)s.needs;
}

uint32_t p_selftest_count(void *, const kpr_device_desc *dev) noexcept {
    try {
        uint32_t n = 0;
        for (const CaseSpec &s : all_cases()) n += case_applies(s, dev) ? 1 : 0;
        return n;
    } catch (...) {
        return 0;
    }
}

kpr_status p_selftest_get(void *, const kpr_device_desc *dev, uint32_t index, kpr_selftest_case *out,
                          kpr_error *err) noexcept {
    try {
        if (!out || out->struct_size < sizeof(kpr_selftest_case)) {
            set_error(err, "generic_cpu selftest_get: null or too-small case struct");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        uint32_t n = 0;
        for (const CaseSpec &s : all_cases()) {
            if (!case_applies(s, dev)) continue;
            if (n++ == index) {
                *out = s.c;
                return KPR_OK;
            }
        }
        set_error(err, "generic_cpu selftest_get: index %u is past the last case (%u)", index, n);
        return KPR_ERR_INVALID_ARGUMENT;
    } catch (...) {
        set_error(err, "generic_cpu selftest_get: internal error");
        return KPR_ERR_INTERNAL;
    }
}

const kpr_provider_v1 kTable = {
    sizeof(kpr_provider_v1),
    KPR_ABI_VERSION,
    p_init,
    p_shutdown,
    p_identity,
    p_option_count,
    p_option_get,
    p_query,
    p_prepare,
    p_run,
    p_release,
    p_selftest_count,
    p_selftest_get,
    nullptr,
};

} // namespace
} // namespace kpr_cpu

extern "C" KPR_PROVIDER_EXPORT kpr_status kpr_provider_entry(const kpr_handshake_offer *offer,
                                                             kpr_handshake_answer *answer, kpr_error *err) {
    try {
        if (!offer || !answer || offer->struct_size < offsetof(kpr_handshake_offer, host) ||
            answer->struct_size < sizeof(kpr_handshake_answer)) {
            if (err) std::snprintf(err->message, sizeof err->message, "generic_cpu handshake: null or too-small offer/answer");
            return KPR_ERR_INVALID_ARGUMENT;
        }
        // Accept when [abi_min, abi_max] contains major 1 with a minor <= ours (our minor is the newest we
        // speak; every minor of major 1 up to ours is served by this table, which the core reads up to
        // its struct_size).
        const uint32_t ours = KPR_ABI_VERSION;
        const uint32_t lo = offer->abi_min, hi = offer->abi_max;
        const uint32_t first = KPR_MAKE_VERSION(1u, 0u);
        const uint32_t pick = std::min(hi, ours); // the newest version both sides speak
        if (lo <= hi && pick >= lo && pick >= first && KPR_VERSION_MAJOR(pick) == 1u) {
            answer->abi_version = pick;
            answer->table = &kpr_cpu::kTable;
            return KPR_OK;
        }
        answer->abi_version = ours;
        answer->table = nullptr;
        if (err)
            std::snprintf(err->message, sizeof err->message,
                          "generic_cpu speaks ABI %u.%u; the core offers %u.%u..%u.%u", KPR_ABI_VERSION_MAJOR,
                          KPR_ABI_VERSION_MINOR, KPR_VERSION_MAJOR(lo), KPR_VERSION_MINOR(lo), KPR_VERSION_MAJOR(hi),
                          KPR_VERSION_MINOR(hi));
        return KPR_ERR_VERSION;
    } catch (...) {
        return KPR_ERR_INTERNAL;
    }
}

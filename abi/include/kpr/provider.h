/*
 * kpr/provider.h -- the whole contract between the kpr core and a provider library.
 *
 * Valid C99 and C++. Nothing but the types declared here crosses the boundary: no C++ types, no
 * exceptions, no allocator ownership. A provider is a shared library named libkpr_<name>.so that exports
 * one symbol, KPR_PROVIDER_ENTRY_SYMBOL ("kpr_provider_entry"), of type kpr_provider_entry_fn.
 *
 * Life of a provider, as the core drives it:
 *   1. kpr_provider_entry(offer, answer, err)
 *                                           version handshake: the core offers [abi_min, abi_max],
 *                                           the provider answers with the version it speaks and its
 *                                           function table (or a message in err). A different major
 *                                           is refused by the core.
 *   2. table->init(host, &state, err)       (optional) once, before anything else in the table.
 *   3. table->identity / option_*           who it is, which options it takes.
 *   4. table->query(op, device, options)    accept with a score and memory sizes, or decline with a
 *                                           reason a person can act on. Must be cheap and side-effect free.
 *   5. table->prepare(...) -> kpr_prepared  weights bound once (a provider may repack them).
 *   6. table->run(prepared, args)           the kernel; as often as wanted, from any thread.
 *   7. table->release(prepared)             frees what prepare made.
 *   8. table->shutdown(state)               (optional) never before every prepared op is released.
 *
 * Rules every call follows:
 *   - Every fallible call returns a kpr_status. On failure it writes a NUL-terminated message into the
 *     caller's kpr_error and leaves every other output untouched.
 *   - No exception escapes: a C++ provider catches everything at its edge (KPR_ERR_INTERNAL).
 *   - Structs that cross begin with `struct_size`; the writer of a struct sets it to sizeof as it was
 *     compiled, the reader only touches fields that lie below that size. Fields are only ever appended;
 *     released layouts are frozen by the static asserts at the bottom of this file.
 *   - Logging goes through the host's callback (kpr_host_api.log); providers bring no logger of their own.
 *
 * Versioning: KPR_ABI_VERSION = major << 16 | minor. A minor bump appends fields or table slots; a core
 * that speaks minor m accepts a provider built against any minor <= m (its table is shorter: the core
 * checks table->struct_size before touching a slot). A major bump is a break and is refused by name.
 */
#ifndef KPR_PROVIDER_H
#define KPR_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KPR_ABI_VERSION_MAJOR 1u
#define KPR_ABI_VERSION_MINOR 0u
#define KPR_MAKE_VERSION(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))
#define KPR_VERSION_MAJOR(v) ((uint32_t)(v) >> 16)
#define KPR_VERSION_MINOR(v) ((uint32_t)(v) & 0xffffu)
#define KPR_ABI_VERSION KPR_MAKE_VERSION(KPR_ABI_VERSION_MAJOR, KPR_ABI_VERSION_MINOR)

#define KPR_PROVIDER_ENTRY_SYMBOL "kpr_provider_entry"

#if defined(_WIN32)
#define KPR_PROVIDER_EXPORT __declspec(dllexport)
#else
#define KPR_PROVIDER_EXPORT __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------------------------------------- */
/* Status and errors                                                                               */
/* ---------------------------------------------------------------------------------------------- */

typedef enum kpr_status {
    KPR_OK = 0,
    KPR_ERR_INVALID_ARGUMENT = 1, /* a null pointer, a struct too small, a shape that cannot exist     */
    KPR_ERR_UNSUPPORTED = 2,      /* the op is well formed but this provider does not implement it      */
    KPR_ERR_WRONG_ARCH = 3,       /* the binary holds no code that runs on this device                  */
    KPR_ERR_OUT_OF_MEMORY = 4,    /* host or device allocation failed                                   */
    KPR_ERR_DEVICE = 5,           /* a driver or launch error                                           */
    KPR_ERR_VERSION = 6,          /* no ABI version in common (handshake only)                          */
    KPR_ERR_INTERNAL = 7          /* anything else, including a C++ exception caught at the edge        */
} kpr_status;

#define KPR_ERROR_MESSAGE_CAPACITY 512

/* Filled by the provider on failure only. */
typedef struct kpr_error {
    uint32_t struct_size;
    char message[KPR_ERROR_MESSAGE_CAPACITY]; /* NUL-terminated, one line, says what and why */
} kpr_error;

/* ---------------------------------------------------------------------------------------------- */
/* Host services handed to the provider                                                            */
/* ---------------------------------------------------------------------------------------------- */

typedef enum kpr_log_level {
    KPR_LOG_TRACE = 0,
    KPR_LOG_DEBUG = 1,
    KPR_LOG_INFO = 2,
    KPR_LOG_WARN = 3,
    KPR_LOG_ERROR = 4
} kpr_log_level;

/* A message from the provider; the core prefixes it with the provider's name. Thread-safe. */
typedef void (*kpr_log_fn)(void *user, int32_t level, const char *message);

typedef struct kpr_host_api {
    uint32_t struct_size;
    uint32_t abi_version; /* the version agreed in the handshake                 */
    kpr_log_fn log;       /* never null                                          */
    void *log_user;       /* passed back as `user`                               */
    int32_t log_level;    /* messages below this level are dropped by the host: skip formatting them */
} kpr_host_api;

/* ---------------------------------------------------------------------------------------------- */
/* Devices                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

typedef enum kpr_device_kind {
    KPR_DEVICE_CPU = 0,
    KPR_DEVICE_CUDA = 1
} kpr_device_kind;

/* CPU feature bits (kpr_device_desc.cpu_features). */
#define KPR_CPU_SSE42 (1ull << 0)
#define KPR_CPU_AVX (1ull << 1)
#define KPR_CPU_AVX2 (1ull << 2)
#define KPR_CPU_FMA (1ull << 3)
#define KPR_CPU_F16C (1ull << 4)
#define KPR_CPU_AVX512F (1ull << 5)
#define KPR_CPU_AVX512BW (1ull << 6)
#define KPR_CPU_AVX512VL (1ull << 7)
#define KPR_CPU_AVX512DQ (1ull << 8)
#define KPR_CPU_AVX512VNNI (1ull << 9)
#define KPR_CPU_AVXVNNI (1ull << 10)
#define KPR_CPU_AVX512BF16 (1ull << 11)
#define KPR_CPU_BMI2 (1ull << 12)

/*
 * What the core knows about a device. Probed once, or injected (simulated = 1: a description of a
 * machine kpr is not running on, for `kpr plan --simulate-device`; providers must answer queries for it
 * but are never asked to prepare or run on it).
 */
typedef struct kpr_device_desc {
    uint32_t struct_size;
    uint32_t kind;      /* kpr_device_kind                                                        */
    int32_t ordinal;    /* N of cuda:N; 0 for the CPU                                             */
    uint32_t simulated; /* 1 when no such hardware is present                                     */
    char name[128];     /* "AMD EPYC 9B45", "NVIDIA H200"                                         */
    char uuid[48];      /* GPU-xxxxxxxx-... for CUDA devices; "" for the CPU                     */

    /* CPU (kind == KPR_DEVICE_CPU) */
    uint64_t cpu_features;    /* KPR_CPU_* bits                                                   */
    uint32_t cpu_threads;     /* logical processors usable by this process                        */
    uint32_t cpu_cores;       /* physical cores, best effort                                      */
    uint64_t cache_l1d_bytes; /* per core                                                         */
    uint64_t cache_l2_bytes;  /* per core                                                         */
    uint64_t cache_l3_bytes;  /* total                                                            */

    /* CUDA (kind == KPR_DEVICE_CUDA) */
    int32_t cc_major, cc_minor;         /* compute capability                                      */
    uint32_t sm_count;                  /* multiprocessors                                         */
    uint32_t warp_size;                 /* 32                                                      */
    uint32_t smem_per_block;            /* default shared memory per block, bytes                  */
    uint32_t smem_per_block_optin;      /* with cudaFuncAttributeMaxDynamicSharedMemorySize        */
    uint32_t smem_per_sm;               /* shared memory per multiprocessor                        */
    uint32_t max_threads_per_block;
    uint64_t l2_bytes;
    uint64_t memory_bytes;              /* total global memory                                     */
    double peak_bandwidth_gbps;         /* 2 * memory clock * bus width / 8, in GB/s (1e9 B/s)     */
    uint32_t has_dp4a;                  /* cc >= 6.1                                               */
    uint32_t driver_version;            /* cuDriverGetVersion, e.g. 13000                          */
} kpr_device_desc;

/* ---------------------------------------------------------------------------------------------- */
/* Operations                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

typedef enum kpr_op_kind {
    /* y[ncols][rows] = W[rows][cols] . x[ncols][cols]                                            */
    KPR_OP_GEMV = 0,
    /*
     * Mixture of experts (ggml's MUL_MAT_ID). W is n_experts stacked matrices [n_experts][rows][cols].
     * For activation column j and slot s < n_used, e = ids[j * n_used + s] selects an expert and
     *   y[j][s][rows] = W[e] . x[j][x_slots == 1 ? 0 : s][cols].
     * ids live in the device's memory (the kernel reads them there: no host synchronisation).
     */
    KPR_OP_GEMV_GROUPED = 1
} kpr_op_kind;

#define KPR_MAX_NCOLS 8u

/* Weight types are GGML type ids (they are GGUF's too); kpr/ggml_blocks.h names them. */
typedef struct kpr_op_desc {
    uint32_t struct_size;
    uint32_t kind;        /* kpr_op_kind                                                          */
    uint32_t weight_type; /* GGML type id                                                         */
    uint32_t ncols;       /* activation columns, 1..KPR_MAX_NCOLS                                 */
    uint64_t rows;        /* outputs per matrix (ne1)                                             */
    uint64_t cols;        /* inputs, K (ne0); a multiple of the type's block size                 */
    uint32_t n_experts;   /* grouped: stacked matrices (ne2); 1 for gemv                          */
    uint32_t n_used;      /* grouped: experts used per column; 1 for gemv                         */
    uint32_t x_slots;     /* grouped: 1 (one x per column, broadcast) or n_used; 1 for gemv       */
    uint32_t reserved0;
} kpr_op_desc;

/* ---------------------------------------------------------------------------------------------- */
/* Options                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

typedef enum kpr_option_type {
    KPR_OPTION_BOOL = 0,   /* "true" / "false"                                                    */
    KPR_OPTION_INT = 1,    /* decimal, within [min, max]                                          */
    KPR_OPTION_FLOAT = 2,  /* decimal                                                             */
    KPR_OPTION_STRING = 3, /* free text, or one of `choices` when it is not null                  */
} kpr_option_type;

/* An option a provider declares. The core checks configured values against it. */
typedef struct kpr_option_decl {
    uint32_t struct_size;
    uint32_t type;             /* kpr_option_type                                                  */
    const char *name;          /* lower_snake_case                                                 */
    const char *default_value; /* as text, in the option's type                                    */
    const char *doc;           /* one line                                                         */
    int64_t min_value;         /* INT only                                                         */
    int64_t max_value;         /* INT only                                                         */
    const char *choices;       /* STRING only: comma-separated allowed values, or null             */
} kpr_option_decl;

typedef struct kpr_option_value {
    const char *name;
    const char *value; /* already checked against the declaration, in canonical text form        */
} kpr_option_value;

/* Every declared option, in declaration order, with its effective value (config or default). */
typedef struct kpr_option_set {
    uint32_t struct_size;
    uint32_t count;
    const kpr_option_value *items;
} kpr_option_set;

/* ---------------------------------------------------------------------------------------------- */
/* Identity                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

typedef struct kpr_provider_identity {
    uint32_t struct_size;
    uint32_t device_kind;      /* kpr_device_kind this provider runs on                           */
    const char *name;          /* [a-z0-9_]+, unique among loaded providers; the file is libkpr_<name>.so */
    const char *version;       /* the provider's own version, "1.2.0"                             */
    const char *family;        /* providers that belong together ("generic"), or null             */
    const char *description;   /* one line                                                        */
    /* CUDA: compute capabilities compiled in, as 10 * major + minor (60, 61, 90).                  */
    const uint32_t *sass_archs; /* machine code present                                          */
    uint32_t n_sass_archs;
    const uint32_t *ptx_archs;  /* PTX present (JIT-compilable for this and newer)                */
    uint32_t n_ptx_archs;
    uint32_t opt_in;            /* 1: off unless the config, a rule or KPR_ENABLE enables it      */
} kpr_provider_identity;

/* ---------------------------------------------------------------------------------------------- */
/* Negotiation                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

#define KPR_REASON_CAPACITY 256

/* Suggested score scale: 100 portable baseline, 200 tuned for the device, 300 hand-written for it. */
typedef struct kpr_offer {
    uint32_t struct_size;
    uint32_t accepted;        /* 1 accept, 0 decline                                               */
    int32_t score;            /* higher wins, when nothing in the config decides                   */
    uint32_t decline_code;    /* a kpr_status telling why: UNSUPPORTED or WRONG_ARCH               */
    uint64_t prepared_bytes;  /* memory prepare will hold beyond the caller's weights              */
    uint64_t workspace_bytes; /* scratch memory a run needs                                        */
    char reason[KPR_REASON_CAPACITY]; /* accept: what it will do; decline: what would make it accept */
} kpr_offer;

/* ---------------------------------------------------------------------------------------------- */
/* Prepare and run                                                                                 */
/* ---------------------------------------------------------------------------------------------- */

/* Opaque to the core. Made by prepare, freed by release. */
typedef struct kpr_prepared kpr_prepared;

/*
 * Every pointer handed to prepare and run lies in the memory of the device the op runs on: host memory
 * for the CPU, device memory (a CUdeviceptr cast to a pointer) for CUDA. The weights stay owned by the
 * caller and must outlive the prepared op (a provider may read them in place, the CPU one does).
 */
typedef struct kpr_weights {
    uint32_t struct_size;
    uint32_t reserved0;
    const void *data;     /* GGUF blocks, rows back to back, experts back to back              */
    uint64_t bytes;       /* must equal n_experts * rows * row_bytes(type, cols)                */
    uint64_t identity;    /* the caller's stable id for this tensor (0: none): two prepared ops with
                             the same identity and layout may share a repacked copy             */
} kpr_weights;

typedef struct kpr_run_args {
    uint32_t struct_size;
    uint32_t ncols;       /* <= the prepared op's ncols                                       */
    const float *x;       /* [ncols][x_slots][cols]                                           */
    float *y;             /* [ncols][n_used][rows]                                            */
    const int32_t *ids;   /* grouped only: [ncols][n_used], values in [0, n_experts)          */
    void *stream;         /* CUDA: a CUstream / cudaStream_t (null: the legacy default stream). The
                             run is enqueued, not waited for. CPU: unused                      */
} kpr_run_args;

/* ---------------------------------------------------------------------------------------------- */
/* Self-tests                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

typedef enum kpr_selftest_kind {
    /* The core fills weights and x with seeded random data, runs prepare/run, and compares with its
       double-precision reference: max|y - ref| / max|ref| <= tolerance.                          */
    KPR_SELFTEST_REFERENCE = 0,
    /* As REFERENCE, and the output must also equal, bit for bit, `parity_provider`'s on the same data. */
    KPR_SELFTEST_PARITY = 1,
    /* The provider checks something itself in selftest_run (a code path the core cannot reach).   */
    KPR_SELFTEST_INTERNAL = 2
} kpr_selftest_kind;

typedef enum kpr_activation_rounding {
    KPR_ACT_FLOAT = 0, /* activations kept in float (or f16): compare with the float reference     */
    KPR_ACT_Q8_0 = 1,  /* quantized to q8_0 blocks as ggml does                                     */
    KPR_ACT_Q8_1 = 2,  /* to q8_1 (the scale also rounded to f16)                                   */
    KPR_ACT_Q8_K = 3   /* to q8_K                                                                   */
} kpr_activation_rounding;

typedef struct kpr_selftest_case {
    uint32_t struct_size;
    uint32_t kind;              /* kpr_selftest_kind                                                */
    char name[96];              /* short and unique within the provider: "q8_0 4096x4096 n3"        */
    kpr_op_desc op;
    double tolerance;           /* against the float reference                                      */
    uint32_t act_rounding;      /* kpr_activation_rounding the kernel applies: the core then also
                                   checks against a reference that rounds the same way, within
                                   `quantized_tolerance`                                            */
    uint32_t reserved0;
    double quantized_tolerance; /* e.g. 1e-5                                                        */
    const char *parity_provider;/* PARITY only                                                      */
    const kpr_option_value *options; /* overrides for this case (e.g. emulate_dp4a=true), or null    */
    uint32_t n_options;
    uint32_t reserved1;
} kpr_selftest_case;

/* ---------------------------------------------------------------------------------------------- */
/* The function table                                                                              */
/* ---------------------------------------------------------------------------------------------- */

typedef struct kpr_provider_v1 {
    uint32_t struct_size; /* sizeof(kpr_provider_v1) as the provider was compiled                  */
    uint32_t abi_version; /* the version this table implements                                     */

    /* (optional) called once before anything else; *state is passed to every later call. Default: state = null. */
    kpr_status (*init)(const kpr_host_api *host, void **state, kpr_error *err);
    /* (optional) called once, after every prepared op is released. Default: nothing. */
    void (*shutdown)(void *state);

    /* Who the provider is. The pointed-to data lives as long as the library is loaded. */
    const kpr_provider_identity *(*identity)(void *state);

    /* Declared options: how many, and the i-th (null past the end). (optional) Default: none. */
    uint32_t (*option_count)(void *state);
    const kpr_option_decl *(*option_get)(void *state, uint32_t index);

    /* Accept or decline `op` on `device` with `options`. Cheap, no allocation on the device, thread-safe. */
    kpr_status (*query)(void *state, const kpr_op_desc *op, const kpr_device_desc *device,
                        const kpr_option_set *options, kpr_offer *offer, kpr_error *err);

    /* Bind `weights` for `op` (which query accepted). *out is owned by the caller until release. */
    kpr_status (*prepare)(void *state, const kpr_op_desc *op, const kpr_device_desc *device,
                          const kpr_option_set *options, const kpr_weights *weights,
                          kpr_prepared **out, kpr_error *err);

    /* Run a prepared op. Safe to call concurrently on the same prepared op from several threads. */
    kpr_status (*run)(void *state, kpr_prepared *prepared, const kpr_run_args *args, kpr_error *err);

    /* Free a prepared op. Never fails; null is ignored. */
    void (*release)(void *state, kpr_prepared *prepared);

    /* (optional) self-test cases for `device`: how many, and the i-th. Default: none. */
    uint32_t (*selftest_count)(void *state, const kpr_device_desc *device);
    kpr_status (*selftest_get)(void *state, const kpr_device_desc *device, uint32_t index,
                               kpr_selftest_case *out, kpr_error *err);
    /* (optional) run an INTERNAL case: KPR_OK when it passed; *measured gets its error metric. */
    kpr_status (*selftest_run)(void *state, const kpr_device_desc *device, uint32_t index,
                               double *measured, kpr_error *err);
} kpr_provider_v1;

/* ---------------------------------------------------------------------------------------------- */
/* The handshake: the one exported symbol                                                          */
/* ---------------------------------------------------------------------------------------------- */

typedef struct kpr_handshake_offer {
    uint32_t struct_size;
    uint32_t abi_min;           /* oldest version the core speaks                                 */
    uint32_t abi_max;           /* newest version the core speaks                                 */
    uint32_t reserved0;
    const kpr_host_api *host;   /* valid for the life of the process                              */
} kpr_handshake_offer;

typedef struct kpr_handshake_answer {
    uint32_t struct_size;
    uint32_t abi_version;           /* the version the provider chose (its own when none fits)    */
    const kpr_provider_v1 *table;   /* static storage; null when the provider refuses             */
} kpr_handshake_answer;

/* Exported as "kpr_provider_entry". Returns KPR_ERR_VERSION (with answer->abi_version set to what the
   provider speaks) when [abi_min, abi_max] holds no version it can serve. */
typedef kpr_status (*kpr_provider_entry_fn)(const kpr_handshake_offer *offer,
                                            kpr_handshake_answer *answer, kpr_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Frozen layouts (ABI 1.0, x86-64 / LP64). Append only; never reorder.                           */
/* ---------------------------------------------------------------------------------------------- */

#if defined(__cplusplus)
#define KPR_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define KPR_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#if UINTPTR_MAX == 0xffffffffffffffffu
KPR_STATIC_ASSERT(offsetof(kpr_error, message) == 4, "kpr_error layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_host_api, log) == 8 && offsetof(kpr_host_api, log_level) == 24,
                  "kpr_host_api layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_device_desc, name) == 16 && offsetof(kpr_device_desc, cpu_features) == 192 &&
                      offsetof(kpr_device_desc, cc_major) == 232 && offsetof(kpr_device_desc, l2_bytes) == 264 &&
                      offsetof(kpr_device_desc, peak_bandwidth_gbps) == 280 &&
                      offsetof(kpr_device_desc, driver_version) == 292 && sizeof(kpr_device_desc) == 296,
                  "kpr_device_desc layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_op_desc, rows) == 16 && offsetof(kpr_op_desc, n_experts) == 32 &&
                      sizeof(kpr_op_desc) == 48,
                  "kpr_op_desc layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_option_decl, name) == 8 && offsetof(kpr_option_decl, choices) == 48 &&
                      sizeof(kpr_option_decl) == 56,
                  "kpr_option_decl layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_option_set, items) == 8 && sizeof(kpr_option_set) == 16,
                  "kpr_option_set layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_provider_identity, name) == 8 && offsetof(kpr_provider_identity, sass_archs) == 40 &&
                      offsetof(kpr_provider_identity, n_ptx_archs) == 64 &&
                      offsetof(kpr_provider_identity, opt_in) == 68 && sizeof(kpr_provider_identity) == 72,
                  "kpr_provider_identity layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_offer, prepared_bytes) == 16 && offsetof(kpr_offer, reason) == 32 &&
                      sizeof(kpr_offer) == 288,
                  "kpr_offer layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_weights, data) == 8 && offsetof(kpr_weights, identity) == 24 &&
                      sizeof(kpr_weights) == 32,
                  "kpr_weights layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_run_args, x) == 8 && offsetof(kpr_run_args, stream) == 32 &&
                      sizeof(kpr_run_args) == 40,
                  "kpr_run_args layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_selftest_case, name) == 8 && offsetof(kpr_selftest_case, op) == 104 &&
                      offsetof(kpr_selftest_case, tolerance) == 152 &&
                      offsetof(kpr_selftest_case, parity_provider) == 176 && sizeof(kpr_selftest_case) == 200,
                  "kpr_selftest_case layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_provider_v1, init) == 8 && offsetof(kpr_provider_v1, identity) == 24 &&
                      offsetof(kpr_provider_v1, query) == 48 && offsetof(kpr_provider_v1, run) == 64 &&
                      offsetof(kpr_provider_v1, selftest_run) == 96 && sizeof(kpr_provider_v1) == 104,
                  "kpr_provider_v1 layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_handshake_offer, host) == 16 && sizeof(kpr_handshake_offer) == 24,
                  "kpr_handshake_offer layout is frozen");
KPR_STATIC_ASSERT(offsetof(kpr_handshake_answer, table) == 8 && sizeof(kpr_handshake_answer) == 16,
                  "kpr_handshake_answer layout is frozen");
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KPR_PROVIDER_H */

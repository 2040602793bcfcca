// harness.hpp -- loads CUDA provider modules with dlopen, does the handshake, describes devices (real
// or simulated), and runs self-test cases on the GPU against the CPU reference in ref.hpp: guard bytes
// around every device buffer, a NaN-poisoned output, bitwise parity against another provider.
#pragma once

#include "ref.hpp"

#include <kpr/provider.h>

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace kpr::gputest {

inline void host_log(void *, int32_t level, const char *msg) {
    if (level >= KPR_LOG_WARN) std::fprintf(stderr, "[provider log %d] %s\n", level, msg);
}
inline const kpr_host_api *host_api() {
    static kpr_host_api h{sizeof(kpr_host_api), KPR_ABI_VERSION, host_log, nullptr, KPR_LOG_INFO};
    return &h;
}

inline std::string provider_dir() {
    if (const char *e = std::getenv("KPR_PROVIDER_DIR")) return e;
#ifdef KPR_PROVIDER_BUILD_DIR
    return KPR_PROVIDER_BUILD_DIR;
#else
    return ".";
#endif
}

struct Provider {
    std::string name;
    void *handle = nullptr;
    const kpr_provider_v1 *t = nullptr;
    void *state = nullptr;
    std::string error;

    bool ok() const { return t != nullptr; }
    const kpr_provider_identity *id() const { return t->identity(state); }

    std::vector<kpr_option_value> options(const kpr_option_value *over = nullptr, uint32_t n_over = 0) const {
        std::vector<kpr_option_value> v;
        const uint32_t n = t->option_count ? t->option_count(state) : 0;
        for (uint32_t i = 0; i < n; ++i) {
            const kpr_option_decl *d = t->option_get(state, i);
            kpr_option_value o{d->name, d->default_value};
            for (uint32_t k = 0; k < n_over; ++k)
                if (std::string(over[k].name) == d->name) o.value = over[k].value;
            v.push_back(o);
        }
        return v;
    }
};

inline std::shared_ptr<Provider> load_provider(const std::string &name) {
    auto p = std::make_shared<Provider>();
    p->name = name;
    const std::string path = provider_dir() + "/libkpr_" + name + ".so";
    p->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        p->error = std::string("dlopen ") + path + ": " + dlerror();
        return p;
    }
    auto entry = reinterpret_cast<kpr_provider_entry_fn>(dlsym(p->handle, KPR_PROVIDER_ENTRY_SYMBOL));
    if (!entry) {
        p->error = "no kpr_provider_entry in " + path;
        return p;
    }
    kpr_handshake_offer offer{sizeof(offer), KPR_MAKE_VERSION(1, 0), KPR_ABI_VERSION, 0, host_api()};
    kpr_handshake_answer ans{sizeof(ans), 0, nullptr};
    kpr_error err{sizeof(err), {0}};
    if (entry(&offer, &ans, &err) != KPR_OK || !ans.table) {
        p->error = std::string("handshake: ") + err.message;
        return p;
    }
    if (ans.table->init && ans.table->init(host_api(), &p->state, &err) != KPR_OK) {
        p->error = std::string("init: ") + err.message;
        return p;
    }
    p->t = ans.table;
    return p;
}

inline kpr_device_desc simulated_device(const char *name, int ccmaj, int ccmin, uint32_t sms, uint32_t smem,
                                        uint32_t smem_optin) {
    kpr_device_desc d{};
    d.struct_size = sizeof(d);
    d.kind = KPR_DEVICE_CUDA;
    d.simulated = 1;
    std::snprintf(d.name, sizeof(d.name), "%s", name);
    d.cc_major = ccmaj;
    d.cc_minor = ccmin;
    d.sm_count = sms;
    d.warp_size = 32;
    d.smem_per_block = smem;
    d.smem_per_block_optin = smem_optin;
    d.smem_per_sm = smem_optin;
    d.max_threads_per_block = 1024;
    d.has_dp4a = (ccmaj * 10 + ccmin) >= 61;
    return d;
}

inline bool gpu_present() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

inline kpr_device_desc real_device(int ordinal = 0) {
    cudaDeviceProp pr{};
    cudaGetDeviceProperties(&pr, ordinal);
    kpr_device_desc d{};
    d.struct_size = sizeof(d);
    d.kind = KPR_DEVICE_CUDA;
    d.ordinal = ordinal;
    std::snprintf(d.name, sizeof(d.name), "%s", pr.name);
    d.cc_major = pr.major;
    d.cc_minor = pr.minor;
    d.sm_count = pr.multiProcessorCount;
    d.warp_size = pr.warpSize;
    d.smem_per_block = static_cast<uint32_t>(pr.sharedMemPerBlock);
    d.smem_per_block_optin = static_cast<uint32_t>(pr.sharedMemPerBlockOptin);
    d.smem_per_sm = static_cast<uint32_t>(pr.sharedMemPerMultiprocessor);
    d.max_threads_per_block = pr.maxThreadsPerBlock;
    d.l2_bytes = pr.l2CacheSize;
    d.memory_bytes = pr.totalGlobalMem;
    d.has_dp4a = (pr.major * 10 + pr.minor) >= 61;
    return d;
}

#define KPR_CU(x)                                                                                              \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));            \
            std::abort();                                                                                      \
        }                                                                                                      \
    } while (0)

// A device buffer with 4 KiB of guard bytes on each side.
struct GuardedBuffer {
    static constexpr size_t kGuard = 4096;
    static constexpr uint8_t kPattern = 0xA5;
    uint8_t *base = nullptr;
    size_t bytes = 0;
    explicit GuardedBuffer(size_t n) : bytes(n) {
        KPR_CU(cudaMalloc(&base, n + 2 * kGuard));
        KPR_CU(cudaMemset(base, kPattern, n + 2 * kGuard));
    }
    ~GuardedBuffer() { cudaFree(base); }
    GuardedBuffer(const GuardedBuffer &) = delete;
    void *ptr() const { return base + kGuard; }
    bool guards_intact() const {
        std::vector<uint8_t> h(kGuard);
        for (int side = 0; side < 2; ++side) {
            KPR_CU(cudaMemcpy(h.data(), side ? base + kGuard + bytes : base, kGuard, cudaMemcpyDeviceToHost));
            for (uint8_t b : h)
                if (b != kPattern) return false;
        }
        return true;
    }
};

struct CaseResult {
    bool ran = false, declined = false, passed = false;
    std::string note;
    double err_float = 0, err_q = 0;
    bool parity_checked = false, parity_equal = false;
    bool guards = true;
    double ms = 0;
};

template <class F>
inline void parallel_for(uint64_t n, F f) {
    unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (unsigned t = 0; t < nt; ++t)
        th.emplace_back([&, t] {
            for (uint64_t i = t; i < n; i += nt) f(i);
        });
    for (auto &x : th) x.join();
}

// Runs one self-test case of `p` (with `parity` for PARITY cases) on the real device. x_offset: the
// activations start that many bytes into their buffer (4: aligned for floats, not for 16-byte copies).
inline CaseResult run_case(Provider &p, const kpr_selftest_case &c, const kpr_device_desc &dev, cudaStream_t stream,
                           Provider *parity, uint64_t seed, uint32_t x_offset = 0) {
    CaseResult r;
    const kpr_op_desc &op = c.op;
    const TypeInfo *ti = tinfo(op.weight_type);
    if (!ti) {
        r.note = "unknown type";
        return r;
    }
    auto opts = p.options(c.options, c.n_options);
    kpr_option_set os{sizeof(os), static_cast<uint32_t>(opts.size()), opts.data()};
    kpr_offer off{};
    off.struct_size = sizeof(off);
    kpr_error err{sizeof(err), {0}};
    if (p.t->query(p.state, &op, &dev, &os, &off, &err) != KPR_OK) {
        r.note = std::string("query failed: ") + err.message;
        return r;
    }
    if (!off.accepted) {
        r.declined = true;
        r.note = off.reason;
        return r;
    }
    const bool grouped = op.kind == KPR_OP_GEMV_GROUPED;
    const uint64_t n_exp = grouped ? op.n_experts : 1, n_used = grouped ? op.n_used : 1;
    const uint64_t xs = grouped ? op.x_slots : 1;
    const uint64_t rb = op.cols / ti->qk * ti->bytes;
    const uint64_t wbytes = n_exp * op.rows * rb;
    std::vector<uint8_t> hw(wbytes);
    // fill per expert so that the big MoE cases stay quick to generate
    fill_blocks(op.weight_type, seed, hw.data(), n_exp * op.rows * op.cols);
    const uint64_t nx = op.ncols * xs * op.cols;
    std::vector<float> hx(nx);
    Rng rx(seed ^ 0xABCDEF);
    for (auto &v : hx) v = rx.sym();
    std::vector<int32_t> hids(op.ncols * n_used);
    Rng ri(seed ^ 0x1234);
    for (uint32_t j = 0; j < op.ncols; ++j) {
        std::vector<int32_t> pick;
        while (pick.size() < n_used) {
            int32_t e = static_cast<int32_t>(ri.next() % n_exp);
            if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
        }
        for (uint64_t s = 0; s < n_used; ++s) hids[j * n_used + s] = pick[s];
    }
    const uint64_t ny = op.ncols * n_used * op.rows;

    GuardedBuffer dw(wbytes), dx(nx * 4 + x_offset), dy(ny * 4), dids(hids.size() * 4);
    float *const xptr = reinterpret_cast<float *>(static_cast<uint8_t *>(dx.ptr()) + x_offset);
    KPR_CU(cudaMemcpy(dw.ptr(), hw.data(), wbytes, cudaMemcpyHostToDevice));
    KPR_CU(cudaMemcpy(xptr, hx.data(), nx * 4, cudaMemcpyHostToDevice));
    KPR_CU(cudaMemcpy(dids.ptr(), hids.data(), hids.size() * 4, cudaMemcpyHostToDevice));

    auto run_on = [&](Provider &pv, std::vector<float> &out, std::string &msg) -> bool {
        auto o2 = pv.options(&pv == &p ? c.options : nullptr, &pv == &p ? c.n_options : 0);
        kpr_option_set os2{sizeof(os2), static_cast<uint32_t>(o2.size()), o2.data()};
        kpr_weights wt{sizeof(wt), 0, dw.ptr(), wbytes, 0x5eed0000ull + seed};
        kpr_prepared *prep = nullptr;
        kpr_error e2{sizeof(e2), {0}};
        if (pv.t->prepare(pv.state, &op, &dev, &os2, &wt, &prep, &e2) != KPR_OK) {
            msg = std::string(pv.name) + " prepare: " + e2.message;
            return false;
        }
        KPR_CU(cudaMemsetAsync(dy.ptr(), 0xFF, ny * 4, stream)); // NaN poison
        kpr_run_args ra{sizeof(ra), op.ncols, xptr, static_cast<float *>(dy.ptr()),
                        grouped ? static_cast<const int32_t *>(dids.ptr()) : nullptr, stream};
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        cudaEventRecord(e0, stream);
        kpr_status st = pv.t->run(pv.state, prep, &ra, &e2);
        cudaEventRecord(e1, stream);
        cudaError_t ce = cudaStreamSynchronize(stream);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        r.ms = ms;
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        pv.t->release(pv.state, prep);
        if (st != KPR_OK) {
            msg = std::string(pv.name) + " run: " + e2.message;
            return false;
        }
        if (ce != cudaSuccess) {
            msg = std::string(pv.name) + " kernel: " + cudaGetErrorString(ce);
            return false;
        }
        out.resize(ny);
        KPR_CU(cudaMemcpy(out.data(), dy.ptr(), ny * 4, cudaMemcpyDeviceToHost));
        return true;
    };

    std::vector<float> y;
    if (!run_on(p, y, r.note)) return r;
    r.ran = true;
    r.guards = dw.guards_intact() && dx.guards_intact() && dy.guards_intact() && dids.guards_intact();

    // references: float activations, and activations rounded like the kernel
    std::vector<float> hxq(nx);
    const bool rounded = c.act_rounding == KPR_ACT_Q8_1;
    if (rounded) round_q8_1(hx.data(), hxq.data(), nx);
    std::vector<double> ref(ny), refq(ny);
    parallel_for(n_used * op.ncols, [&](uint64_t task) {
        const uint64_t j = task / n_used, s = task % n_used;
        const uint64_t e = grouped ? hids[task] : 0;
        const uint64_t xv = j * xs + (xs == 1 ? 0 : s);
        std::vector<float> wrow(op.cols);
        for (uint64_t row = 0; row < op.rows; ++row) {
            dequant_row(op.weight_type, hw.data() + (e * op.rows + row) * rb, wrow.data(), op.cols);
            double a = 0, b = 0;
            const float *xp = hx.data() + xv * op.cols, *xq = hxq.data() + xv * op.cols;
            for (uint64_t k = 0; k < op.cols; ++k) {
                a += static_cast<double>(wrow[k]) * xp[k];
                if (rounded) b += static_cast<double>(wrow[k]) * xq[k];
            }
            ref[task * op.rows + row] = a;
            refq[task * op.rows + row] = rounded ? b : a;
        }
    });
    double mref = 0, mrefq = 0, e1 = 0, e2 = 0;
    bool nan = false;
    for (uint64_t i = 0; i < ny; ++i) {
        if (!std::isfinite(y[i])) nan = true;
        mref = std::max(mref, std::fabs(ref[i]));
        mrefq = std::max(mrefq, std::fabs(refq[i]));
        e1 = std::max(e1, std::fabs(y[i] - ref[i]));
        e2 = std::max(e2, std::fabs(y[i] - refq[i]));
    }
    r.err_float = mref > 0 ? e1 / mref : e1;
    r.err_q = mrefq > 0 ? e2 / mrefq : e2;
    r.passed = !nan && r.guards && r.err_float <= c.tolerance && (!rounded || r.err_q <= c.quantized_tolerance);
    if (nan) r.note += "non-finite output; ";
    if (!r.guards) r.note += "guard bytes overwritten; ";

    if (c.kind == KPR_SELFTEST_PARITY) {
        r.parity_checked = true;
        if (!parity) {
            r.passed = false;
            r.note += "parity provider missing; ";
        } else {
            std::vector<float> y2;
            std::string m2;
            if (!run_on(*parity, y2, m2)) {
                r.passed = false;
                r.note += m2;
            } else {
                r.parity_equal = std::memcmp(y.data(), y2.data(), ny * 4) == 0;
                if (!r.parity_equal) {
                    r.passed = false;
                    r.note += "not bitwise equal to parity provider; ";
                }
            }
        }
    }
    return r;
}

} // namespace kpr::gputest

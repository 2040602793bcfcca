#include <kpr/formats.hpp>
#include <kpr/selftest.hpp>

#include "device/cuda_driver.hpp"
#include "runtime/internal.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

namespace kpr {

const char *to_string(SelftestResult::Outcome o) {
    switch (o) {
    case SelftestResult::Outcome::Passed: return "pass";
    case SelftestResult::Outcome::Failed: return "FAIL";
    default: return "skip";
    }
}

namespace {

constexpr size_t kGuard = 4096;
constexpr unsigned char kGuardByte = 0xA5;

uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t hash_str(const std::string &s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// A buffer in the device's memory with guard bytes on both sides.
class GuardedBuffer {
public:
    GuardedBuffer(const Device &d, size_t bytes) : cuda_(d.is_cuda()), bytes_(bytes) {
        if (cuda_) {
            dev_ = cuda::DeviceBuffer(d.desc.ordinal, bytes + 2 * kGuard);
            dev_.fill(kGuardByte);
        } else {
            host_.assign(bytes + 2 * kGuard + 64, kGuardByte);
        }
    }
    void *ptr() {
        if (cuda_) return static_cast<char *>(dev_.ptr()) + kGuard;
        uintptr_t base = reinterpret_cast<uintptr_t>(host_.data()) + kGuard;
        return reinterpret_cast<void *>((base + 63) & ~uintptr_t(63));
    }
    void upload(const void *src) {
        if (cuda_) dev_.upload(src, bytes_, kGuard);
        else std::memcpy(ptr(), src, bytes_);
    }
    void download(void *dst) {
        if (cuda_) dev_.download(dst, bytes_, kGuard);
        else std::memcpy(dst, ptr(), bytes_);
    }
    // "" when both guards are intact, else which side was written.
    std::string check_guards() {
        std::vector<unsigned char> lo(kGuard), hi(kGuard);
        if (cuda_) {
            dev_.download(lo.data(), kGuard, 0);
            dev_.download(hi.data(), kGuard, kGuard + bytes_);
        } else {
            unsigned char *p = static_cast<unsigned char *>(ptr());
            std::memcpy(lo.data(), p - kGuard, kGuard);
            std::memcpy(hi.data(), p + bytes_, kGuard);
        }
        for (size_t i = 0; i < kGuard; ++i) {
            if (lo[kGuard - 1 - i] != kGuardByte) return fmt::format("wrote {} bytes before the buffer", i + 1);
            if (hi[i] != kGuardByte) return fmt::format("wrote past the end of the buffer (byte +{})", i);
        }
        return {};
    }

private:
    bool cuda_;
    size_t bytes_;
    cuda::DeviceBuffer dev_;
    std::vector<unsigned char> host_;
};

template <typename F> void parallel_for(uint64_t n, F &&f) {
    unsigned t = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 16));
    if (n < 64 || t == 1) {
        f(0, n);
        return;
    }
    std::vector<std::thread> th;
    uint64_t chunk = (n + t - 1) / t;
    for (unsigned i = 0; i < t; ++i) {
        uint64_t a = i * chunk, b = std::min(n, a + chunk);
        if (a < b) th.emplace_back([&, a, b] { f(a, b); });
    }
    for (auto &x : th) x.join();
}

struct CaseData {
    std::vector<uint8_t> weights;
    std::vector<float> x;
    std::vector<int32_t> ids;
    std::vector<double> ref, ref_q;  // [ncols][n_used][rows]
};

CaseData make_data(const kpr_op_desc &op, uint64_t seed, formats::ActRounding rounding) {
    CaseData d;
    const formats::TypeInfo *ti = formats::type_info(op.weight_type);
    uint64_t bytes = weight_bytes(op);
    d.weights.resize(bytes);
    formats::fill_random_blocks(op.weight_type, mix(seed, 1), d.weights.data(), bytes / ti->block_bytes);
    uint64_t xn = uint64_t(op.ncols) * op.x_slots * op.cols;
    d.x.resize(xn);
    formats::fill_random_floats(mix(seed, 2), d.x.data(), xn);
    uint32_t used = op.kind == KPR_OP_GEMV_GROUPED ? op.n_used : 1;
    if (op.kind == KPR_OP_GEMV_GROUPED) {
        std::mt19937_64 rng(mix(seed, 3));
        for (uint32_t j = 0; j < op.ncols; ++j) {
            std::vector<int32_t> all(op.n_experts);
            for (uint32_t e = 0; e < op.n_experts; ++e) all[e] = (int32_t)e;
            std::shuffle(all.begin(), all.end(), rng);
            for (uint32_t s = 0; s < used; ++s) d.ids.push_back(all[s]);
        }
    }
    // Rounded activations, per column and slot.
    bool rounded = rounding != formats::ActRounding::Float;
    std::vector<float> xq;
    if (rounded) {
        xq.resize(xn);
        for (uint64_t i = 0; i < uint64_t(op.ncols) * op.x_slots; ++i)
            formats::round_activations(rounding, d.x.data() + i * op.cols, xq.data() + i * op.cols, op.cols);
    }
    uint64_t row = formats::row_bytes(op.weight_type, op.cols);
    uint64_t n_out = uint64_t(op.ncols) * used * op.rows;
    d.ref.assign(n_out, 0);
    if (rounded) d.ref_q.assign(n_out, 0);
    // For each expert in use, dequantize each row once and dot it with every column that uses it.
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(op.n_experts);  // expert -> (j, s)
    for (uint32_t j = 0; j < op.ncols; ++j)
        for (uint32_t s = 0; s < used; ++s)
            users[op.kind == KPR_OP_GEMV_GROUPED ? d.ids[j * used + s] : 0].push_back({j, s});
    for (uint32_t e = 0; e < op.n_experts; ++e) {
        if (users[e].empty()) continue;
        parallel_for(op.rows, [&](uint64_t r0, uint64_t r1) {
            std::vector<float> w(op.cols);
            for (uint64_t r = r0; r < r1; ++r) {
                formats::dequantize_row(op.weight_type, d.weights.data() + (e * op.rows + r) * row, w.data(), op.cols);
                for (auto [j, s] : users[e]) {
                    uint32_t xs = op.x_slots == 1 ? 0 : s;
                    const float *xv = d.x.data() + (uint64_t(j) * op.x_slots + xs) * op.cols;
                    double acc = 0;
                    for (uint64_t k = 0; k < op.cols; ++k) acc += double(w[k]) * double(xv[k]);
                    d.ref[(uint64_t(j) * used + s) * op.rows + r] = acc;
                    if (rounded) {
                        const float *xqv = xq.data() + (uint64_t(j) * op.x_slots + xs) * op.cols;
                        double aq = 0;
                        for (uint64_t k = 0; k < op.cols; ++k) aq += double(w[k]) * double(xqv[k]);
                        d.ref_q[(uint64_t(j) * used + s) * op.rows + r] = aq;
                    }
                }
            }
        });
    }
    return d;
}

// Runs `p` on the data; returns y. Throws kpr::Error on a provider error or a guard violation.
std::vector<float> run_on(const RuntimeImpl &rt, const LoadedProvider &p, const Device &dev, const kpr_op_desc &op,
                          const OptionStore &opts, const CaseData &data, double *ms) {
    uint32_t used = op.kind == KPR_OP_GEMV_GROUPED ? op.n_used : 1;
    size_t y_n = size_t(op.ncols) * used * op.rows;
    if (dev.is_cuda()) cuda::driver().make_current(dev.desc.ordinal);
    GuardedBuffer w(dev, data.weights.size()), x(dev, data.x.size() * 4), y(dev, y_n * 4),
        ids(dev, std::max<size_t>(data.ids.size(), 1) * 4);
    w.upload(data.weights.data());
    x.upload(data.x.data());
    if (!data.ids.empty()) ids.upload(data.ids.data());
    std::vector<float> nan(y_n, std::numeric_limits<float>::quiet_NaN());
    y.upload(nan.data());

    cuda::CUstream stream = nullptr;
    if (dev.is_cuda()) cuda::driver().check(cuda::driver().cuStreamCreate(&stream, 0), "cuStreamCreate");
    struct StreamGuard {
        cuda::CUstream s;
        ~StreamGuard() {
            if (s) cuda::driver().cuStreamDestroy(s);
        }
    } sg{stream};

    kpr_prepared *h = p.prepare(op, dev.desc, opts, w.ptr(), data.weights.size(), 0);
    struct Release {
        const LoadedProvider &p;
        kpr_prepared *h;
        ~Release() { p.release(h); }
    } rel{p, h};
    kpr_run_args args{sizeof args, op.ncols, static_cast<const float *>(x.ptr()), static_cast<float *>(y.ptr()),
                      op.kind == KPR_OP_GEMV_GROUPED ? static_cast<const int32_t *>(ids.ptr()) : nullptr, stream};
    auto t0 = std::chrono::steady_clock::now();
    p.run(h, args);
    if (stream) cuda::driver().check(cuda::driver().cuStreamSynchronize(stream), "run (cuStreamSynchronize)");
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<float> out(y_n);
    y.download(out.data());
    for (auto *b : {&w, &x, &y, &ids})
        if (std::string g = b->check_guards(); !g.empty())
            throw Error(fmt::format("{} {}", b == &w ? "weights:" : b == &x ? "x:" : b == &y ? "y:" : "ids:", g));
    (void)rt;
    return out;
}

double rel_error(const std::vector<float> &y, const std::vector<double> &ref, std::string *bad) {
    double maxref = 0, maxdiff = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        if (!std::isfinite(y[i])) {
            *bad = fmt::format("output element {} is {} (never written, or overflow)", i, y[i]);
            return INFINITY;
        }
        maxref = std::max(maxref, std::fabs(ref[i]));
        maxdiff = std::max(maxdiff, std::fabs(double(y[i]) - ref[i]));
    }
    return maxref > 0 ? maxdiff / maxref : maxdiff;
}

} // namespace

std::vector<SelftestResult> run_selftests(const Runtime &rt_, const SelftestOptions &opts,
                                          const std::function<void(const SelftestResult &)> &progress) {
    const RuntimeImpl &rt = *rt_.impl();
    const Device &dev = rt.device(opts.device);
    if (dev.desc.simulated) throw Error(fmt::format("cannot run self-tests on {}: a simulated device", dev.id));
    if (!opts.provider.empty() && !rt.find(opts.provider)) throw Error(fmt::format("unknown provider '{}'", opts.provider));
    uint64_t seed = opts.seed ? opts.seed : std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
    std::vector<SelftestResult> results;
    for (auto &pp : rt.providers) {
        if (!pp->ok() || pp->info.device_kind != dev.desc.kind) continue;
        if (!opts.provider.empty() && pp->info.name != opts.provider) continue;
        const LoadedProvider &p = *pp;
        uint32_t n = 0;
        try {
            n = p.selftest_count(dev.desc);
        } catch (const Error &e) {
            SelftestResult r;
            r.provider = p.info.name;
            r.device = dev.id;
            r.case_name = "(enumerate)";
            r.outcome = SelftestResult::Outcome::Failed;
            r.message = e.what();
            results.push_back(r);
            if (progress) progress(r);
            continue;
        }
        for (uint32_t i = 0; i < n; ++i) {
            SelftestResult r;
            r.provider = p.info.name;
            r.device = dev.id;
            r.seed = seed;
            try {
                kpr_selftest_case c = p.selftest_get(dev.desc, i);
                r.case_name = c.name[0] ? c.name : fmt::format("case {}", i);
                if (!opts.filter.empty() && r.case_name.find(opts.filter) == std::string::npos) continue;
                r.kind = c.kind == KPR_SELFTEST_PARITY ? "parity" : c.kind == KPR_SELFTEST_INTERNAL ? "internal" : "reference";
                r.tolerance = c.tolerance;
                if (c.kind == KPR_SELFTEST_INTERNAL) {
                    double measured = 0;
                    auto t0 = std::chrono::steady_clock::now();
                    std::string msg = p.selftest_run(dev.desc, i, &measured);
                    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                    r.error = measured;
                    r.act_rounding = "-";
                    if (!msg.empty()) r.outcome = SelftestResult::Outcome::Failed, r.message = msg;
                } else {
                    kpr_op_desc op = c.op;
                    op.struct_size = sizeof op;
                    validate(op);
                    r.op = describe(op);
                    auto rounding = static_cast<formats::ActRounding>(c.act_rounding);
                    if (c.act_rounding > KPR_ACT_Q8_K) throw Error(fmt::format("unknown act_rounding {}", c.act_rounding));
                    r.act_rounding = formats::act_rounding_name(rounding);
                    auto store = rt.options(p, dev, c.options, c.n_options);
                    kpr_offer offer = p.query(op, dev.desc, *store);
                    if (!offer.accepted) {
                        r.outcome = SelftestResult::Outcome::Skipped;
                        r.message = fmt::format("declined its own case: {}", offer.reason);
                    } else {
                        uint64_t case_seed = mix(seed, hash_str(p.info.name + "/" + r.case_name));
                        CaseData data = make_data(op, case_seed, rounding);
                        std::vector<float> y = run_on(rt, p, dev, op, *store, data, &r.ms);
                        std::string bad;
                        r.error = rel_error(y, data.ref, &bad);
                        if (!bad.empty()) {
                            r.outcome = SelftestResult::Outcome::Failed;
                            r.message = bad;
                        } else if (!(r.error <= c.tolerance)) {
                            r.outcome = SelftestResult::Outcome::Failed;
                            r.message = fmt::format("error {:.3g} exceeds tolerance {:.3g}", r.error, c.tolerance);
                        }
                        if (rounding != formats::ActRounding::Float && bad.empty()) {
                            r.quantized_tolerance = c.quantized_tolerance;
                            r.quantized_error = rel_error(y, data.ref_q, &bad);
                            if (!(r.quantized_error <= c.quantized_tolerance) && r.outcome == SelftestResult::Outcome::Passed) {
                                r.outcome = SelftestResult::Outcome::Failed;
                                r.message = fmt::format("error {:.3g} against the {}-rounded reference exceeds {:.3g}",
                                                        r.quantized_error, r.act_rounding, c.quantized_tolerance);
                            }
                        }
                        if (c.kind == KPR_SELFTEST_PARITY && r.outcome == SelftestResult::Outcome::Passed) {
                            std::string other = c.parity_provider ? std::string(c.parity_provider, strnlen(c.parity_provider, 64)) : "";
                            auto q = rt.find(other);
                            if (!q || q->info.device_kind != dev.desc.kind) {
                                r.outcome = SelftestResult::Outcome::Skipped;
                                r.message = fmt::format("parity provider '{}' is not loaded", other);
                            } else {
                                double ms2 = 0;
                                auto qstore = rt.options(*q, dev);
                                kpr_offer o2 = q->query(op, dev.desc, *qstore);
                                if (!o2.accepted) {
                                    r.outcome = SelftestResult::Outcome::Failed;
                                    r.message = fmt::format("parity provider '{}' declines: {}", other, o2.reason);
                                } else {
                                    std::vector<float> y2 = run_on(rt, *q, dev, op, *qstore, data, &ms2);
                                    size_t diff = 0, first = 0;
                                    for (size_t k = 0; k < y.size(); ++k)
                                        if (std::memcmp(&y[k], &y2[k], 4) != 0 && diff++ == 0) first = k;
                                    if (diff) {
                                        r.outcome = SelftestResult::Outcome::Failed;
                                        r.message = fmt::format("not bitwise identical to '{}': {} of {} outputs differ (first at {}: {:a} vs {:a})",
                                                                other, diff, y.size(), first, y[first], y2[first]);
                                    }
                                }
                            }
                        }
                    }
                }
            } catch (const std::exception &e) {
                r.outcome = SelftestResult::Outcome::Failed;
                r.message = e.what();
            }
            results.push_back(r);
            if (progress) progress(r);
        }
    }
    return results;
}

} // namespace kpr

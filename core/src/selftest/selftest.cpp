#include <kpr/formats.hpp>
#include <kpr/selftest.hpp>

#include "device/cuda_driver.hpp"
#include "device/memory_check.hpp"
#include "util/json_text.hpp"
#include "runtime/internal.hpp"
#include "util/atomic_file.hpp"

#include <kpr/calibration.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <optional>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmath>
#include <cstring>
#include <new>
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

// What make_data and run_on allocate for `op`, added up and checked before they do, so that a provider's
// case with a shape too large for this machine fails with the op and the bytes instead of std::bad_alloc.
void check_case_memory(const kpr_op_desc &op, const Device &dev, bool rounded, const std::string &what) {
    using detail::sat_add;
    using detail::sat_mul;
    const uint32_t used = op.kind == KPR_OP_GEMV_GROUPED ? op.n_used : 1;
    const uint64_t w = weight_bytes(op);
    const uint64_t xn = sat_mul(uint64_t(op.ncols) * op.x_slots, op.cols);
    const uint64_t yn = sat_mul(uint64_t(op.ncols) * used, op.rows);
    // make_data: weights, x (and its rounded copy), ref (and ref_q) in double; run_on: y's NaN fill and
    // the result, twice for a parity case.
    uint64_t host = sat_add(w, sat_mul(xn, rounded ? 8 : 4));
    host = sat_add(host, sat_mul(yn, rounded ? 16 : 8));
    host = sat_add(host, sat_mul(yn, 12));
    // The guarded copies that the provider reads and writes.
    const uint64_t guarded = sat_add(sat_add(w, sat_mul(xn, 4)), sat_mul(yn, 4));
    if (dev.is_cuda()) detail::check_device_bytes(dev, guarded, what + " (weights, x and y on the device)");
    else host = sat_add(host, guarded);
    detail::check_host_bytes(host, what + " (weights, x, y and the double-precision reference)");
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

namespace {

// What a case says of itself, read and checked the same way by a run (run_case) and a listing (list_selftests).
std::string case_name_of(const kpr_selftest_case &c, uint32_t i) { return c.name[0] ? c.name : fmt::format("case {}", i); }
const char *case_kind_name(uint32_t kind) {
    return kind == KPR_SELFTEST_PARITY ? "parity" : kind == KPR_SELFTEST_INTERNAL ? "internal" : "reference";
}
kpr_op_desc case_op(const kpr_selftest_case &c) { // throws kpr::Error for an op that breaks the ABI
    kpr_op_desc op = c.op;
    op.struct_size = sizeof op;
    validate(op);
    return op;
}
formats::ActRounding case_rounding(const kpr_selftest_case &c) {
    if (c.act_rounding > KPR_ACT_Q8_K) throw Error(fmt::format("unknown act_rounding {}", c.act_rounding));
    return static_cast<formats::ActRounding>(c.act_rounding);
}
std::string case_parity_provider(const kpr_selftest_case &c) {
    return c.parity_provider ? std::string(c.parity_provider, strnlen(c.parity_provider, 64)) : "";
}

// One case, in this process. nullopt when the filter excludes it.
std::optional<SelftestResult> run_case(const RuntimeImpl &rt, const LoadedProvider &p, const Device &dev,
                                       const SelftestOptions &opts, uint64_t seed, uint32_t i) {
    SelftestResult r;
    r.provider = p.info.name;
    r.device = dev.id;
    r.seed = seed;
    try {
        kpr_selftest_case c = p.selftest_get(dev.desc, i);
        r.case_name = case_name_of(c, i);
        if (!opts.filter.empty() && r.case_name.find(opts.filter) == std::string::npos) return std::nullopt;
        r.kind = case_kind_name(c.kind);
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
            const kpr_op_desc op = case_op(c);
            r.op = describe(op);
            const formats::ActRounding rounding = case_rounding(c);
            r.act_rounding = formats::act_rounding_name(rounding);
            auto store = rt.options(p, dev, c.options, c.n_options);
            kpr_offer offer = p.query(op, dev.desc, *store);
            if (!offer.accepted) {
                r.outcome = SelftestResult::Outcome::Skipped;
                r.message = fmt::format("declined its own case: {}", offer.reason);
            } else {
                uint64_t case_seed = mix(seed, hash_str(p.info.name + "/" + r.case_name));
                check_case_memory(op, dev, rounding != formats::ActRounding::Float,
                                  fmt::format("case '{}': {}", r.case_name, r.op));
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
                    const std::string other = case_parity_provider(c);
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
    } catch (const std::bad_alloc &) {
        r.outcome = SelftestResult::Outcome::Failed;
        r.message = r.op.empty() ? "out of memory (std::bad_alloc)"
                                 : fmt::format("{}: out of memory (std::bad_alloc)", r.op);
    } catch (const std::exception &e) {
        r.outcome = SelftestResult::Outcome::Failed;
        r.message = e.what();
        if (r.case_name.empty()) r.case_name = fmt::format("case {}", i); // selftest_get itself failed
    }
    return r;
}

SelftestResult failed_result(const std::string &provider, const Device &dev, const std::string &case_name,
                             uint64_t seed, const std::string &message) {
    SelftestResult r;
    r.provider = provider;
    r.device = dev.id;
    r.case_name = case_name;
    r.seed = seed;
    r.outcome = SelftestResult::Outcome::Failed;
    r.message = message;
    return r;
}

struct BypassGuard {
    BypassGuard() { detail::set_quarantine_bypass(true); }
    ~BypassGuard() { detail::set_quarantine_bypass(false); }
};

} // namespace

// ---- results as JSON lines (the contained runner's protocol) ---------------------------------------

namespace {

nlohmann::json to_json(const SelftestResult &r) {
    return {{"provider", r.provider}, {"device", r.device}, {"case", r.case_name}, {"kind", r.kind}, {"op", r.op},
            {"error", std::isfinite(r.error) ? r.error : 1e308}, {"tolerance", r.tolerance},
            {"quantized_error", std::isfinite(r.quantized_error) ? r.quantized_error : 1e308},
            {"quantized_tolerance", r.quantized_tolerance}, {"act_rounding", r.act_rounding}, {"ms", r.ms},
            {"seed", r.seed}, {"outcome", int(r.outcome)}, {"message", r.message}};
}

SelftestResult from_json(const nlohmann::json &j) {
    SelftestResult r;
    r.provider = j.at("provider").get<std::string>();
    r.device = j.at("device").get<std::string>();
    r.case_name = j.at("case").get<std::string>();
    r.kind = j.at("kind").get<std::string>();
    r.op = j.at("op").get<std::string>();
    r.error = j.at("error").get<double>();
    if (r.error >= 1e308) r.error = INFINITY;
    r.tolerance = j.at("tolerance").get<double>();
    r.quantized_error = j.at("quantized_error").get<double>();
    if (r.quantized_error >= 1e308) r.quantized_error = INFINITY;
    r.quantized_tolerance = j.at("quantized_tolerance").get<double>();
    r.act_rounding = j.at("act_rounding").get<std::string>();
    r.ms = j.at("ms").get<double>();
    r.seed = j.at("seed").get<uint64_t>();
    int o = j.at("outcome").get<int>();
    r.outcome = o == 0 ? SelftestResult::Outcome::Passed : o == 1 ? SelftestResult::Outcome::Failed : SelftestResult::Outcome::Skipped;
    r.message = j.at("message").get<std::string>();
    return r;
}

void write_line(int fd, const std::string &line) {
    std::string l = line + "\n";
    size_t off = 0;
    while (off < l.size()) {
        ssize_t n = ::write(fd, l.data() + off, l.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(3);  // the parent is gone
        off += size_t(n);
    }
}

std::string signal_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    default: return fmt::format("signal {}", sig);
    }
}

// One child run of a provider's cases from `first`; appends what it learnt. Returns the index to resume
// at, or nullopt when the provider is done (finished, or failed in a way resuming cannot help).
std::optional<uint32_t> run_child_once(const LoadedProvider &p, const Device &dev, const SelftestOptions &opts,
                                       uint64_t seed, uint32_t first, std::vector<SelftestResult> &out,
                                       const std::function<void(const SelftestResult &)> &progress) {
    const std::string &name = p.info.name;
    auto emit = [&](SelftestResult r) {
        out.push_back(r);
        if (progress) progress(out.back());
    };
    if (opts.child_command.empty()) {
        emit(failed_result(name, dev, "(contained)", seed, "contained self-tests need a runner (SelftestOptions::child_command)"));
        return std::nullopt;
    }
    std::vector<std::string> args = opts.child_command;
    for (std::string a : {"--provider", name.c_str()}) args.push_back(a);
    args.insert(args.end(), {"--device", dev.id, "--seed", std::to_string(seed), "--from", std::to_string(first),
                             "--result-fd", "3"});
    if (!opts.filter.empty()) args.insert(args.end(), {"--filter", opts.filter});
    std::vector<char *> argv;
    for (auto &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        emit(failed_result(name, dev, "(contained)", seed, fmt::format("cannot create a pipe: {}", std::strerror(errno))));
        return std::nullopt;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        emit(failed_result(name, dev, "(contained)", seed, fmt::format("cannot fork: {}", std::strerror(errno))));
        return std::nullopt;
    }
    if (pid == 0) {
        // The child: only async-signal-safe calls until exec.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        setpgid(0, 0);
        if (pfd[1] == 3) {
            fcntl(3, F_SETFD, 0);
        } else {
            dup2(pfd[1], 3);
        }
        dup2(2, 1);  // the child's stdout (a chatty provider) must not mix into the parent's output
        execv(argv[0], argv.data());
        _exit(127);
    }
    close(pfd[1]);
    int rfd = pfd[0];

    std::string buf;
    int64_t count = -1;
    int64_t current = -1;          // the case between "B" and "R"
    std::string current_name;      // its name when known
    bool ended = false, timed_out = false;
    auto now = [] { return std::chrono::steady_clock::now(); };
    auto deadline = now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(opts.startup_timeout_s + opts.case_timeout_s));
    auto case_deadline = [&] {
        return now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(opts.case_timeout_s));
    };
    auto handle = [&](const std::string &line) {
        if (line.size() < 1) return;
        char tag = line[0];
        std::string rest = line.size() > 2 ? line.substr(2) : "";
        if (tag == 'T') {
            count = std::strtoll(rest.c_str(), nullptr, 10);
        } else if (tag == 'B') {
            current = std::strtoll(rest.c_str(), nullptr, 10);
            current_name = fmt::format("case {}", current);
            deadline = case_deadline();
        } else if (tag == 'N') {
            current_name = rest;
        } else if (tag == 'R') {
            try {
                SelftestResult r = from_json(nlohmann::json::parse(rest));
                emit(r);
            } catch (const std::exception &e) {
                emit(failed_result(name, dev, current_name, seed, fmt::format("unreadable result from the self-test runner: {}", e.what())));
            }
            current = -1;
        } else if (tag == 'X') {
            current = -1;  // filtered out
        } else if (tag == 'E') {
            ended = true;
        }
    };
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now()).count();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        pollfd pf{rfd, POLLIN, 0};
        int pr = poll(&pf, 1, int(std::min<int64_t>(left, 1000)));
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) continue;
        char tmp[4096];
        ssize_t n = read(rfd, tmp, sizeof tmp);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // EOF: the child exited (or closed the pipe)
        buf.append(tmp, size_t(n));
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos) {
            handle(buf.substr(0, nl));
            buf.erase(0, nl + 1);
        }
    }
    close(rfd);
    int status = 0;
    if (!timed_out) {
        // The pipe closed: the child is exiting. One that closed it and kept running gets the rest of its time.
        for (;;) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) break;
            if (w < 0 && errno != EINTR) break;
            if (now() >= deadline) {
                timed_out = true;
                break;
            }
            usleep(10000);
        }
    }
    if (timed_out) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    std::string where = current >= 0 ? fmt::format("in case {}", current_name)
                        : count < 0  ? std::string("while starting up and enumerating the cases")
                                     : std::string("between cases");
    std::string what;
    if (timed_out) {
        what = current >= 0 ? fmt::format("hung: no result within {:g} s {} (killed)", opts.case_timeout_s, where)
                            : fmt::format("hung: no answer within {:g} s {} (killed)", opts.startup_timeout_s + opts.case_timeout_s, where);
    } else if (WIFSIGNALED(status)) {
        what = fmt::format("crashed: signal {} {} ({})", WTERMSIG(status), where, signal_name(WTERMSIG(status)));
    } else if (WIFEXITED(status) && (WEXITSTATUS(status) != 0 || !ended)) {
        what = WEXITSTATUS(status) == 127 && count < 0
                   ? fmt::format("could not start the self-test runner {}", opts.child_command.front())
                   : fmt::format("exited with status {} {}{}", WEXITSTATUS(status), where, ended ? "" : " (without finishing)");
    }
    if (what.empty()) return std::nullopt;  // a clean finish
    emit(failed_result(name, dev, current >= 0 ? current_name : "(runner)", seed, what));
    if (current >= 0 && count >= 0 && current + 1 < count) return uint32_t(current + 1);
    return std::nullopt;
}

} // namespace

namespace {
// The device of opts, refused when simulated, and opts.provider checked: what run_selftests and list_selftests share
const Device &selftest_device(const RuntimeImpl &rt, const SelftestOptions &opts) {
    const Device &dev = rt.device(opts.device);
    if (dev.desc.simulated) throw Error(fmt::format("cannot run self-tests on {}: a simulated device", dev.id));
    if (!opts.provider.empty() && !rt.find(opts.provider)) throw Error(fmt::format("unknown provider '{}'", opts.provider));
    return dev;
}
// whether a loaded provider's cases belong to a run (or listing) on dev with opts
bool selftest_takes(const LoadedProvider &p, const Device &dev, const SelftestOptions &opts) {
    return p.ok() && p.info.device_kind == dev.desc.kind && (opts.provider.empty() || p.info.name == opts.provider);
}
} // namespace

std::vector<SelftestResult> run_selftests(const Runtime &rt_, const SelftestOptions &opts,
                                          const std::function<void(const SelftestResult &)> &progress) {
    const RuntimeImpl &rt = *rt_.impl();
    const Device &dev = selftest_device(rt, opts);
    if (opts.contained && !(opts.case_timeout_s > 0))
        throw Error(fmt::format("self-test case time limit {} s: must be more than 0", opts.case_timeout_s), 2);
    uint64_t seed = opts.seed ? opts.seed : std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
    BypassGuard bypass;
    std::vector<SelftestResult> results;
    for (auto &pp : rt.providers) {
        if (!selftest_takes(*pp, dev, opts)) continue;
        const LoadedProvider &p = *pp;
        if (opts.contained) {
            std::optional<uint32_t> next = opts.first_case;
            while (next) next = run_child_once(p, dev, opts, seed, *next, results, progress);
            continue;
        }
        uint32_t n = 0;
        try {
            n = p.selftest_count(dev.desc);
        } catch (const Error &e) {
            results.push_back(failed_result(p.info.name, dev, "(enumerate)", seed, e.what()));
            if (progress) progress(results.back());
            continue;
        }
        for (uint32_t i = opts.first_case; i < n; ++i) {
            std::optional<SelftestResult> r = run_case(rt, p, dev, opts, seed, i);
            if (!r) continue;
            results.push_back(*r);
            if (progress) progress(*r);
        }
    }
    return results;
}

std::vector<SelftestCaseInfo> list_selftests(const Runtime &rt_, const SelftestOptions &opts) {
    const RuntimeImpl &rt = *rt_.impl();
    const Device &dev = selftest_device(rt, opts);
    BypassGuard bypass;
    std::vector<SelftestCaseInfo> out;
    for (auto &pp : rt.providers) {
        if (!selftest_takes(*pp, dev, opts)) continue;
        const LoadedProvider &p = *pp;
        SelftestCaseInfo base;
        base.provider = p.info.name;
        base.device = dev.id;
        uint32_t n = 0;
        try {
            n = p.selftest_count(dev.desc);
        } catch (const Error &e) {
            SelftestCaseInfo ci = base;
            ci.case_name = "(enumerate)";
            ci.error = e.what();
            out.push_back(ci);
            continue;
        }
        for (uint32_t i = 0; i < n; ++i) {
            SelftestCaseInfo ci = base;
            try {
                const kpr_selftest_case c = p.selftest_get(dev.desc, i);
                ci.case_name = case_name_of(c, i);
                if (!opts.filter.empty() && ci.case_name.find(opts.filter) == std::string::npos) continue;
                ci.kind = case_kind_name(c.kind);
                ci.tolerance = c.tolerance;
                if (c.kind == KPR_SELFTEST_INTERNAL) {
                    ci.act_rounding = "-";
                } else {
                    ci.op = describe(case_op(c));
                    const formats::ActRounding rounding = case_rounding(c);
                    ci.act_rounding = formats::act_rounding_name(rounding);
                    if (rounding != formats::ActRounding::Float) ci.quantized_tolerance = c.quantized_tolerance;
                    if (c.kind == KPR_SELFTEST_PARITY) ci.parity_provider = case_parity_provider(c);
                }
            } catch (const Error &e) {
                // the filter cannot be applied to a case without a usable name: it is listed, as a run reports it
                if (ci.case_name.empty()) ci.case_name = fmt::format("case {}", i);
                ci.error = e.what();
            }
            out.push_back(ci);
        }
    }
    return out;
}

int run_selftest_child(const Runtime &rt_, const SelftestOptions &opts, int fd) {
    const RuntimeImpl &rt = *rt_.impl();
    signal(SIGPIPE, SIG_DFL);
    BypassGuard bypass;
    const Device &dev = rt.device(opts.device);
    auto p = rt.find(opts.provider);
    if (!p) throw Error(fmt::format("selftest-child: unknown provider '{}'", opts.provider));
    if (!opts.seed) throw Error("selftest-child: needs --seed", 2);
    uint32_t n = 0;
    try {
        n = p->selftest_count(dev.desc);
    } catch (const Error &e) {
        write_line(fd, "T 0");
        write_line(fd, "R " + json_text(to_json(failed_result(p->info.name, dev, "(enumerate)", opts.seed, e.what()))));
        write_line(fd, "E");
        return 0;
    }
    write_line(fd, fmt::format("T {}", n));
    for (uint32_t i = opts.first_case; i < n; ++i) {
        write_line(fd, fmt::format("B {}", i));
        try {
            kpr_selftest_case c = p->selftest_get(dev.desc, i);
            write_line(fd, "N " + std::string(c.name[0] ? c.name : fmt::format("case {}", i).c_str()));
        } catch (const Error &) {
        }
        std::optional<SelftestResult> r = run_case(rt, *p, dev, opts, opts.seed, i);
        write_line(fd, r ? "R " + json_text(to_json(*r)) : std::string("X"));
    }
    write_line(fd, "E");
    return 0;
}

// ---- the state file (quarantine) --------------------------------------------------------------------

bool secure_execution_active();  // loader.cpp

std::filesystem::path selftest_state_file(const Config &config) {
    if (config.state_file) return *config.state_file;
    if (secure_execution_active()) return {};
    const char *xdg = std::getenv("XDG_STATE_HOME");
    if (xdg && *xdg == '/') return std::filesystem::path(xdg) / "kpr" / "selftest-state.json";
    const char *home = std::getenv("HOME");
    if (home && *home == '/') return std::filesystem::path(home) / ".local" / "state" / "kpr" / "selftest-state.json";
    return {};
}

std::vector<SelftestRecord> read_selftest_state(const std::filesystem::path &file, std::string *warning) {
    std::vector<SelftestRecord> out;
    std::error_code ec;
    if (file.empty() || !std::filesystem::exists(file, ec)) return out;
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        if (warning) *warning = fmt::format("{}: cannot read the self-test state file", file.string());
        return out;
    }
    try {
        nlohmann::json j = nlohmann::json::parse(in);
        for (auto &e : j.at("records")) {
            SelftestRecord r;
            r.provider = e.at("provider").get<std::string>();
            r.device = e.at("device").get<std::string>();
            r.file = e.value("file", "");
            r.sha256 = e.at("sha256").get<std::string>();
            r.reason = e.value("reason", "");
            r.when = e.value("when", "");
            r.host = e.value("host", "");
            out.push_back(r);
        }
    } catch (const std::exception &e) {
        if (warning) *warning = fmt::format("{}: malformed self-test state file, ignored: {}", file.string(), e.what());
        out.clear();
    }
    return out;
}

std::string record_selftest_results(const Runtime &rt, const std::vector<SelftestResult> &results, bool complete) {
    std::filesystem::path file = selftest_state_file(rt.impl()->config);
    if (file.empty()) return "no place to record self-test failures (set [runtime] state_file)";
    std::string warning;
    std::vector<SelftestRecord> records = read_selftest_state(file, &warning);
    // Per (provider, device): the first failure, or none.
    std::map<std::pair<std::string, std::string>, const SelftestResult *> ran;
    for (auto &r : results) {
        auto &slot = ran[{r.provider, r.device}];
        if (r.outcome == SelftestResult::Outcome::Failed && !slot) slot = &r;
    }
    bool changed = false;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    std::time_t t = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    for (auto &entry : ran) {
        const auto &key = entry.first;  // not a structured binding: clang 14 cannot capture one in a lambda
        const SelftestResult *failure = entry.second;
        auto it = std::find_if(records.begin(), records.end(),
                               [&](const SelftestRecord &r) { return r.provider == key.first && r.device == key.second; });
        if (!failure) {
            if (complete && it != records.end()) records.erase(it), changed = true;
            continue;
        }
        auto p = rt.loaded(key.first);
        if (!p) continue;
        SelftestRecord rec;
        rec.provider = key.first;
        rec.device = key.second;
        rec.file = p->info.file;
        try {
            rec.sha256 = calibration::sha256_file(p->info.file);
        } catch (const Error &e) {
            continue;
        }
        rec.reason = fmt::format("{}: {}", failure->case_name, failure->message);
        rec.when = when;
        rec.host = host;
        if (it != records.end()) *it = rec;
        else records.push_back(rec);
        changed = true;
    }
    if (!changed) return warning;
    nlohmann::json j = {{"version", 1}, {"records", nlohmann::json::array()}};
    for (auto &r : records)
        j["records"].push_back({{"provider", r.provider}, {"device", r.device}, {"file", r.file}, {"sha256", r.sha256},
                                {"reason", r.reason}, {"when", r.when}, {"host", r.host}});
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    // The text is made before the temporary is created, so nothing can fail between the two.
    const std::string text = json_text(j, 2) + "\n";
    try {
        util::write_file_atomic(file.string(), text);
    } catch (const Error &e) {
        return fmt::format("{}: cannot write the self-test state file: {}", file.string(), e.what());
    }
    return warning;
}

} // namespace kpr

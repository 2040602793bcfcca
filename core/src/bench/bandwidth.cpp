// The device's read bandwidth, measured by kpr itself at the start of a bench run: the yardstick for
// bandwidth_fraction. CPU: a multi-threaded streaming read-sum. GPU: a hand-written PTX streaming-read
// kernel, JIT-compiled by the driver (the core links no CUDA toolkit), timed with events.
#include <kpr/bench.hpp>
#include <kpr/error.hpp>
#include <kpr/memory.hpp>

#include "bench/gpu_hold.hpp"
#include "device/cuda_driver.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

namespace kpr::bench {

namespace {

double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Each thread sums its slice with four independent accumulators (memory-bound long before the adds are).
uint64_t read_sum(const uint64_t *p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        a += p[i] ^ p[i + 4];
        b += p[i + 1] ^ p[i + 5];
        c += p[i + 2] ^ p[i + 6];
        d += p[i + 3] ^ p[i + 7];
    }
    for (; i < n; ++i) a += p[i];
    return a + b + c + d;
}

Bandwidth cpu_bandwidth(const Device &dev, const BandwidthOptions &o) {
    uint64_t bytes = o.bytes ? o.bytes : std::max<uint64_t>(512ull << 20, 4 * std::max(dev.desc.cache_l3_bytes, dev.desc.cache_l2_bytes));
    bytes = std::max<uint64_t>(bytes & ~uint64_t(4095), 4096);
    int threads = o.threads > 0 ? o.threads : (int)std::max<uint32_t>(1, dev.desc.cpu_threads);
    Buffer buf(dev, bytes);
    // Touch every page (with threads, so first-touch spreads pages the way the readers use them).
    size_t words = bytes / 8;
    auto *w = static_cast<uint64_t *>(buf.data());
    {
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([=] {
                size_t b = words * t / threads, e = words * (t + 1) / threads;
                for (size_t i = b; i < e; ++i) w[i] = i * 0x9E3779B97F4A7C15ull;
            });
        for (auto &t : ts) t.join();
    }
    std::vector<double> gbps;
    std::atomic<uint64_t> sink{0};
    for (int r = 0; r < std::max(1, o.reps) + 1; ++r) {  // the first pass warms up
        auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                size_t b = words * t / threads, e = words * (t + 1) / threads;
                sink += read_sum(w + b, e - b);
            });
        for (auto &t : ts) t.join();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r) gbps.push_back(bytes / s / 1e9);
    }
    Bandwidth out;
    out.device = dev.id;
    out.bytes = bytes;
    out.gbps = *std::max_element(gbps.begin(), gbps.end());
    out.median_gbps = median_of(gbps);
    out.method = fmt::format("cpu: {} thread{}, streaming read-sum of {} MiB, best of {}", threads, threads == 1 ? "" : "s",
                             bytes >> 20, gbps.size());
    if (sink.load() == 42) out.method += " ";  // keep the sums alive
    return out;
}

// 16-byte non-coherent loads in a grid-stride loop; the xor of everything is stored only when it equals a
// constant, so the JIT cannot drop the loads and nothing is written in practice.
// The header (.version/.target) is prepended at load time (load_ptx).
const char *kReadPtxBody = R"PTX(
.address_size 64

.visible .entry kpr_read_bw(
    .param .u64 p_src,
    .param .u64 p_n16,
    .param .u64 p_out
)
{
    .reg .pred %p<4>;
    .reg .b32 %r<24>;
    .reg .b64 %rd<16>;

    ld.param.u64 %rd1, [p_src];
    ld.param.u64 %rd2, [p_n16];
    ld.param.u64 %rd3, [p_out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd4, %rd4, %rd5;
    mul.wide.u32 %rd6, %r4, %r2;
    shl.b64 %rd9, %rd6, 4;
    mov.u32 %r10, 0;
    mov.u32 %r11, 0;
    setp.ge.u64 %p1, %rd4, %rd2;
    @%p1 bra DONE;
    shl.b64 %rd7, %rd4, 4;
    add.u64 %rd8, %rd1, %rd7;
    add.u64 %rd10, %rd4, %rd6;
LOOP2:
    setp.ge.u64 %p2, %rd10, %rd2;
    @%p2 bra TAIL;
    ld.global.nc.v4.u32 {%r5, %r6, %r7, %r8}, [%rd8];
    add.u64 %rd11, %rd8, %rd9;
    ld.global.nc.v4.u32 {%r12, %r13, %r14, %r15}, [%rd11];
    xor.b32 %r10, %r10, %r5;
    xor.b32 %r11, %r11, %r6;
    xor.b32 %r10, %r10, %r7;
    xor.b32 %r11, %r11, %r8;
    xor.b32 %r10, %r10, %r12;
    xor.b32 %r11, %r11, %r13;
    xor.b32 %r10, %r10, %r14;
    xor.b32 %r11, %r11, %r15;
    add.u64 %rd8, %rd11, %rd9;
    add.u64 %rd4, %rd10, %rd6;
    add.u64 %rd10, %rd4, %rd6;
    bra LOOP2;
TAIL:
    setp.ge.u64 %p3, %rd4, %rd2;
    @%p3 bra DONE;
    ld.global.nc.v4.u32 {%r5, %r6, %r7, %r8}, [%rd8];
    xor.b32 %r10, %r10, %r5;
    xor.b32 %r11, %r11, %r6;
    xor.b32 %r10, %r10, %r7;
    xor.b32 %r11, %r11, %r8;
DONE:
    xor.b32 %r10, %r10, %r11;
    setp.ne.u32 %p1, %r10, 12345;
    @%p1 bra END;
    st.global.u32 [%rd3], %r10;
END:
    ret;
}
)PTX";

// Loads `body` (PTX without its .version/.target header) on the current context: the oldest target first,
// newer ones when a driver refuses it (PTX for an older target JIT-compiles for any newer GPU).
cuda::CUmodule load_ptx(const Device &dev, const char *body, const char *what) {
    const cuda::Driver &drv = cuda::driver();
    const cuda::ModuleApi &api = cuda::module_api();
    if (!drv.loaded) throw Error("cannot run the " + std::string(what) + " kernel on " + dev.id + ": " + drv.why_not);
    if (!api.loaded)
        throw Error("cannot run the " + std::string(what) + " kernel on " + dev.id + ": the driver lacks cuModuleLoadDataEx/cuLaunchKernel");
    drv.make_current(dev.desc.ordinal);
    char log[4096] = {};
    int opt_keys[2] = {5 /* CU_JIT_ERROR_LOG_BUFFER */, 6 /* CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */};
    void *opt_vals[2] = {log, reinterpret_cast<void *>(uintptr_t(sizeof log))};
    std::string errors;
    for (const char *head : {".version 6.0\n.target sm_50\n", ".version 7.0\n.target sm_70\n", ".version 7.8\n.target sm_80\n"}) {
        std::string ptx = std::string(head) + body;
        log[0] = 0;
        cuda::CUmodule mod = nullptr;
        cuda::CUresult r = api.cuModuleLoadDataEx(&mod, ptx.c_str(), 2, opt_keys, opt_vals);
        if (r == 0) return mod;
        errors += fmt::format("[{}] {}: {} ", std::string(head).substr(0, std::string(head).size() - 1), drv.error_string(r), log);
    }
    throw Error(fmt::format("loading the {} PTX on {}: {}", what, dev.id, errors));
}

// One thread spins on the global nanosecond timer for p_ns nanoseconds.
const char *kHoldPtxBody = R"PTX(
.address_size 64

.visible .entry kpr_hold(
    .param .u64 p_ns
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [p_ns];
    mov.u64 %rd2, %globaltimer;
    add.u64 %rd3, %rd2, %rd1;
SPIN:
    mov.u64 %rd4, %globaltimer;
    setp.lt.u64 %p1, %rd4, %rd3;
    @%p1 bra SPIN;
    ret;
}
)PTX";

Bandwidth cuda_bandwidth(const Device &dev, const BandwidthOptions &o) {
    const cuda::Driver &drv = cuda::driver();
    const cuda::ModuleApi &api = cuda::module_api();
    cuda::CUmodule mod = load_ptx(dev, kReadPtxBody, "bandwidth"); // checks the driver, makes the context current
    uint64_t bytes = o.bytes ? o.bytes : std::max<uint64_t>(1ull << 30, 8 * dev.desc.l2_bytes);
    if (dev.desc.memory_bytes) bytes = std::min<uint64_t>(bytes, dev.desc.memory_bytes / 4);
    bytes = std::max<uint64_t>(bytes & ~uint64_t(255), 256);

    struct Unload {
        const cuda::ModuleApi &a;
        cuda::CUmodule m;
        ~Unload() { a.cuModuleUnload(m); }
    } unload{api, mod};
    cuda::CUfunction fn = nullptr;
    drv.check(api.cuModuleGetFunction(&fn, mod, "kpr_read_bw"), "cuModuleGetFunction(kpr_read_bw)");

    cuda::DeviceBuffer src(dev.desc.ordinal, bytes), out(dev.desc.ordinal, 16);
    src.fill(0x5a);
    Stream stream(dev);
    unsigned long long p_src = reinterpret_cast<uintptr_t>(src.ptr()), n16 = bytes / 16,
                       p_out = reinterpret_cast<uintptr_t>(out.ptr());
    void *params[3] = {&p_src, &n16, &p_out};
    unsigned block = 512, grid = std::max<uint32_t>(1, dev.desc.sm_count) * 4;
    std::vector<double> gbps;
    for (int r = 0; r < std::max(1, o.reps) + 1; ++r) {
        stream.record_start();
        drv.check(api.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, static_cast<cuda::CUstream>(stream.handle()), params,
                                     nullptr),
                  "cuLaunchKernel(kpr_read_bw)");
        double ms = stream.elapsed_ms();
        if (r) gbps.push_back(bytes / (ms * 1e-3) / 1e9);
    }
    Bandwidth b;
    b.device = dev.id;
    b.bytes = bytes;
    b.gbps = *std::max_element(gbps.begin(), gbps.end());
    b.median_gbps = median_of(gbps);
    b.peak_gbps = dev.desc.peak_bandwidth_gbps;
    b.method = fmt::format("cuda: PTX streaming read (16-byte ld.global.nc, {}x{} threads) of {} MiB, events, best of {}",
                           grid, block, bytes >> 20, gbps.size());
    return b;
}

} // namespace

GpuHold::GpuHold(const Device &dev) {
    if (!dev.is_cuda() || dev.desc.simulated) throw Error("GpuHold needs a real CUDA device, not " + dev.id);
    mod_ = load_ptx(dev, kHoldPtxBody, "hold");
    cuda::CUfunction fn = nullptr;
    cuda::CUresult r = cuda::module_api().cuModuleGetFunction(&fn, static_cast<cuda::CUmodule>(mod_), "kpr_hold");
    if (r != 0) {
        cuda::module_api().cuModuleUnload(static_cast<cuda::CUmodule>(mod_));
        throw Error("cuModuleGetFunction(kpr_hold): " + cuda::driver().error_string(r));
    }
    fn_ = fn;
}

GpuHold::~GpuHold() {
    if (mod_) cuda::module_api().cuModuleUnload(static_cast<cuda::CUmodule>(mod_));
}

void GpuHold::hold(void *stream, double ms) const {
    unsigned long long ns = static_cast<unsigned long long>(std::max(0.0, ms) * 1e6);
    void *params[1] = {&ns};
    cuda::driver().check(cuda::module_api().cuLaunchKernel(static_cast<cuda::CUfunction>(fn_), 1, 1, 1, 1, 1, 1, 0,
                                                            static_cast<cuda::CUstream>(stream), params, nullptr),
                         "cuLaunchKernel(kpr_hold)");
}

Bandwidth measure_read_bandwidth(const Device &device, const BandwidthOptions &opts) {
    if (device.desc.simulated) throw Error(fmt::format("cannot measure {}: it is a simulated device", device.id));
    return device.is_cuda() ? cuda_bandwidth(device, opts) : cpu_bandwidth(device, opts);
}

} // namespace kpr::bench

// ---- conditions and small parsers -----------------------------------------------------------------
namespace kpr::bench {

std::vector<std::pair<std::string, std::string>> conditions(const Runtime &rt, const Device &d) {
    std::vector<std::pair<std::string, std::string>> c;
    std::time_t now = std::time(nullptr);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    c.emplace_back("date", buf);
    c.emplace_back("kpr", kpr::version());
    c.emplace_back("device", d.id);
    c.emplace_back("device_name", d.desc.name);
    if (d.is_cuda()) {
        c.emplace_back("uuid", d.desc.uuid);
        c.emplace_back("compute_capability", fmt::format("{}.{}", d.desc.cc_major, d.desc.cc_minor));
        c.emplace_back("sm_count", std::to_string(d.desc.sm_count));
        c.emplace_back("driver", fmt::format("{}.{}", d.desc.driver_version / 1000, (d.desc.driver_version % 1000) / 10));
        c.emplace_back("memory", fmt::format("{:.1f} GiB", d.desc.memory_bytes / double(1ull << 30)));
        c.emplace_back("l2", fmt::format("{} MiB", d.desc.l2_bytes >> 20));
        c.emplace_back("peak_bandwidth_spec_gbps", fmt::format("{:.0f}", d.desc.peak_bandwidth_gbps));
        const cuda::Driver &drv = cuda::driver();
        if (drv.loaded && !d.desc.simulated) {
            cuda::CUdevice dev;
            int sm_khz = 0, mem_khz = 0;
            if (drv.cuDeviceGet(&dev, d.desc.ordinal) == 0) {
                drv.cuDeviceGetAttribute(&sm_khz, 13 /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE */, dev);
                drv.cuDeviceGetAttribute(&mem_khz, 36 /* CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE */, dev);
            }
            c.emplace_back("clocks", fmt::format("SM {} MHz, memory {} MHz (maximum clocks as the driver reports them; "
                                                 "current clocks need NVML)",
                                                 sm_khz / 1000, mem_khz / 1000));
        }
    } else {
        c.emplace_back("cpu_threads", std::to_string(d.desc.cpu_threads));
        c.emplace_back("cpu_cores", std::to_string(d.desc.cpu_cores));
        c.emplace_back("cpu_features", cpu_feature_names(d.desc.cpu_features));
        c.emplace_back("caches", fmt::format("L2 {} KiB/core, L3 {} MiB", d.desc.cache_l2_bytes >> 10, d.desc.cache_l3_bytes >> 20));
        if (std::FILE *f = std::fopen("/proc/cpuinfo", "r")) {
            char line[256];
            while (std::fgets(line, sizeof line, f))
                if (std::strncmp(line, "cpu MHz", 7) == 0) {
                    const char *v = std::strchr(line, ':');
                    std::string s = v ? v + 1 : "";
                    s.erase(0, s.find_first_not_of(' '));
                    s.erase(s.find_last_not_of("\n ") + 1);
                    c.emplace_back("clock", s + " MHz (cpu0, /proc/cpuinfo)");
                    break;
                }
            std::fclose(f);
        }
    }
    if (std::FILE *f = std::fopen("/proc/loadavg", "r")) {
        char line[128] = {};
        if (std::fgets(line, sizeof line, f)) {
            std::string s = line;
            s.erase(s.find_last_not_of("\n ") + 1);
            c.emplace_back("load_average", s);
        }
        std::fclose(f);
    }
    std::vector<std::string> ps;
    for (auto &p : rt.providers())
        if (p.state == ProviderState::Loaded) ps.push_back(p.name + " " + p.version);
    c.emplace_back("providers", fmt::format("{}", fmt::join(ps, ", ")));
    return c;
}

std::vector<uint32_t> parse_ncols(const std::string &text) {
    std::vector<uint32_t> out;
    auto bad = [&] {
        return Error(fmt::format("--ncols: '{}' is not a list of 1..{} (\"1-8\", \"1,8\", \"1,2,4-8\")", text, KPR_MAX_NCOLS), 2);
    };
    size_t i = 0;
    while (i <= text.size()) {
        size_t j = text.find(',', i);
        if (j == std::string::npos) j = text.size();
        std::string part = text.substr(i, j - i);
        if (part.empty()) throw bad();
        unsigned a = 0, b = 0;
        char extra = 0;
        if (std::sscanf(part.c_str(), "%u-%u%c", &a, &b, &extra) == 2) {
        } else if (std::sscanf(part.c_str(), "%u%c", &a, &extra) == 1) {
            b = a;
        } else {
            throw bad();
        }
        if (a < 1 || b > KPR_MAX_NCOLS || a > b) throw bad();
        for (unsigned k = a; k <= b; ++k)
            if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
        i = j + 1;
    }
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace kpr::bench

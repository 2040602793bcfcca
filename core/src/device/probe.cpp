// Probing the machine: the CPU through cpuid and sysfs, NVIDIA GPUs through the driver API.
#include "device/probe.hpp"
#include "device/cuda_driver.hpp"

#include <kpr/error.hpp>

#include <cpuid.h>
#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <fstream>
#include <optional>
#include <set>

namespace kpr {

namespace {

uint64_t read_cache_size(int index) {
    std::ifstream f(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", index));
    std::string s;
    if (!(f >> s) || s.empty()) return 0;
    uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    char unit = s.back();
    if (unit == 'K') v <<= 10;
    else if (unit == 'M') v <<= 20;
    return v;
}

int read_cache_level(int index, std::string *type) {
    std::ifstream lf(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/level", index));
    std::ifstream tf(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/type", index));
    int level = 0;
    if (!(lf >> level)) return 0;
    tf >> *type;
    return level;
}

void copy_name(char (&dst)[128], const std::string &s) {
    std::snprintf(dst, sizeof dst, "%s", s.c_str());
}

} // namespace

std::string cpu_feature_names(uint64_t f) {
    static const std::pair<uint64_t, const char *> names[] = {
        {KPR_CPU_SSE42, "sse4.2"},     {KPR_CPU_AVX, "avx"},           {KPR_CPU_AVX2, "avx2"},
        {KPR_CPU_FMA, "fma"},          {KPR_CPU_F16C, "f16c"},         {KPR_CPU_BMI2, "bmi2"},
        {KPR_CPU_AVX512F, "avx512f"},  {KPR_CPU_AVX512BW, "avx512bw"}, {KPR_CPU_AVX512VL, "avx512vl"},
        {KPR_CPU_AVX512DQ, "avx512dq"}, {KPR_CPU_AVX512VNNI, "avx512vnni"}, {KPR_CPU_AVX512BF16, "avx512bf16"},
        {KPR_CPU_AVXVNNI, "avxvnni"}};
    std::string out;
    for (auto &[bit, name] : names)
        if (f & bit) out += (out.empty() ? "" : " ") + std::string(name);
    return out;
}

Device probe_cpu() {
    Device d;
    d.id = "cpu";
    d.desc.struct_size = sizeof(kpr_device_desc);
    d.desc.kind = KPR_DEVICE_CPU;
    unsigned a, b, c, e;
    uint64_t f = 0;
#if defined(__x86_64__) || defined(__i386__)
    if (__get_cpuid(1, &a, &b, &c, &e)) {
        bool osxsave = c & (1u << 27);
        uint64_t xcr0 = 0;
        if (osxsave) {
            uint32_t lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            xcr0 = (uint64_t(hi) << 32) | lo;
        }
        bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
        if (c & (1u << 20)) f |= KPR_CPU_SSE42;
        if (ymm && (c & (1u << 28))) f |= KPR_CPU_AVX;
        if (ymm && (c & (1u << 12))) f |= KPR_CPU_FMA;
        if (ymm && (c & (1u << 29))) f |= KPR_CPU_F16C;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &e)) {
            if (ymm && (b & (1u << 5))) f |= KPR_CPU_AVX2;
            if (b & (1u << 8)) f |= KPR_CPU_BMI2;
            if (zmm && (b & (1u << 16))) f |= KPR_CPU_AVX512F;
            if (zmm && (b & (1u << 17))) f |= KPR_CPU_AVX512DQ;
            if (zmm && (b & (1u << 30))) f |= KPR_CPU_AVX512BW;
            if (zmm && (b & (1u << 31))) f |= KPR_CPU_AVX512VL;
            if (zmm && (c & (1u << 11))) f |= KPR_CPU_AVX512VNNI;
        }
        if (__get_cpuid_count(7, 1, &a, &b, &c, &e)) {
            if (ymm && (a & (1u << 4))) f |= KPR_CPU_AVXVNNI;
            if (zmm && (a & (1u << 5))) f |= KPR_CPU_AVX512BF16;
        }
    }
    char brand[49] = {};
    if (__get_cpuid(0x80000000, &a, &b, &c, &e) && a >= 0x80000004) {
        for (unsigned i = 0; i < 3; ++i) {
            __get_cpuid(0x80000002 + i, &a, &b, &c, &e);
            std::memcpy(brand + 16 * i, &a, 4);
            std::memcpy(brand + 16 * i + 4, &b, 4);
            std::memcpy(brand + 16 * i + 8, &c, 4);
            std::memcpy(brand + 16 * i + 12, &e, 4);
        }
    }
    std::string name = brand;
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    copy_name(d.desc.name, name.empty() ? "x86-64 CPU" : name);
#else
    copy_name(d.desc.name, "CPU");
#endif
    d.desc.cpu_features = f;
    cpu_set_t set;
    CPU_ZERO(&set);
    d.desc.cpu_threads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                                     : (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
    std::set<std::pair<int, int>> cores;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &set)) continue;
        std::ifstream core(fmt::format("/sys/devices/system/cpu/cpu{}/topology/core_id", cpu));
        std::ifstream pkg(fmt::format("/sys/devices/system/cpu/cpu{}/topology/physical_package_id", cpu));
        int ci = cpu, pi = 0;
        core >> ci;
        pkg >> pi;
        cores.insert({pi, ci});
    }
    d.desc.cpu_cores = cores.empty() ? d.desc.cpu_threads : (uint32_t)cores.size();
    for (int i = 0; i < 8; ++i) {
        std::string type;
        int level = read_cache_level(i, &type);
        if (!level) continue;
        if (level == 1 && type != "Instruction") d.desc.cache_l1d_bytes = read_cache_size(i);
        if (level == 2) d.desc.cache_l2_bytes = read_cache_size(i);
        if (level == 3) d.desc.cache_l3_bytes = read_cache_size(i);
    }
    return d;
}

std::vector<Device> probe_cuda(std::string *note) {
    std::vector<Device> out;
    const cuda::Driver &drv = cuda::driver();
    if (!drv.loaded) {
        *note = drv.why_not;
        return out;
    }
    int n = 0;
    if (drv.cuDeviceGetCount(&n) != 0 || n == 0) {
        *note = "the NVIDIA driver reports no GPU";
        return out;
    }
    for (int i = 0; i < n; ++i) {
        cuda::CUdevice dev;
        if (drv.cuDeviceGet(&dev, i) != 0) continue;
        Device d;
        d.id = fmt::format("cuda:{}", i);
        kpr_device_desc &k = d.desc;
        k.struct_size = sizeof k;
        k.kind = KPR_DEVICE_CUDA;
        k.ordinal = i;
        drv.cuDeviceGetName(k.name, sizeof k.name, dev);
        unsigned char uuid[16] = {};
        if (drv.cuDeviceGetUuid && drv.cuDeviceGetUuid(uuid, dev) == 0) {
            std::string s = "GPU-";
            for (int j = 0; j < 16; ++j) {
                s += fmt::format("{:02x}", uuid[j]);
                if (j == 3 || j == 5 || j == 7 || j == 9) s += '-';
            }
            std::snprintf(k.uuid, sizeof k.uuid, "%s", s.c_str());
        }
        auto attr = [&](int a) {
            int v = 0;
            drv.cuDeviceGetAttribute(&v, a, dev);
            return v;
        };
        k.max_threads_per_block = attr(1);
        k.smem_per_block = attr(8);
        k.warp_size = attr(10);
        k.sm_count = attr(16);
        int mem_clock_khz = attr(36), bus_bits = attr(37);
        k.l2_bytes = (uint64_t)attr(38);
        k.cc_major = attr(75);
        k.cc_minor = attr(76);
        k.smem_per_sm = attr(81);
        k.smem_per_block_optin = attr(97);
        size_t mem = 0;
        drv.cuDeviceTotalMem(&mem, dev);
        k.memory_bytes = mem;
        k.peak_bandwidth_gbps = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
        k.has_dp4a = (k.cc_major > 6 || (k.cc_major == 6 && k.cc_minor >= 1)) ? 1 : 0;
        k.driver_version = (uint32_t)drv.version;
        out.push_back(d);
    }
    return out;
}

std::string Device::arch() const {
    if (is_cuda()) return fmt::format("{}.{}", desc.cc_major, desc.cc_minor);
    return "cpu";
}

// ---- simulated devices --------------------------------------------------------------------------

namespace {
struct GpuSpec {
    const char *key, *name;
    int major, minor, sms;
    uint32_t smem_block, smem_optin, smem_sm;
    uint64_t l2, mem;
    double bw;
};
// Public datasheet figures.
const GpuSpec kGpus[] = {
    {"p100", "Tesla P100-PCIE-16GB", 6, 0, 56, 48 << 10, 48 << 10, 64 << 10, 4ull << 20, 16ull << 30, 732.2},
    {"p40", "Tesla P40", 6, 1, 30, 48 << 10, 48 << 10, 96 << 10, 3ull << 20, 24ull << 30, 347.1},
    {"gtx1080", "NVIDIA GeForce GTX 1080", 6, 1, 20, 48 << 10, 48 << 10, 96 << 10, 2ull << 20, 8ull << 30, 320.3},
    {"v100", "Tesla V100-SXM2-32GB", 7, 0, 80, 48 << 10, 96 << 10, 96 << 10, 6ull << 20, 32ull << 30, 898.0},
    {"t4", "Tesla T4", 7, 5, 40, 48 << 10, 64 << 10, 64 << 10, 4ull << 20, 15ull << 30, 320.1},
    {"a100", "NVIDIA A100-SXM4-80GB", 8, 0, 108, 48 << 10, 163 << 10, 164 << 10, 40ull << 20, 80ull << 30, 2039.0},
    {"rtx3090", "NVIDIA GeForce RTX 3090", 8, 6, 82, 48 << 10, 99 << 10, 100 << 10, 6ull << 20, 24ull << 30, 936.2},
    {"l4", "NVIDIA L4", 8, 9, 58, 48 << 10, 99 << 10, 100 << 10, 48ull << 20, 24ull << 30, 300.0},
    {"h100", "NVIDIA H100 80GB HBM3", 9, 0, 132, 48 << 10, 227 << 10, 228 << 10, 50ull << 20, 80ull << 30, 3352.0},
    {"h200", "NVIDIA H200", 9, 0, 132, 48 << 10, 227 << 10, 228 << 10, 60ull << 20, 141ull << 30, 4800.0},
};

Device from_spec(const GpuSpec &g) {
    Device d;
    d.id = std::string("sim:") + g.key;
    kpr_device_desc &k = d.desc;
    k.struct_size = sizeof k;
    k.kind = KPR_DEVICE_CUDA;
    k.simulated = 1;
    std::snprintf(k.name, sizeof k.name, "%s", g.name);
    k.cc_major = g.major;
    k.cc_minor = g.minor;
    k.sm_count = g.sms;
    k.warp_size = 32;
    k.max_threads_per_block = 1024;
    k.smem_per_block = g.smem_block;
    k.smem_per_block_optin = g.smem_optin;
    k.smem_per_sm = g.smem_sm;
    k.l2_bytes = g.l2;
    k.memory_bytes = g.mem;
    k.peak_bandwidth_gbps = g.bw;
    k.has_dp4a = (g.major > 6 || (g.major == 6 && g.minor >= 1));
    return d;
}
} // namespace

std::optional<Device> simulated_device(const std::string &name) {
    std::string key = name;
    for (auto &ch : key) ch = (char)std::tolower((unsigned char)ch);
    if (key == "gp100") key = "p100";
    for (const auto &g : kGpus)
        if (key == g.key) return from_spec(g);
    return std::nullopt;
}

std::vector<std::string> simulated_device_names() {
    std::vector<std::string> out;
    for (const auto &g : kGpus) out.push_back(g.key);
    return out;
}

namespace {
const char *toml_type_name(const toml::node &n) {
    switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date/time";
    }
}
} // namespace

Device load_device_file(const std::filesystem::path &file) {
    const std::string path = file.string();
    // toml++ reports a missing file as a syntax error at 0:0 and a folder as an empty document: say what it is.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    if (S_ISDIR(st.st_mode)) throw Error(fmt::format("{}: cannot open: is a directory, not a device file", path));
    if (!S_ISREG(st.st_mode)) throw Error(fmt::format("{}: cannot open: not a regular file", path));
    if (::access(path.c_str(), R_OK) != 0)
        throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    toml::table t;
    try {
        t = toml::parse_file(path);
    } catch (const toml::parse_error &e) {
        throw Error(fmt::format("{}:{}:{}: syntax error: {}", path, e.source().begin.line, e.source().begin.column,
                                e.description()));
    }
    auto where = [&](const toml::node &n) {
        return fmt::format("{}:{}:{}", path, n.source().begin.line, n.source().begin.column);
    };
    auto dev = t["device"];
    if (!dev) throw Error(fmt::format("{}: no [device] table", path));
    if (!dev.is_table())
        throw Error(fmt::format("{}: device: expected a [device] table, found {}", where(*dev.node()),
                                toml_type_name(*dev.node())));
    for (auto &&[key, v] : t)
        if (key.str() != "device")
            throw Error(fmt::format("{}:{}:{}: {}: unknown key (a device file holds one [device] table)", path,
                                    key.source().begin.line, key.source().begin.column, key.str()));
    static const std::set<std::string> keys = {"like", "name", "cc", "sm_count", "smem_per_block", "smem_per_block_optin",
                                               "smem_per_sm", "l2_bytes", "memory_bytes", "bandwidth_gbps"};
    for (auto &&[key, v] : *dev.as_table()) {
        std::string k_(key.str());
        if (!keys.count(k_))
            throw Error(fmt::format("{}:{}:{}: device.{}: unknown key", path, v.source().begin.line,
                                    v.source().begin.column, k_));
    }
    // A key that is present must have its type: a value of the wrong type is never replaced by a default.
    auto string_key = [&](const char *key, const char *example) -> std::optional<std::string> {
        auto node = dev[key];
        if (!node) return std::nullopt;
        if (auto v = node.value_exact<std::string>()) return *v;
        throw Error(fmt::format("{}: device.{}: expected a string (for example {} = {}), found {}", where(*node.node()),
                                key, key, example, toml_type_name(*node.node())));
    };

    Device d;
    if (auto base = string_key("like", "\"p100\"")) {
        auto s = simulated_device(*base);
        if (!s)
            throw Error(fmt::format("{}: device.like: unknown device '{}' (known: {})", where(*dev["like"].node()),
                                    *base, fmt::join(simulated_device_names(), ", ")));
        d = *s;
    } else {
        d.desc.struct_size = sizeof d.desc;
        d.desc.kind = KPR_DEVICE_CUDA;
        d.desc.warp_size = 32;
        d.desc.max_threads_per_block = 1024;
        d.desc.simulated = 1;
    }
    d.id = "sim:" + file.stem().string();
    kpr_device_desc &k = d.desc;
    if (auto n = string_key("name", "\"Tesla P100\"")) {
        if (n->empty()) throw Error(fmt::format("{}: device.name: is empty", where(*dev["name"].node())));
        std::snprintf(k.name, sizeof k.name, "%s", n->c_str());
    }
    if (auto cc = string_key("cc", "\"6.0\"")) {
        int ma = 0, mi = 0;
        char rest = 0;
        if (std::sscanf(cc->c_str(), "%d.%d%c", &ma, &mi, &rest) != 2 || ma < 3 || ma > 20 || mi < 0 || mi > 9)
            throw Error(fmt::format("{}: device.cc: '{}' is not a compute capability like \"6.0\"",
                                    where(*dev["cc"].node()), *cc));
        k.cc_major = ma;
        k.cc_minor = mi;
    }
    if (k.cc_major == 0) throw Error(fmt::format("{}: device.cc is required (for example cc = \"6.0\")", path));
    auto uint_key = [&](const char *key, auto &field) {
        auto node = dev[key];
        if (!node) return;
        using T = std::remove_reference_t<decltype(field)>;
        auto v = node.value_exact<int64_t>();
        if (!v)
            throw Error(fmt::format("{}: device.{}: expected an integer, found {}", where(*node.node()), key,
                                    toml_type_name(*node.node())));
        if (*v < 1 || uint64_t(*v) > std::numeric_limits<T>::max())
            throw Error(fmt::format("{}: device.{}: {} is out of range (1 to {})", where(*node.node()), key, *v,
                                    uint64_t(std::numeric_limits<T>::max())));
        field = static_cast<T>(*v);
    };
    uint_key("sm_count", k.sm_count);
    uint_key("smem_per_block", k.smem_per_block);
    uint_key("smem_per_block_optin", k.smem_per_block_optin);
    uint_key("smem_per_sm", k.smem_per_sm);
    uint_key("l2_bytes", k.l2_bytes);
    uint_key("memory_bytes", k.memory_bytes);
    if (k.sm_count == 0)
        throw Error(fmt::format("{}: device.sm_count is required without device.like (for example sm_count = 56)", path));
    if (!k.smem_per_block) k.smem_per_block = 48u << 10;
    if (!k.smem_per_block_optin) k.smem_per_block_optin = k.smem_per_block;
    if (auto node = dev["bandwidth_gbps"]) {
        auto v = node.value<double>();
        if (!v || node.is_boolean() || node.is_string())
            throw Error(fmt::format("{}: device.bandwidth_gbps: expected a number, found {}", where(*node.node()),
                                    toml_type_name(*node.node())));
        if (!std::isfinite(*v) || *v < 0)
            throw Error(fmt::format("{}: device.bandwidth_gbps: {} is out of range (a finite number >= 0)",
                                    where(*node.node()), *v));
        k.peak_bandwidth_gbps = *v;
    }
    k.has_dp4a = (k.cc_major > 6 || (k.cc_major == 6 && k.cc_minor >= 1));
    return d;
}

} // namespace kpr

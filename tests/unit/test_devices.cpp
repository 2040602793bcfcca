// Devices: the CPU probe against what the compiler's own cpuid says, the built-in simulated GPUs (the
// GP100 the mission targets and an H200), and device descriptions read from TOML files.
#include <kpr/error.hpp>
#include <kpr/runtime.hpp>

#include <gtest/gtest.h>

#include "test_support.hpp"

#include <algorithm>
#include <cstring>

namespace {

using namespace kpr_test;

const kpr::Device &cpu_of(const kpr::Runtime &rt) { return rt.device("cpu"); }

TEST(CpuProbe, Sanity) {
    auto rt = kpr::Runtime::create(isolated_options());
    const kpr::Device &d = cpu_of(rt);
    EXPECT_EQ(d.id, "cpu");
    EXPECT_TRUE(d.is_cpu());
    EXPECT_EQ(d.desc.struct_size, sizeof(kpr_device_desc));
    EXPECT_EQ(d.desc.simulated, 0u);
    EXPECT_GT(std::strlen(d.desc.name), 0u);
    EXPECT_GE(d.desc.cpu_threads, 1u);
    EXPECT_GE(d.desc.cpu_cores, 1u);
    EXPECT_LE(d.desc.cpu_cores, d.desc.cpu_threads);
    EXPECT_EQ(d.arch(), "cpu");
    EXPECT_EQ(rt.devices().front().id, "cpu") << "the CPU is always the first device";
    if (d.desc.cache_l1d_bytes && d.desc.cache_l2_bytes) EXPECT_LE(d.desc.cache_l1d_bytes, d.desc.cache_l2_bytes);
}

TEST(CpuProbe, FeaturesAgreeWithTheCompilersCpuid) {
    auto rt = kpr::Runtime::create(isolated_options());
    const uint64_t f = cpu_of(rt).desc.cpu_features;
#if defined(__x86_64__)
    __builtin_cpu_init();
    struct {
        uint64_t bit;
        bool has;
        const char *name;
    } checks[] = {
        {KPR_CPU_SSE42, (bool)__builtin_cpu_supports("sse4.2"), "sse4.2"},
        {KPR_CPU_AVX, (bool)__builtin_cpu_supports("avx"), "avx"},
        {KPR_CPU_AVX2, (bool)__builtin_cpu_supports("avx2"), "avx2"},
        {KPR_CPU_FMA, (bool)__builtin_cpu_supports("fma"), "fma"},
        {KPR_CPU_BMI2, (bool)__builtin_cpu_supports("bmi2"), "bmi2"},
        {KPR_CPU_AVX512F, (bool)__builtin_cpu_supports("avx512f"), "avx512f"},
        {KPR_CPU_AVX512BW, (bool)__builtin_cpu_supports("avx512bw"), "avx512bw"},
        {KPR_CPU_AVX512VL, (bool)__builtin_cpu_supports("avx512vl"), "avx512vl"},
        {KPR_CPU_AVX512DQ, (bool)__builtin_cpu_supports("avx512dq"), "avx512dq"},
        {KPR_CPU_AVX512VNNI, (bool)__builtin_cpu_supports("avx512vnni"), "avx512vnni"},
    };
    for (auto &c : checks) EXPECT_EQ((f & c.bit) != 0, c.has) << c.name;
#endif
    // Implications any real CPU satisfies.
    if (f & KPR_CPU_AVX2) EXPECT_TRUE(f & KPR_CPU_AVX);
    if (f & KPR_CPU_AVX512BW) EXPECT_TRUE(f & KPR_CPU_AVX512F);
    if (f & KPR_CPU_AVX512VNNI) EXPECT_TRUE(f & KPR_CPU_AVX512F);
    // The names match the bits.
    std::string names = kpr::cpu_feature_names(f);
    EXPECT_EQ(contains(names, "avx2"), (f & KPR_CPU_AVX2) != 0) << names;
    EXPECT_EQ(kpr::cpu_feature_names(KPR_CPU_AVX2 | KPR_CPU_FMA), "avx2 fma");
    EXPECT_EQ(kpr::cpu_feature_names(0), "");
}

TEST(SimulatedDevices, Gp100) {
    auto d = kpr::simulated_device("p100");
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->id, "sim:p100");
    EXPECT_TRUE(d->is_cuda());
    EXPECT_EQ(d->desc.simulated, 1u);
    EXPECT_EQ(d->desc.cc_major, 6);
    EXPECT_EQ(d->desc.cc_minor, 0);
    EXPECT_EQ(d->arch(), "6.0");
    EXPECT_EQ(d->desc.sm_count, 56u);
    EXPECT_EQ(d->desc.smem_per_block, 48u * 1024);
    EXPECT_EQ(d->desc.has_dp4a, 0u) << "compute capability 6.0 has no __dp4a";
    EXPECT_EQ(d->desc.warp_size, 32u);
    EXPECT_EQ(d->desc.struct_size, sizeof(kpr_device_desc));
    EXPECT_TRUE(contains(d->desc.name, "P100"));
    // Other spellings of the same card.
    ASSERT_TRUE(kpr::simulated_device("GP100").has_value());
    EXPECT_EQ(kpr::simulated_device("GP100")->desc.sm_count, 56u);
    EXPECT_TRUE(kpr::simulated_device("P100").has_value());
}

TEST(SimulatedDevices, H200AndTheList) {
    auto d = kpr::simulated_device("h200");
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->arch(), "9.0");
    EXPECT_EQ(d->desc.has_dp4a, 1u);
    EXPECT_GT(d->desc.sm_count, 100u);
    EXPECT_GT(d->desc.smem_per_block_optin, d->desc.smem_per_block);
    EXPECT_GT(d->desc.memory_bytes, 100ull << 30);
    EXPECT_GT(d->desc.peak_bandwidth_gbps, 4000.0);
    EXPECT_FALSE(kpr::simulated_device("gtx9000").has_value());
    auto names = kpr::simulated_device_names();
    for (const char *n : {"p100", "h200", "v100", "a100"})
        EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    for (auto &n : names) EXPECT_TRUE(kpr::simulated_device(n).has_value()) << n;
}

TEST(SimulatedDevices, InjectedIntoARuntime) {
    kpr::RuntimeOptions o = isolated_options();
    o.extra_devices = {*kpr::simulated_device("p100"), *kpr::simulated_device("h200")};
    auto rt = kpr::Runtime::create(o);
    EXPECT_EQ(rt.device("sim:p100").desc.sm_count, 56u);
    EXPECT_EQ(rt.device("sim:h200").arch(), "9.0");
    EXPECT_THROW(rt.device("sim:v100"), kpr::Error);
}

// ---- device files -------------------------------------------------------------------------------

std::string load_error(const fs::path &file) {
    try {
        kpr::load_device_file(file);
    } catch (const kpr::Error &e) {
        return e.what();
    }
    return "";
}

TEST(DeviceFile, AFullDescription) {
    TempDir tmp;
    fs::path f = tmp.write("mygp100.toml", R"toml([device]
name = "Tesla P100 (lab)"
cc = "6.0"
sm_count = 56
smem_per_block = 49152
smem_per_sm = 65536
l2_bytes = 4194304
memory_bytes = 17179869184
bandwidth_gbps = 732.0
)toml");
    kpr::Device d = kpr::load_device_file(f);
    EXPECT_EQ(d.id, "sim:mygp100");
    EXPECT_TRUE(d.is_cuda());
    EXPECT_EQ(d.desc.simulated, 1u);
    EXPECT_STREQ(d.desc.name, "Tesla P100 (lab)");
    EXPECT_EQ(d.arch(), "6.0");
    EXPECT_EQ(d.desc.sm_count, 56u);
    EXPECT_EQ(d.desc.smem_per_block, 49152u);
    EXPECT_EQ(d.desc.smem_per_block_optin, 49152u) << "defaults to the per-block figure";
    EXPECT_EQ(d.desc.smem_per_sm, 65536u);
    EXPECT_EQ(d.desc.memory_bytes, 17179869184ull);
    EXPECT_DOUBLE_EQ(d.desc.peak_bandwidth_gbps, 732.0);
    EXPECT_EQ(d.desc.has_dp4a, 0u);
    EXPECT_EQ(d.desc.warp_size, 32u);
}

TEST(DeviceFile, LikeABuiltInWithOverrides) {
    TempDir tmp;
    fs::path f = tmp.write("half-h200.toml", "[device]\nlike = \"h200\"\nsm_count = 66\n");
    kpr::Device d = kpr::load_device_file(f);
    EXPECT_EQ(d.id, "sim:half-h200");
    EXPECT_EQ(d.desc.sm_count, 66u);
    EXPECT_EQ(d.arch(), "9.0");
    EXPECT_EQ(d.desc.smem_per_block_optin, kpr::simulated_device("h200")->desc.smem_per_block_optin);
    EXPECT_EQ(d.desc.has_dp4a, 1u);
}

TEST(DeviceFile, NegotiatesLikeABuiltIn) {
    TempDir tmp;
    fs::path f = tmp.write("small.toml", "[device]\nname = \"Small GPU\"\ncc = \"8.6\"\nsm_count = 10\n");
    kpr::RuntimeOptions o = isolated_options({mock_dir("gpu")});
    o.extra_devices = {kpr::load_device_file(f)};
    auto rt = kpr::Runtime::create(o);
    auto plan = rt.plan(kpr::gemv(8 /* q8_0 */, 64, 256, 1), "sim:small");
    ASSERT_EQ(plan->provider(), "mock_gpu") << plan->explain();
    EXPECT_TRUE(contains(find_answer(*plan, "mock_gpu")->reason, "Small GPU cc 8.6, 10 SMs"));
}

TEST(DeviceFile, Errors) {
    TempDir tmp;
    std::string e;

    e = load_error(tmp.write("syntax.toml", "[device]\ncc = \"6.0\n"));
    EXPECT_TRUE(contains(e, (tmp.path() / "syntax.toml").string() + ":2:")) << e;
    EXPECT_TRUE(contains(e, "syntax error")) << e;

    e = load_error(tmp.write("notable.toml", "name = \"x\"\n"));
    EXPECT_TRUE(contains(e, "notable.toml")) << e;
    EXPECT_TRUE(contains(e, "[device]")) << e;

    e = load_error(tmp.write("unknown.toml", "[device]\ncc = \"6.0\"\nsm_cuont = 3\n"));
    EXPECT_TRUE(contains(e, (tmp.path() / "unknown.toml").string() + ":3:")) << e;
    EXPECT_TRUE(contains(e, "device.sm_cuont")) << e;

    e = load_error(tmp.write("badcc.toml", "[device]\ncc = \"sixty\"\n"));
    EXPECT_TRUE(contains(e, "badcc.toml")) << e;
    EXPECT_TRUE(contains(e, "device.cc")) << e;

    e = load_error(tmp.write("nocc.toml", "[device]\nname = \"x\"\n"));
    EXPECT_TRUE(contains(e, "device.cc")) << e;

    e = load_error(tmp.write("badlike.toml", "[device]\nlike = \"p1000\"\n"));
    EXPECT_TRUE(contains(e, "device.like")) << e;
    EXPECT_TRUE(contains(e, "p1000")) << e;

    e = load_error(tmp.path() / "missing.toml");
    EXPECT_TRUE(contains(e, "missing.toml")) << e;
}

// A value of the wrong type must be an error naming the key, like everywhere else in kpr's TOML -- not
// silently replaced by a default (a GP100 description with sm_count = "56" would negotiate as 0 SMs).
TEST(DeviceFile, WrongValueTypeIsAnError) {
    TempDir tmp;
    for (const char *body : {"[device]\ncc = \"6.0\"\nsm_count = \"56\"\n", "[device]\ncc = \"6.0\"\nsm_count = -5\n",
                             "[device]\ncc = 6.0\n", "[device]\ncc = \"6.0\"\nbandwidth_gbps = \"fast\"\n"}) {
        SCOPED_TRACE(body);
        std::string e = load_error(tmp.write("typed.toml", body));
        EXPECT_FALSE(e.empty()) << "accepted a value of the wrong type";
        if (!e.empty()) EXPECT_TRUE(contains(e, "typed.toml")) << e;
    }
}

// Every key of the wrong type or out of range is an error naming the file, the line and column, the key
// and what was expected -- even when `like` supplies a value the key would otherwise have replaced (a float
// cc once planned a "like = p100" file as 6.0 without a word).
TEST(DeviceFile, EveryKeyIsTypedAndInRange) {
    TempDir tmp;
    struct Case {
        const char *body;
        std::vector<std::string> parts;
    };
    const std::vector<Case> cases = {
        {"[device]\nlike = \"p100\"\ncc = 7.5\n", {":3:", "device.cc", "expected a string", "a float"}},
        {"[device]\nlike = \"p100\"\nname = 5\n", {":3:", "device.name", "expected a string", "an integer"}},
        {"[device]\nlike = 100\n", {":2:", "device.like", "expected a string", "an integer"}},
        {"[device]\nlike = \"p100\"\nsm_count = 0\n", {":3:", "device.sm_count", "0 is out of range"}},
        {"[device]\nlike = \"p100\"\nsm_count = 4.5\n", {":3:", "device.sm_count", "expected an integer", "a float"}},
        {"[device]\nlike = \"p100\"\nsm_count = 4294967296\n", {":3:", "device.sm_count", "out of range (1 to 4294967295)"}},
        {"[device]\nlike = \"p100\"\nsmem_per_block = 0\n", {":3:", "device.smem_per_block", "out of range"}},
        {"[device]\nlike = \"p100\"\nmemory_bytes = true\n", {":3:", "device.memory_bytes", "a boolean"}},
        {"[device]\nlike = \"p100\"\nbandwidth_gbps = -1.0\n", {":3:", "device.bandwidth_gbps", "out of range"}},
        {"[device]\nlike = \"p100\"\nbandwidth_gbps = inf\n", {":3:", "device.bandwidth_gbps", "out of range"}},
        {"[device]\nlike = \"p100\"\ncc = \"6.0x\"\n", {":3:", "device.cc", "'6.0x'"}},
        {"[device]\nlike = \"p100\"\nname = \"\"\n", {":3:", "device.name", "empty"}},
        {"[device]\ncc = \"8.0\"\n", {"device.sm_count is required"}},
        {"device = 5\n", {":1:", "expected a [device] table", "an integer"}},
        {"[device]\nlike = \"p100\"\n[devcie]\nsm_count = 3\n", {":3:", "devcie", "unknown key"}},
        {"[device]\nlike = \"p1000\"\n", {":2:", "device.like", "'p1000'", "p100"}},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.body);
        const fs::path f = tmp.write("typed.toml", c.body);
        std::string e = load_error(f);
        ASSERT_FALSE(e.empty()) << "accepted";
        EXPECT_EQ(e.rfind(f.string(), 0), 0u) << e;
        for (const std::string &p : c.parts) EXPECT_TRUE(contains(e, p)) << "missing '" << p << "' in: " << e;
    }
    // The same values in range and of the right type load.
    kpr::Device d = kpr::load_device_file(
        tmp.write("ok.toml", "[device]\nlike = \"p100\"\ncc = \"7.5\"\nname = \"T\"\nsm_count = 1\nbandwidth_gbps = 0\n"));
    EXPECT_EQ(d.arch(), "7.5");
    EXPECT_EQ(d.desc.sm_count, 1u);
    EXPECT_STREQ(d.desc.name, "T");
}

// A missing file, a folder and an unreadable path say so, instead of "syntax error at 0:0" or "no [device] table".
TEST(DeviceFile, PathsThatAreNotFiles) {
    TempDir tmp;
    const fs::path missing = tmp.path() / "nope.toml";
    std::string e = load_error(missing);
    EXPECT_EQ(e, missing.string() + ": cannot open: No such file or directory");
    const fs::path dir = tmp.path() / "a_folder.toml";
    fs::create_directories(dir);
    e = load_error(dir);
    EXPECT_TRUE(contains(e, dir.string() + ": cannot open: is a directory")) << e;
    EXPECT_FALSE(contains(e, "[device]")) << e;
}

} // namespace

// libFuzzer target: the loaders of the other files kpr reads from users, chosen by the first input byte
// (modulo 3); the rest of the input is the file, handed over as a path (fuzz_util.hpp):
//   0  kpr::load_device_file        a simulated-device description (TOML, `kpr plan --simulate-device`)
//   1  kpr::calibration::File::load the calibration file (TOML, written by `kpr calibrate`)
//   2  kpr::read_selftest_state     the self-test state file (JSON, quarantine records)
// The first two throw kpr::Error on bad input (caught here: the expected outcome); the state reader reports
// a malformed file through its warning and reads it as empty, so it must not throw at all. Anything else --
// another exception, a crash, a sanitizer report, a broken invariant below -- surfaces as a finding.
//
// A calibration file that loads is also saved and loaded again, as `kpr calibrate` does (load the existing
// file, add entries, save): what save() writes must load, with the same devices, providers and entry keys
// (tests/bench/test_bench.cpp, Calibration.FileRoundTrip).
#include "fuzz_util.hpp"

#include <kpr/calibration.hpp>
#include <kpr/error.hpp>
#include <kpr/runtime.hpp>
#include <kpr/selftest.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace {

// A private folder for the calibration round trip, removed at exit.
class ScratchDir {
public:
    ScratchDir() {
        std::error_code ec;
        std::string base = std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        std::string tmpl = base + "/kpr-fuzz-files-XXXXXX";
        if (!mkdtemp(tmpl.data())) __builtin_trap();
        path_ = tmpl;
    }
    ~ScratchDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::filesystem::path &path() const { return path_; }

private:
    std::filesystem::path path_;
};

[[noreturn]] void fail(const std::string &what) {
    std::fprintf(stderr, "fuzz_files: %s\n", what.c_str());
    std::abort();
}

void device_file(const std::string &path) {
    kpr::Device d;
    try {
        d = kpr::load_device_file(path);
    } catch (const kpr::Error &) {
        return;
    }
    // What the header promises of a device that loaded.
    const kpr_device_desc &k = d.desc;
    if (k.kind != KPR_DEVICE_CUDA || !k.simulated) fail("device file: not a simulated CUDA device");
    if (k.cc_major < 3 || k.cc_major > 20 || k.cc_minor > 9) fail("device file: compute capability out of range");
    if (k.sm_count < 1 || k.smem_per_block < 1 || k.smem_per_block_optin < 1) fail("device file: a size is 0");
    if (!std::isfinite(k.peak_bandwidth_gbps) || k.peak_bandwidth_gbps < 0) fail("device file: bad bandwidth");
    if (strnlen(k.name, sizeof k.name) == sizeof k.name) fail("device file: name not terminated");
    (void)d.arch();
}

void calibration_file(const std::string &path) {
    namespace cal = kpr::calibration;
    cal::File f;
    try {
        f = cal::File::load(path);
    } catch (const kpr::Error &) {
        return;
    }
    static const ScratchDir scratch;
    const std::filesystem::path out = scratch.path() / "calibration.toml";
    cal::File g;
    try {
        f.save(out);
        g = cal::File::load(out);
    } catch (const kpr::Error &e) {
        fail(std::string("calibration: a file that loaded was saved and does not load again: ") + e.what());
    }
    if (g.entries.size() != f.entries.size())
        fail("calibration: round trip changed the number of entries: " + std::to_string(f.entries.size()) + " -> " +
             std::to_string(g.entries.size()));
    if (g.devices.size() != f.devices.size() || g.providers.size() != f.providers.size())
        fail("calibration: round trip changed the devices or providers");
    for (auto &[id, d] : f.devices)
        if (!g.devices.count(id)) fail("calibration: round trip lost device '" + id + "'");
    for (auto &[name, p] : f.providers)
        if (!g.providers.count(name)) fail("calibration: round trip lost provider '" + name + "'");
    for (size_t i = 0; i < f.entries.size(); ++i) {
        std::string a = cal::key_of(f.entries[i].device, f.entries[i].op), b = cal::key_of(g.entries[i].device, g.entries[i].op);
        if (a != b) fail("calibration: round trip changed entry " + std::to_string(i) + ": " + a + " -> " + b);
        if (f.entries[i].winner != g.entries[i].winner || f.entries[i].times.size() != g.entries[i].times.size() ||
            f.entries[i].excluded != g.entries[i].excluded)
            fail("calibration: round trip changed entry " + std::to_string(i) + " (winner, times or excluded)");
    }
}

void selftest_state(const std::string &path) {
    std::string warning;
    std::vector<kpr::SelftestRecord> records = kpr::read_selftest_state(path, &warning);
    // "A malformed file is reported through *warning and reads as empty."
    if (!warning.empty() && !records.empty()) fail("selftest state: records returned with a warning: " + warning);
    volatile size_t sink = 0;
    for (const auto &r : records) sink = sink + r.provider.size() + r.device.size() + r.sha256.size();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const uint8_t which = data[0] % 3;
    kpr_fuzz::MemFile mf(data + 1, size - 1);
    switch (which) {
    case 0: device_file(mf.path()); break;
    case 1: calibration_file(mf.path()); break;
    default: selftest_state(mf.path()); break;
    }
    return 0;
}

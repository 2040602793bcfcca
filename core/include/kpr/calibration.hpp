// kpr/calibration.hpp -- measured winners per key, kept per machine (like FFTW's wisdom).
//
// `kpr calibrate` times the accepting providers for the keys a model needs and writes a TOML file:
//
//   version = 1
//   [devices."cuda:0"]   name, uuid, cc, driver, cpu_features
//   [providers.generic_cuda]   version, file, sha256
//   [[entries]]   device, kind, type, rows, cols, ncols, experts, experts_used, x_slots, winner,
//                 times = { generic_cuda = 41.2, iq_stage_tables = 39.8 }
//
// At start-up the runtime reads it back; an entry whose device (UUID, name, compute capability, driver),
// or one of whose providers (version, library SHA-256) no longer matches is ignored and reported in
// Runtime::warnings() as stale.
#pragma once

#include <kpr/runtime.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kpr::calibration {

struct DeviceRecord {
    std::string id, name, uuid, cc, features;
    uint32_t driver = 0;
};

struct ProviderRecord {
    std::string name, version, file, sha256;
};

struct Entry {
    std::string device;
    kpr_op_desc op{};
    std::string winner;
    std::map<std::string, double> times;           // provider -> median us
    std::map<std::string, std::string> excluded;   // provider -> why (self-test failed, run failed)
};

struct File {
    std::map<std::string, DeviceRecord> devices;
    std::map<std::string, ProviderRecord> providers;
    std::vector<Entry> entries;

    // Throws kpr::Error naming the file (and line) when it cannot be parsed.
    static File load(const std::filesystem::path &path);
    // Atomic (temporary file + rename); creates the folder.
    void save(const std::filesystem::path &path) const;
    // Replaces the entry for the same (device, op) or appends.
    void put(const Entry &e);
};

DeviceRecord record_of(const Device &d);
ProviderRecord record_of(const ProviderInfo &p);  // hashes the library file
// "" when `now` matches `then`; otherwise what differs ("driver 12080 -> 13000").
std::string device_mismatch(const DeviceRecord &then, const DeviceRecord &now);

// The file the runtime reads and `kpr calibrate` writes by default: RuntimeOptions::calibration_file, else
// [runtime] calibration_file, else calibration.toml next to the first config file, else
// $XDG_CONFIG_HOME/kpr/calibration.toml, else ~/.config/kpr/calibration.toml.
std::filesystem::path default_path(const Runtime &rt);

// The key text of an op on a device, as entries are matched ("cpu|0|8|4096|4096|1|1|1|1").
std::string key_of(const std::string &device, const kpr_op_desc &op);

// SHA-256 (FIPS 180-4).
std::array<uint8_t, 32> sha256(const void *data, size_t bytes);
std::string sha256_hex(const void *data, size_t bytes);
std::string sha256_file(const std::filesystem::path &file);  // throws kpr::Error when unreadable

} // namespace kpr::calibration

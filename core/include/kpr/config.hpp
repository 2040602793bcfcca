// kpr/config.hpp -- the per-machine configuration (TOML), as the core reads it.
//
// Precedence, highest first: command-line flags, the environment (KPR_FORCE, KPR_DISABLE, KPR_ENABLE,
// KPR_PROVIDER_PATH, KPR_CONFIG, KPR_LOG), the config file (its [[rules]] over its [providers.*]), and the
// providers' own defaults. docs/config.md and config/default.toml document every key.
#pragma once

#include <kpr/provider.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kpr {

// One setting and where it came from ("/etc/kpr.toml:12:11", "KPR_DISABLE"), for explain and errors.
template <typename T> struct Setting {
    T value{};
    std::string where;
};

// An option value as written: canonical text plus the TOML type it had ("bool", "int", "float", "string").
struct OptionSetting {
    std::string text;
    std::string toml_type;
    std::string where;
};

struct ProviderSettings {
    std::optional<Setting<bool>> enabled, force, require;
    std::optional<Setting<int64_t>> priority;
    std::map<std::string, OptionSetting> options;
    // [providers.<name>] only (not in rules): the library must hash to this SHA-256 (64 lowercase hex
    // digits) or it is refused before it is loaded.
    std::optional<Setting<std::string>> sha256;
    // Decline the provider in negotiation when it failed its self-test on this machine (the record
    // `kpr selftest` keeps; see selftest.hpp). Overrides [runtime] quarantine_on_failure.
    std::optional<Setting<bool>> quarantine_on_failure;
    std::string where;  // the table's position, for "unknown provider" errors

    // Overlay `other` on top of this (other's set fields win).
    void overlay(const ProviderSettings &other);
};

// A [[rules]] entry: applies its provider settings to devices it matches. Empty matchers match all.
struct Rule {
    std::optional<std::string> device;       // "cpu", "cuda:1"
    std::optional<std::string> arch;         // "6.0" (compute capability) or "cpu"
    std::optional<std::string> device_name;  // glob on the device name: "*P100*"
    std::map<std::string, ProviderSettings> providers;
    std::string where;
};

struct Config {
    std::vector<std::string> files;                    // read, in order
    std::vector<std::filesystem::path> provider_paths; // [runtime] provider_paths, resolved against the file
    std::optional<std::string> log_level;              // [runtime] log_level
    std::optional<std::filesystem::path> calibration_file; // [runtime] calibration_file (resolved against the file)
    // [runtime] allow_untrusted_providers: load provider files and folders that are writable by group or
    // others, or owned by a user other than this process's and root (refused by default).
    std::optional<Setting<bool>> allow_untrusted_providers;
    // [runtime] quarantine_on_failure: the default for every provider (false when unset).
    std::optional<Setting<bool>> quarantine_on_failure;
    // [runtime] state_file: where `kpr selftest` records failures (resolved against the file); default
    // $XDG_STATE_HOME/kpr/selftest-state.json (see kpr::selftest_state_file).
    std::optional<std::filesystem::path> state_file;
    std::map<std::string, ProviderSettings> providers; // [providers.<name>]
    std::vector<Rule> rules;                           // [[rules]]
    // Providers whose library was found but failed or was refused (name -> reason), filled by the
    // runtime's loader: check_against does not call a section for one of them an unknown provider.
    std::map<std::string, std::string> unavailable_providers;

    // Parse a file; throws kpr::Error "FILE:LINE:COL: KEY: problem" for syntax errors, unknown keys and
    // wrong value types. Names of providers and options are checked later, against what was loaded
    // (see check_against).
    static Config load(const std::filesystem::path &file);
    static Config parse(const std::string &text, const std::string &source_name);

    // Fold in KPR_ENABLE / KPR_DISABLE / KPR_FORCE (comma-separated provider names), as a layer above the file.
    void apply_environment();
    // Settings for one provider on one device: file, then matching rules in order, then the environment.
    ProviderSettings effective(const std::string &provider, const std::string &device_id,
                               const std::string &device_arch, const std::string &device_name) const;

    // Errors for names that do not exist: unknown providers (with a "did you mean"), undeclared options,
    // option values of the wrong type or out of range. `known` maps provider name -> declared options.
    std::vector<std::string> check_against(
        const std::map<std::string, std::vector<kpr_option_decl>> &known) const;

private:
    std::map<std::string, ProviderSettings> env_;  // the environment layer
};

// Levenshtein-closest name within distance 3, or "".
std::string closest_name(const std::string &name, const std::vector<std::string> &candidates);

// Check a value written for a declared option and return its canonical text; throws kpr::Error.
std::string canonical_option_value(const kpr_option_decl &decl, const OptionSetting &value);

} // namespace kpr

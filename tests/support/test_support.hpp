// Helpers shared by tests/unit, tests/abi and tests/cli.
#pragma once

#include <kpr/runtime.hpp>

#include "mock_stats.h"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kpr_test {

namespace fs = std::filesystem;

// ${build}/tests/mockproviders/<variant>: the folder holding one mock build.
fs::path mock_dir(const std::string &variant);
// ${build}/tests/mockproviders/<variant>/libkpr_<name>.so
fs::path mock_file(const std::string &variant, const std::string &name);
// The build tree and the `kpr` binary in it.
fs::path build_dir();
fs::path kpr_binary();
// The real providers the build made (build/providers).
fs::path provider_build_dir();

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    const fs::path &path() const { return path_; }
    // Writes `text` to path()/name (creating folders) and returns the file's path.
    fs::path write(const std::string &name, const std::string &text) const;
    // A sub-folder, created.
    fs::path dir(const std::string &name) const;

private:
    fs::path path_;
};

// Sets and unsets environment variables; restores every variable it touched on destruction.
class EnvGuard {
public:
    EnvGuard() = default;
    ~EnvGuard();
    EnvGuard(const EnvGuard &) = delete;
    EnvGuard &operator=(const EnvGuard &) = delete;
    void set(const std::string &name, const std::string &value);
    void unset(const std::string &name);
    // Unsets KPR_CONFIG, KPR_PROVIDER_PATH, KPR_ENABLE, KPR_DISABLE, KPR_FORCE and KPR_LOG.
    void clear_kpr();

private:
    void remember(const std::string &name);
    std::map<std::string, std::optional<std::string>> saved_;
};

// Random bytes named like a provider: libkpr_<name>.so in `dir`. Returns the file.
fs::path write_garbage_library(const fs::path &dir, const std::string &name = "garbage", size_t bytes = 4096);

// Copies a mock library into `dir` (keeping its file name); returns the copy.
fs::path copy_mock(const std::string &variant, const std::string &name, const fs::path &dir);

// The counters of the mock library `file` as the core loaded it (dlopen RTLD_NOLOAD); null when the
// library is not loaded in this process.
KprMockStats *mock_stats(const fs::path &file);

// Options for a runtime that sees only what a test gives it: no environment, no GPU probing,
// the given provider folders first (the build tree's generic_cpu is still found after them).
kpr::RuntimeOptions isolated_options(const std::vector<fs::path> &dirs = {});

const kpr::ProviderInfo *find_provider(const std::vector<kpr::ProviderInfo> &ps, const std::string &name);
// The entry of the provider `name` that loaded (not the failed duplicates), as a copy; nullopt when none.
std::optional<kpr::ProviderInfo> loaded_info(const kpr::Runtime &rt, const std::string &name);
const kpr::Answer *find_answer(const kpr::Plan &plan, const std::string &name);
bool contains(const std::string &haystack, const std::string &needle);

// Runs a program and collects its exit code, stdout and stderr. The child gets this process's
// environment minus every KPR_* variable, plus `env`. A child running past `timeout_s` is killed
// (exit_code = -1).
struct CommandResult {
    int exit_code = -1;
    std::string out, err;
    std::string all() const { return out + err; }
};
CommandResult run_command(const std::vector<std::string> &argv,
                          const std::vector<std::pair<std::string, std::string>> &env = {}, int timeout_s = 120);
// run_command with kpr_binary() as argv[0].
CommandResult run_kpr(const std::vector<std::string> &args,
                      const std::vector<std::pair<std::string, std::string>> &env = {}, int timeout_s = 120);

} // namespace kpr_test

// Shared pieces of the `kpr` command: global options, runtime creation, output helpers.
#pragma once

#include <kpr/runtime.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../src/util/json_text.hpp"

#include <functional>
#include <string>
#include <vector>

namespace kpr::cli {

struct Globals {
    std::string config;
    std::vector<std::string> provider_paths;
    std::string log_level;
    std::string simulate;  // --simulate-device NAME or FILE (plan)
    bool no_gpu = false;
};

// The runtime as the global options say. Throws kpr::Error.
Runtime make_runtime(const Globals &g);

// A fixed-width text table.
class Table {
public:
    explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    std::string str() const;

private:
    std::vector<std::vector<std::string>> rows_;
};

using kpr::human_bytes;
uint32_t parse_type(const std::string &name);  // ggml's names, case-insensitive; throws kpr::Error (exit 2)
nlohmann::json device_json(const Device &d);

// Subcommands register themselves: each adds its CLI11 subcommand and returns the action to run.
using Action = std::function<int()>;
struct Command {
    CLI::App *app;
    Action action;
};
// Each command file registers its adder at static-initialisation time, so a new command is one new file:
//   static const bool registered = register_command(40, add_mycommand);
// `order` sorts the help listing.
using CommandAdder = Command (*)(CLI::App &root, Globals &g);
bool register_command(int order, CommandAdder add);
std::vector<CommandAdder> registered_commands();
// kpr plan --model: every weight tensor's winner and memory; exit 1 when a tensor has none.
int plan_model(const Globals &g, const std::string &model, uint32_t ncols, const std::string &device, bool json);

} // namespace kpr::cli

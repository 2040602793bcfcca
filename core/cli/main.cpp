// kpr: the command line. Exit codes: 0 success, 1 a failed check or bad input, 2 a usage error.
#include "cli.hpp"

#include <kpr/error.hpp>
#include <kpr/formats.hpp>

#include <cerrno>
#include <cstdlib>
#include <iostream>

namespace kpr::cli {

Runtime make_runtime(const Globals &g) {
    RuntimeOptions o;
    if (!g.config.empty()) o.config_file = g.config;
    for (auto &p : g.provider_paths) o.provider_paths.emplace_back(p);
    o.log_level = g.log_level;
    o.probe_gpus = !g.no_gpu;
    if (!g.simulate.empty()) {
        if (auto d = simulated_device(g.simulate)) o.extra_devices.push_back(*d);
        else if (g.simulate.find('/') != std::string::npos || g.simulate.ends_with(".toml"))
            o.extra_devices.push_back(load_device_file(g.simulate));
        else
            throw Error(fmt::format("--simulate-device: unknown device '{}' (built in: {}; or a TOML device file)",
                                    g.simulate, fmt::join(simulated_device_names(), ", ")),
                        2);
    }
    return Runtime::create(o);
}

std::string Table::str() const {
    std::vector<size_t> w;
    for (auto &r : rows_)
        for (size_t i = 0; i < r.size(); ++i) {
            if (w.size() <= i) w.push_back(0);
            w[i] = std::max(w[i], r[i].size());
        }
    std::string out;
    for (auto &r : rows_) {
        std::string line;
        for (size_t i = 0; i < r.size(); ++i)
            line += i + 1 == r.size() ? r[i] : fmt::format("{:<{}}  ", r[i], w[i]);
        line.erase(line.find_last_not_of(' ') + 1);
        out += line + "\n";
    }
    return out;
}

uint32_t parse_type(const std::string &name) {
    if (auto t = formats::type_from_name(name)) return *t;
    std::vector<std::string> names;
    for (auto *ti : formats::supported_types()) names.push_back(ti->name);
    throw Error(fmt::format("--type: unknown weight type '{}' (kpr knows: {})", name, fmt::join(names, ", ")), 2);
}

namespace {
std::vector<std::pair<int, CommandAdder>> &registry() {
    static std::vector<std::pair<int, CommandAdder>> r;
    return r;
}
} // namespace

bool register_command(int order, CommandAdder add) {
    registry().emplace_back(order, add);
    return true;
}

std::vector<CommandAdder> registered_commands() {
    auto r = registry();
    std::stable_sort(r.begin(), r.end(), [](auto &a, auto &b) { return a.first < b.first; });
    std::vector<CommandAdder> out;
    for (auto &[o, a] : r) out.push_back(a);
    return out;
}

namespace {
// CLI11 2.1 converts an integer option with strtoull/strtoll and keeps what they return: --rows
// 99999999999999999999999 became 18446744073709551615 and --experts -1 the same, without a word. Every
// integer option gets this check, run on the text before the conversion: a value that does not fit 64 bits,
// or a negative value for an unsigned option, is a usage error that names the option (exit 2).
std::string integer_fits(const std::string &text, bool is_unsigned) {
    const char *s = text.c_str();
    while (*s == ' ' || *s == '\t') ++s;
    if (is_unsigned && *s == '-') return fmt::format("{} is negative: expected 0 or more", text);
    errno = 0;
    char *end = nullptr;
    if (is_unsigned) (void)std::strtoull(s, &end, 0);
    else (void)std::strtoll(s, &end, 0);
    if (end == s) return "";  // not a number at all: CLI11's conversion reports it
    if (errno == ERANGE)
        return fmt::format("{} is out of range: the most is {}", text,
                           is_unsigned ? std::to_string(UINT64_MAX) : std::to_string(INT64_MAX));
    return "";
}

void check_integer_options(CLI::App &app) {
    for (CLI::Option *o : app.get_options()) {
        const std::string t = o->get_type_name();  // "UINT", "INT:POSITIVE", ... (validators append)
        bool u = t.rfind("UINT", 0) == 0, i = t.rfind("INT", 0) == 0;
        if (u || i) o->check(CLI::Validator([u](std::string &v) { return integer_fits(v, u); }, ""));
    }
    for (CLI::App *sub : app.get_subcommands([](CLI::App *) { return true; })) check_integer_options(*sub);
}
} // namespace

} // namespace kpr::cli

int main(int argc, char **argv) {
    using namespace kpr::cli;
    CLI::App app{"kpr: a kernel provider runtime for LLM inference.\n"
                 "Probes the machine, loads provider libraries, and negotiates which kernel serves each op."};
    app.set_version_flag("--version", "kpr " + kpr::version());
    app.require_subcommand(1);
    app.fallthrough();  // global options are accepted after the subcommand too
    Globals g;
    app.add_option("--config", g.config, "configuration file (TOML); default: $KPR_CONFIG, else none");
    app.add_option("--provider-path", g.provider_paths, "directory to search for providers first (repeatable)");
    app.add_option("--log-level", g.log_level, "trace, debug, info, warn (default), error, off; default: $KPR_LOG")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
    app.add_flag("--no-gpu", g.no_gpu, "do not probe GPUs");

    std::vector<Command> commands;
    for (CommandAdder add : registered_commands()) commands.push_back(add(app, g));
    check_integer_options(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    try {
        for (auto &c : commands)
            if (c.app && c.app->parsed()) return c.action();
    } catch (const kpr::Error &e) {
        std::cerr << "kpr: error: " << e.what() << "\n";
        return e.exit_code();
    } catch (const std::exception &e) {
        std::cerr << "kpr: error: " << e.what() << "\n";
        return 1;
    }
    return 2;
}

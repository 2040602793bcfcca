// kpr selftest (contained by default: each provider's cases in a child process) and its hidden runner.
#include "cli.hpp"

#include <kpr/selftest.hpp>

#include <filesystem>
#include <iostream>
#include <unistd.h>

namespace kpr::cli {

std::string device_line(const Device &d);

// The runner a contained self-test forks and executes: this very program, with the same global options,
// at its hidden `selftest-child` subcommand. For SelftestOptions::child_command (kpr doctor and kpr calibrate
// can use it too: declare it in cli.hpp).
std::vector<std::string> selftest_child_command(const Globals &g, const std::string &device);
std::vector<std::string> selftest_child_command(const Globals &g, const std::string &device) {
    std::vector<std::string> c = {"/proc/self/exe"};
    if (!g.config.empty()) c.insert(c.end(), {"--config", std::filesystem::absolute(g.config).string()});
    for (auto &p : g.provider_paths) c.insert(c.end(), {"--provider-path", std::filesystem::absolute(p).string()});
    if (!g.log_level.empty()) c.insert(c.end(), {"--log-level", g.log_level});
    // A CPU case needs no GPU: the child then never touches the CUDA driver.
    if (g.no_gpu || device == "cpu") c.push_back("--no-gpu");
    c.push_back("selftest-child");
    return c;
}

static void note_state(const Runtime &rt, const std::vector<SelftestResult> &all, bool complete) {
    std::string w = record_selftest_results(rt, all, complete);
    if (!w.empty()) std::cerr << "kpr: warning: " << w << "\n";
}

static nlohmann::json result_json(const SelftestResult &r) {
    nlohmann::json j = {{"provider", r.provider}, {"device", r.device}, {"case", r.case_name}, {"kind", r.kind},
                        {"op", r.op}, {"error", r.error}, {"threshold", r.tolerance}, {"act_rounding", r.act_rounding},
                        {"ms", r.ms}, {"seed", r.seed}, {"result", to_string(r.outcome)}, {"message", r.message}};
    if (r.quantized_error >= 0) {
        j["quantized_error"] = r.quantized_error;
        j["quantized_threshold"] = r.quantized_tolerance;
    }
    return j;
}

static std::string fmt_err(double e) { return std::isfinite(e) ? fmt::format("{:.2e}", e) : "inf"; }

static void print_table(const std::vector<SelftestResult> &rs) {
    Table t({"provider", "device", "case", "error", "threshold", "rounded err", "time", "result"});
    for (auto &r : rs)
        t.add({r.provider, r.device, r.case_name, r.outcome == SelftestResult::Outcome::Skipped ? "-" : fmt_err(r.error),
               r.kind == "internal" ? "-" : fmt::format("{:.1e}", r.tolerance),
               r.quantized_error >= 0 ? fmt::format("{} <= {:.0e} ({})", fmt_err(r.quantized_error), r.quantized_tolerance, r.act_rounding)
                                      : "-",
               fmt::format("{:.2f} ms", r.ms), to_string(r.outcome)});
    std::cout << t.str();
    for (auto &r : rs)
        if (!r.message.empty()) std::cout << fmt::format("  {} {} {}: {}\n", r.provider, r.case_name, to_string(r.outcome), r.message);
}

static std::vector<std::string> selftest_devices(const Runtime &rt, const std::string &device) {
    std::vector<std::string> devs;
    if (!device.empty()) devs.push_back(device);
    else
        for (auto &d : rt.devices())
            if (!d.desc.simulated) devs.push_back(d.id);
    return devs;
}

// --list: the cases a run would run, with what each checks; exit 1 when a provider could not describe one, or
// when --filter matched none
static int list_cases(const Runtime &rt, const std::vector<std::string> &devices, SelftestOptions o, bool json) {
    std::vector<SelftestCaseInfo> all;
    for (auto &dev : devices) {
        o.device = dev;
        auto cs = list_selftests(rt, o);
        all.insert(all.end(), cs.begin(), cs.end());
    }
    size_t bad = 0;
    for (auto &c : all) bad += !c.error.empty();
    if (json) {
        nlohmann::json j = {{"count", all.size()}, {"errors", bad}, {"cases", nlohmann::json::array()}};
        for (auto &c : all) {
            nlohmann::json e = {{"provider", c.provider}, {"device", c.device}, {"case", c.case_name}, {"kind", c.kind},
                                {"op", c.op}, {"threshold", c.tolerance}, {"act_rounding", c.act_rounding}};
            if (c.quantized_tolerance > 0) e["quantized_threshold"] = c.quantized_tolerance;
            if (!c.parity_provider.empty()) e["parity_provider"] = c.parity_provider;
            if (!c.error.empty()) e["error"] = c.error;
            j["cases"].push_back(e);
        }
        std::cout << json_text(j, 2) << "\n";
    } else {
        Table t({"provider", "device", "case", "kind", "op", "threshold", "rounded"});
        for (auto &c : all)
            t.add({c.provider, c.device, c.case_name, c.error.empty() ? c.kind : "ERROR", c.op,
                   c.error.empty() ? fmt::format("{:.1e}", c.tolerance) : "-",
                   c.quantized_tolerance > 0 ? fmt::format("{:.0e} ({})", c.quantized_tolerance, c.act_rounding)
                   : !c.parity_provider.empty() ? "= " + c.parity_provider
                                                : (c.act_rounding.empty() ? "-" : c.act_rounding)});
        std::cout << t.str();
        for (auto &c : all)
            if (!c.error.empty()) std::cout << fmt::format("  {} {} ERROR: {}\n", c.provider, c.case_name, c.error);
        std::cout << fmt::format("{} case(s){}\n", all.size(), bad ? fmt::format(", {} that the provider could not describe", bad) : "");
    }
    if (all.empty() && !o.filter.empty()) {
        std::cerr << fmt::format("kpr: error: no self-test cases matched --filter '{}' (case names are case-sensitive)\n",
                                 o.filter);
        return 1;
    }
    return bad ? 1 : 0;
}

Command add_selftest(CLI::App &root, Globals &g) {
    struct Args {
        std::string provider, device, filter;
        uint64_t seed = 0;
        bool json = false, in_process = false, list = false;
        double case_timeout = 60;
    };
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand("selftest", "run providers' self-tests against the core's reference");
    sub->add_flag("--in-process", a->in_process,
                  "run the cases in this process (for a debugger); default: each provider in a child process, "
                  "so a crash or hang fails that provider only");
    sub->add_option("--case-timeout", a->case_timeout, "seconds a case may run before it is killed and failed (default 60)")
        ->check(CLI::Range(0.001, 86400.0));
    sub->add_option("--provider", a->provider, "only this provider");
    sub->add_option("--device", a->device, "only this device (default: every device found)");
    sub->add_option("--seed", a->seed, "reproduce a run (the seed is printed)");
    sub->add_option("--filter", a->filter, "only cases whose name contains this");
    sub->add_flag("--json", a->json, "machine-readable output");
    sub->add_flag("--list", a->list,
                  "list the cases a run would run (name, op, thresholds) without running any; reads the providers' "
                  "case tables in this process");
    return {sub, [&g, a] {
                Runtime rt = make_runtime(g);
                SelftestOptions o;
                o.provider = a->provider;
                o.filter = a->filter;
                if (a->list) return list_cases(rt, selftest_devices(rt, a->device), o, a->json);
                o.contained = !a->in_process;
                o.case_timeout_s = a->case_timeout;
                std::vector<SelftestResult> all;
                bool tty = isatty(STDERR_FILENO) && !a->json;
                for (auto &dev : selftest_devices(rt, a->device)) {
                    o.device = dev;
                    o.child_command = selftest_child_command(g, dev);
                    if (!o.seed) o.seed = a->seed ? a->seed : 0;
                    auto rs = run_selftests(rt, o, [&](const SelftestResult &r) {
                        if (tty) std::cerr << fmt::format("\r  {} {} {} ...{:20}", r.provider, r.case_name, to_string(r.outcome), "") << std::flush;
                    });
                    if (tty) std::cerr << "\r" << std::string(100, ' ') << "\r";
                    if (!rs.empty()) o.seed = rs.front().seed;  // one seed for the whole run
                    all.insert(all.end(), rs.begin(), rs.end());
                }
                size_t failed = 0, passed = 0, skipped = 0;
                for (auto &r : all)
                    (r.outcome == SelftestResult::Outcome::Failed ? failed
                     : r.outcome == SelftestResult::Outcome::Passed ? passed : skipped)++;
                if (a->json) {
                    nlohmann::json j = {{"seed", all.empty() ? 0 : all.front().seed}, {"passed", passed},
                                        {"failed", failed}, {"skipped", skipped}, {"results", nlohmann::json::array()}};
                    for (auto &r : all) j["results"].push_back(result_json(r));
                    std::cout << json_text(j, 2) << "\n";
                } else {
                    print_table(all);
                    std::cout << fmt::format("{} passed, {} failed, {} skipped (seed {}; rerun with --seed {})\n", passed,
                                             failed, skipped, all.empty() ? 0 : all.front().seed, all.empty() ? 0 : all.front().seed);
                }
                note_state(rt, all, a->filter.empty());
                if (all.empty() && !a->filter.empty()) {
                    // a filter that selects nothing is a mistake (often the case: "q4_K", not "q4_k"), not a pass
                    std::cerr << fmt::format("kpr: error: no self-test cases matched --filter '{}' (case names are "
                                             "case-sensitive; `kpr selftest --list` shows them)\n",
                                             a->filter);
                    return 1;
                }
                if (all.empty()) std::cerr << "kpr: no self-test cases matched\n";
                return failed ? 1 : 0;
            }};
}

// The hidden runner of contained self-tests (see run_selftest_child): one provider on one device.
Command add_selftest_child(CLI::App &root, Globals &g) {
    struct Args {
        std::string provider, device = "cpu", filter;
        uint64_t seed = 0;
        uint32_t from = 0;
        int fd = -1;
    };
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand("selftest-child", "runs one provider's self-test cases for `kpr selftest`");
    sub->group("");  // hidden from --help
    sub->add_option("--provider", a->provider)->required();
    sub->add_option("--device", a->device);
    sub->add_option("--seed", a->seed)->required();
    sub->add_option("--filter", a->filter);
    sub->add_option("--from", a->from);
    sub->add_option("--result-fd", a->fd)->required()->check(CLI::Range(3, 1023));
    return {sub, [&g, a] {
                Runtime rt = make_runtime(g);
                SelftestOptions o;
                o.provider = a->provider;
                o.device = a->device;
                o.seed = a->seed;
                o.filter = a->filter;
                o.first_case = a->from;
                return run_selftest_child(rt, o, a->fd);
            }};
}

static const bool add_selftest_registered = register_command(50, add_selftest);
static const bool add_selftest_child_registered = register_command(1000, add_selftest_child);

} // namespace kpr::cli

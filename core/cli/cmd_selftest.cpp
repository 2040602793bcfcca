// kpr selftest and kpr doctor.
#include "cli.hpp"

#include <kpr/selftest.hpp>

#include <iostream>
#include <unistd.h>

namespace kpr::cli {

std::string device_line(const Device &d);

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

Command add_selftest(CLI::App &root, Globals &g) {
    struct Args {
        std::string provider, device, filter;
        uint64_t seed = 0;
        bool json = false;
    };
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand("selftest", "run providers' self-tests against the core's reference");
    sub->add_option("--provider", a->provider, "only this provider");
    sub->add_option("--device", a->device, "only this device (default: every device found)");
    sub->add_option("--seed", a->seed, "reproduce a run (the seed is printed)");
    sub->add_option("--filter", a->filter, "only cases whose name contains this");
    sub->add_flag("--json", a->json, "machine-readable output");
    return {sub, [&g, a] {
                Runtime rt = make_runtime(g);
                SelftestOptions o;
                o.provider = a->provider;
                o.filter = a->filter;
                std::vector<SelftestResult> all;
                bool tty = isatty(STDERR_FILENO) && !a->json;
                for (auto &dev : selftest_devices(rt, a->device)) {
                    o.device = dev;
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
                    std::cout << j.dump(2) << "\n";
                } else {
                    print_table(all);
                    std::cout << fmt::format("{} passed, {} failed, {} skipped (seed {}; rerun with --seed {})\n", passed,
                                             failed, skipped, all.empty() ? 0 : all.front().seed, all.empty() ? 0 : all.front().seed);
                }
                if (all.empty()) std::cerr << "kpr: no self-test cases matched\n";
                return failed ? 1 : 0;
            }};
}

static const bool add_selftest_registered = register_command(50, add_selftest);

} // namespace kpr::cli

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

Command add_doctor(CLI::App &root, Globals &g) {
    auto *sub = root.add_subcommand("doctor", "check this machine: devices, providers, self-tests, in one summary");
    auto json = std::make_shared<bool>(false);
    sub->add_flag("--json", *json, "machine-readable output");
    return {sub, [&g, json] {
                Runtime rt = make_runtime(g);
                auto ps = rt.providers();
                std::vector<SelftestResult> all;
                for (auto &dev : selftest_devices(rt, "")) {
                    SelftestOptions o;
                    o.device = dev;
                    auto rs = run_selftests(rt, o);
                    all.insert(all.end(), rs.begin(), rs.end());
                }
                size_t loaded = 0, failed_p = 0, disabled = 0, failed = 0, passed = 0, skipped = 0;
                for (auto &p : ps) (p.state == ProviderState::Loaded ? loaded : p.state == ProviderState::Failed ? failed_p : disabled)++;
                for (auto &r : all)
                    (r.outcome == SelftestResult::Outcome::Failed ? failed
                     : r.outcome == SelftestResult::Outcome::Passed ? passed : skipped)++;
                if (*json) {
                    nlohmann::json j;
                    j["version"] = version();
                    j["devices"] = nlohmann::json::array();
                    for (auto &d : rt.devices()) j["devices"].push_back(device_json(d));
                    j["providers"] = nlohmann::json::array();
                    for (auto &p : ps) j["providers"].push_back({{"name", p.name}, {"file", p.file}, {"state", to_string(p.state)}, {"reason", p.reason}});
                    j["selftests"] = {{"passed", passed}, {"failed", failed}, {"skipped", skipped}};
                    j["config_files"] = rt.config_files();
                    j["warnings"] = rt.warnings();
                    j["ok"] = failed == 0;
                    std::cout << j.dump(2) << "\n";
                    return failed ? 1 : 0;
                }
                std::cout << fmt::format("kpr {} doctor\n\ndevices\n", version());
                for (auto &d : rt.devices()) std::cout << "  " << device_line(d) << "\n";
                std::cout << "\nconfig: " << (rt.config_files().empty() ? "none (defaults)" : fmt::format("{}", fmt::join(rt.config_files(), ", "))) << "\n";
                std::cout << "\nproviders\n";
                for (auto &p : ps)
                    std::cout << fmt::format("  {:<18} {:<8} {:<9} {}\n", p.name, p.version.empty() ? "-" : p.version,
                                             to_string(p.state), p.reason.empty() ? p.file : p.reason);
                std::cout << "\nself-tests\n";
                std::map<std::string, std::array<size_t, 3>> per;
                for (auto &r : all) per[r.provider + " on " + r.device][(int)r.outcome]++;
                for (auto &[k, v] : per)
                    std::cout << fmt::format("  {:<30} {} passed, {} failed, {} skipped\n", k, v[0], v[1], v[2]);
                for (auto &r : all)
                    if (r.outcome == SelftestResult::Outcome::Failed)
                        std::cout << fmt::format("  FAIL {} {} on {}: {}\n", r.provider, r.case_name, r.device, r.message);
                for (auto &w : rt.warnings()) std::cout << "\nwarning: " << w << "\n";
                std::cout << fmt::format("\nsummary: {} device(s), {} provider(s) loaded, {} failed to load, {} disabled; "
                                         "self-tests {} passed, {} failed, {} skipped (seed {}) -> {}\n",
                                         rt.devices().size(), loaded, failed_p, disabled, passed, failed, skipped,
                                         all.empty() ? 0 : all.front().seed, failed ? "PROBLEMS" : "OK");
                return failed ? 1 : 0;
            }};
}

static const bool add_selftest_registered = register_command(50, add_selftest);
static const bool add_doctor_registered = register_command(90, add_doctor);

} // namespace kpr::cli

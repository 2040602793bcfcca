// kpr doctor: devices, providers, self-tests and a model-shaped workload, in one summary.
#include "cli.hpp"

#include <kpr/formats.hpp>
#include <kpr/memory.hpp>
#include <kpr/selftest.hpp>

#include <cmath>
#include <set>

#include <iostream>

namespace kpr::cli {

std::string device_line(const Device &d);
std::vector<std::string> selftest_child_command(const Globals &g, const std::string &device);  // cmd_selftest.cpp

namespace {

std::vector<std::string> real_devices(const Runtime &rt) {
    std::vector<std::string> out;
    for (auto &d : rt.devices())
        if (!d.desc.simulated) out.push_back(d.id);
    return out;
}

// One transformer layer of a Llama-3-8B-shaped model: (name, rows, cols).
struct Projection {
    const char *name;
    uint64_t rows, cols;
};
const Projection kLayer[] = {{"attn_q", 4096, 4096},     {"attn_k", 1024, 4096},    {"attn_v", 1024, 4096},
                             {"attn_output", 4096, 4096}, {"ffn_gate", 14336, 4096}, {"ffn_up", 14336, 4096},
                             {"ffn_down", 4096, 14336}};

struct WorkloadRow {
    std::string device, type, providers;
    double ms = 0, gbps = 0, max_err = 0;
    uint64_t bytes = 0;
    std::string problem;
};

// Runs the layer's projections through their plans with random weights; checks sampled rows against
// the core's reference and times a decode step (ncols 1).
WorkloadRow run_layer(const Runtime &rt, const Device &dev, uint32_t type) {
    WorkloadRow row;
    row.device = dev.id;
    row.type = formats::type_name(type);
    std::set<std::string> providers;
    uint64_t seed = 0x6b7072;
    for (const Projection &p : kLayer) {
        kpr_op_desc op = gemv(type, p.rows, p.cols, 1);
        auto plan = rt.plan(op, dev.id);
        if (!plan->ok()) {
            row.problem = fmt::format("{}: {}", p.name, plan->decision());
            return row;
        }
        providers.insert(plan->provider());
        uint64_t bytes = weight_bytes(op);
        const formats::TypeInfo *ti = formats::type_info(type);
        std::vector<uint8_t> w(bytes);
        formats::fill_random_blocks(type, ++seed, w.data(), bytes / ti->block_bytes);
        std::vector<float> x(p.cols), y(p.rows);
        formats::fill_random_floats(++seed, x.data(), x.size());
        Buffer wb(dev, bytes), xb(dev, x.size() * 4), yb(dev, y.size() * 4);
        wb.upload(w.data(), bytes);
        xb.upload(x.data(), x.size() * 4);
        Stream s(dev);
        PreparedOp prepared = plan->prepare(wb.data(), bytes);
        auto *xp = static_cast<const float *>(xb.data());
        auto *yp = static_cast<float *>(yb.data());
        prepared.run(xp, yp, 1, nullptr, s.handle());  // warm-up
        s.synchronize();
        const int reps = 3;
        s.record_start();
        for (int r = 0; r < reps; ++r) prepared.run(xp, yp, 1, nullptr, s.handle());
        row.ms += s.elapsed_ms() / reps;
        row.bytes += bytes;
        yb.download(y.data(), y.size() * 4);
        uint64_t rb = formats::row_bytes(type, p.cols);
        double maxref = 0, maxdiff = 0;
        for (uint64_t r = 0; r < p.rows; r += p.rows / 16) {
            double ref = formats::dot_row(type, w.data() + r * rb, x.data(), p.cols);
            maxref = std::max(maxref, std::fabs(ref));
            maxdiff = std::max(maxdiff, std::fabs(ref - y[r]));
        }
        row.max_err = std::max(row.max_err, maxref > 0 ? maxdiff / maxref : maxdiff);
    }
    row.gbps = row.bytes / (row.ms * 1e-3) / 1e9;
    for (auto &p : providers) row.providers += (row.providers.empty() ? "" : ",") + p;
    // Activation-quantizing kernels sit near 1e-2 of this metric; a broken one is far above.
    if (!(row.max_err < 5e-2)) row.problem = fmt::format("sampled rows differ from the reference by {:.2e}", row.max_err);
    return row;
}

} // namespace

Command add_doctor(CLI::App &root, Globals &g) {
    auto *sub = root.add_subcommand("doctor", "check this machine: devices, providers, self-tests, in one summary");
    auto json = std::make_shared<bool>(false);
    auto quick = std::make_shared<bool>(false);
    sub->add_flag("--json", *json, "machine-readable output");
    sub->add_flag("--no-workload", *quick, "skip the model-shaped workload (one Llama-8B-shaped layer per type)");
    return {sub, [&g, json, quick] {
                Runtime rt = make_runtime(g);
                auto ps = rt.providers();
                std::vector<SelftestResult> all;
                for (auto &dev : real_devices(rt)) {
                    SelftestOptions o;
                    o.device = dev;
                    // Contained, as `kpr selftest`: a provider whose self-test crashes or hangs fails, doctor goes on.
                    o.contained = true;
                    o.child_command = selftest_child_command(g, dev);
                    if (!all.empty()) o.seed = all.front().seed;  // one seed for the whole run
                    auto rs = run_selftests(rt, o);
                    all.insert(all.end(), rs.begin(), rs.end());
                }
                // A complete run: failures are recorded (quarantine), a clean provider loses its record.
                if (std::string w = record_selftest_results(rt, all, true); !w.empty())
                    std::cerr << "kpr: warning: " << w << "\n";
                size_t loaded = 0, failed_p = 0, disabled = 0, failed = 0, passed = 0, skipped = 0;
                for (auto &p : ps) (p.state == ProviderState::Loaded ? loaded : p.state == ProviderState::Failed ? failed_p : disabled)++;
                for (auto &r : all)
                    (r.outcome == SelftestResult::Outcome::Failed ? failed
                     : r.outcome == SelftestResult::Outcome::Passed ? passed : skipped)++;
                std::vector<WorkloadRow> work;
                if (!*quick)
                    for (auto &id : real_devices(rt))
                        for (const char *t : {"q8_0", "q4_K", "iq3_xxs"}) {
                            try {
                                work.push_back(run_layer(rt, rt.device(id), *formats::type_from_name(t)));
                            } catch (const Error &e) {
                                WorkloadRow r;
                                r.device = id;
                                r.type = t;
                                r.problem = e.what();
                                work.push_back(r);
                            }
                        }
                size_t work_failed = 0;
                for (auto &w : work) work_failed += !w.problem.empty();
                failed += work_failed;
                if (*json) {
                    nlohmann::json j;
                    j["version"] = version();
                    j["devices"] = nlohmann::json::array();
                    for (auto &d : rt.devices()) j["devices"].push_back(device_json(d));
                    j["providers"] = nlohmann::json::array();
                    for (auto &p : ps) j["providers"].push_back({{"name", p.name}, {"file", p.file}, {"state", to_string(p.state)}, {"reason", p.reason}});
                    j["selftests"] = {{"passed", passed}, {"failed", failed}, {"skipped", skipped}};
                    j["workload"] = nlohmann::json::array();
                    for (auto &w : work)
                        j["workload"].push_back({{"device", w.device}, {"type", w.type}, {"providers", w.providers},
                                                 {"ms_per_layer", w.ms}, {"gbps", w.gbps}, {"max_err", w.max_err},
                                                 {"problem", w.problem}});
                    j["config_files"] = rt.config_files();
                    j["warnings"] = rt.warnings();
                    j["ok"] = failed == 0;
                    std::cout << json_text(j, 2) << "\n";
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
                if (!work.empty()) {
                    std::cout << "\nworkload: one Llama-8B-shaped layer (q, k, v, o, gate, up, down), ncols 1\n";
                    Table t({"  device", "type", "provider", "ms/layer", "GB/s", "sampled err", "result"});
                    for (auto &w : work)
                        t.add({"  " + w.device, w.type, w.providers.empty() ? "-" : w.providers,
                               w.problem.empty() ? fmt::format("{:.2f}", w.ms) : "-",
                               w.problem.empty() ? fmt::format("{:.1f}", w.gbps) : "-",
                               w.problem.empty() ? fmt::format("{:.1e}", w.max_err) : "-",
                               w.problem.empty() ? "ok" : "FAIL: " + w.problem});
                    std::cout << t.str();
                }
                for (auto &w : rt.warnings()) std::cout << "\nwarning: " << w << "\n";
                std::cout << fmt::format("\nsummary: {} device(s), {} provider(s) loaded, {} failed to load, {} disabled; "
                                         "self-tests {} passed, {} failed, {} skipped (seed {}) -> {}\n",
                                         rt.devices().size(), loaded, failed_p, disabled, passed, failed, skipped,
                                         all.empty() ? 0 : all.front().seed, failed ? "PROBLEMS" : "OK");
                return failed ? 1 : 0;
            }};
}

static const bool add_doctor_registered = register_command(90, add_doctor);

} // namespace kpr::cli

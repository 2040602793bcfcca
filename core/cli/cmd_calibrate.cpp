// kpr calibrate: time the accepting providers for the keys a model (or a shapes file) needs and keep the
// winners in the calibration file that negotiation consults.
#include "cli.hpp"

#include <kpr/bench.hpp>
#include <kpr/calibration.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>
#include <kpr/selftest.hpp>

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

namespace kpr::cli {

std::vector<std::string> selftest_child_command(const Globals &g, const std::string &device);  // cmd_selftest.cpp

nlohmann::json bench_result_json(const bench::BenchResult &r);  // cmd_bench.cpp

namespace {

// One op per line: TYPE ROWS COLS [EXPERTS USED [X_SLOTS]]; '#' starts a comment.
std::vector<kpr_op_desc> read_shapes(const std::string &path, const std::vector<uint32_t> &ncols) {
    std::ifstream in(path);
    if (!in) throw Error(fmt::format("--shapes {}: cannot read the file", path));
    std::vector<kpr_op_desc> ops;
    std::string line;
    int no = 0;
    while (std::getline(in, line)) {
        ++no;
        if (auto h = line.find('#'); h != std::string::npos) line.erase(h);
        std::stringstream ss(line);
        std::string type;
        if (!(ss >> type)) continue;
        uint64_t rows = 0, cols = 0;
        uint32_t experts = 0, used = 0, xs = 1;
        if (!(ss >> rows >> cols) || rows == 0 || cols == 0)
            throw Error(fmt::format("{}:{}: expected TYPE ROWS COLS [EXPERTS USED [X_SLOTS]]", path, no));
        bool grouped = false;
        if (ss >> experts) {
            if (!(ss >> used)) throw Error(fmt::format("{}:{}: EXPERTS needs USED after it", path, no));
            grouped = true;
            if (!(ss >> xs)) xs = 1;
        }
        std::string extra;
        if (ss >> extra) throw Error(fmt::format("{}:{}: unexpected '{}'", path, no, extra));
        uint32_t t;
        try {
            t = parse_type(type);
        } catch (const Error &e) {
            throw Error(fmt::format("{}:{}: {}", path, no, e.what()));
        }
        for (uint32_t n : ncols) {
            kpr_op_desc op = grouped ? gemv_grouped(t, rows, cols, n, experts, used, xs) : gemv(t, rows, cols, n);
            try {
                validate(op);
            } catch (const Error &e) {
                throw Error(fmt::format("{}:{}: {}", path, no, e.what()));
            }
            ops.push_back(op);
        }
    }
    if (ops.empty()) throw Error(fmt::format("--shapes {}: no ops in the file", path));
    return ops;
}

} // namespace

Command add_calibrate(CLI::App &root, Globals &g) {
    struct Args {
        std::string model, shapes, device = "cpu", output, ncols = "1", providers;
        int reps = 9, warmup = 2;
        uint64_t rotate_mb = 0;
        bool json = false, no_selftest = false, replace_invalid = false;
    };
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand("calibrate",
                                    "time the accepting providers for the keys a model needs; keep the winners for negotiation");
    sub->add_option("--model", a->model, "GGUF model: calibrate every weight matrix's key");
    sub->add_option("--shapes", a->shapes, "a text file, one op per line: TYPE ROWS COLS [EXPERTS USED [X_SLOTS]]");
    sub->add_option("--device", a->device, "cpu (default) or cuda:N");
    sub->add_option("--ncols", a->ncols, "activation columns to calibrate: 1 (default), 1-8, 1,8");
    sub->add_option("--output", a->output,
                    "calibration file (default: [runtime] calibration_file, else next to the config file, else "
                    "$XDG_CONFIG_HOME/kpr/calibration.toml or ~/.config/kpr/calibration.toml)");
    sub->add_option("--provider", a->providers, "only these providers (comma-separated)");
    sub->add_option("--reps", a->reps, "timed samples per provider and key (default 9)")->check(CLI::Range(1, 100000));
    sub->add_option("--warmup", a->warmup, "warm-up passes (default 2)")->check(CLI::Range(0, 1000));
    sub->add_option("--rotate-mb", a->rotate_mb, "weight bytes to rotate through, MiB (default as kpr bench)");
    sub->add_flag("--no-selftest", a->no_selftest, "do not run self-tests first (a failing provider could then win)");
    sub->add_flag("--json", a->json, "print the entries written as JSON");
    sub->add_flag("--replace-invalid", a->replace_invalid,
                  "when the existing calibration file cannot be read (a syntax error, a bad entry, a newer version), "
                  "start a new one in its place, losing its entries; without this flag that is an error and the file "
                  "is left as it is");
    return {sub, [&g, a] {
                if (a->model.empty() == a->shapes.empty()) throw Error("calibrate: give --model FILE.gguf or --shapes FILE", 2);
                std::vector<uint32_t> ncols = bench::parse_ncols(a->ncols);
                std::vector<kpr_op_desc> ops;
                std::unique_ptr<gguf::File> file;
                if (!a->model.empty()) {
                    file = std::make_unique<gguf::File>(gguf::File::open(a->model));
                    for (uint32_t n : ncols)
                        for (auto &m : bench::model_ops(*file, n)) ops.push_back(m.op);
                } else {
                    ops = read_shapes(a->shapes, ncols);
                }
                Runtime rt = make_runtime(g);
                const Device &dev = rt.device(a->device);
                // One key once.
                std::vector<kpr_op_desc> keys;
                std::set<std::string> seen;
                for (auto &op : ops)
                    if (seen.insert(calibration::key_of(dev.id, op)).second) keys.push_back(op);

                std::filesystem::path path = a->output.empty() ? calibration::default_path(rt) : std::filesystem::path(a->output);
                calibration::File cal;
                std::error_code ec;
                if (std::filesystem::exists(path, ec)) {
                    try {
                        cal = calibration::File::load(path);
                    } catch (const Error &e) {
                        // Never discard somebody's entries silently: stop before any timing, file unchanged.
                        if (!a->replace_invalid)
                            throw Error(fmt::format("{}: the existing calibration file cannot be used ({}); fix or move it, "
                                                    "or pass --replace-invalid to start a new one in its place",
                                                    path.string(), e.what()));
                        std::cerr << fmt::format("kpr: warning: --replace-invalid: replacing {} with a new calibration file: {}\n",
                                                 path.string(), e.what());
                        cal = calibration::File{};
                    }
                }
                cal.devices[dev.id] = calibration::record_of(dev);

                bench::BenchOptions bo;
                bo.device = dev.id;
                bo.reps = a->reps;
                bo.warmup = a->warmup;
                bo.rotate_bytes = a->rotate_mb << 20;
                std::stringstream ps(a->providers);
                for (std::string p; std::getline(ps, p, ',');)
                    if (!p.empty()) bo.providers.push_back(p);

                // Self-tests per (provider, weight type), once each.
                std::map<std::pair<std::string, uint32_t>, std::string> selftest;  // "" passed, else why not
                auto selftest_of = [&](const std::string &provider, uint32_t type) -> std::string {
                    auto k = std::make_pair(provider, type);
                    if (auto it = selftest.find(k); it != selftest.end()) return it->second;
                    std::string tname = formats::type_name(type), why;
                    SelftestOptions so;
                    so.provider = provider;
                    so.device = dev.id;
                    so.filter = tname;
                    // Contained, as `kpr selftest`: a self-test that crashes or hangs excludes the provider.
                    so.contained = true;
                    so.child_command = selftest_child_command(g, dev.id);
                    auto results = run_selftests(rt, so);
                    size_t ran = 0;
                    for (auto &r : results) {
                        // A case that crashed or hung (or a runner that failed) has no op: the filter chose it.
                        bool this_type = r.op.find(" " + tname + " ") != std::string::npos || r.kind == "internal" ||
                                         r.case_name == "(enumerate)" || r.op.empty();
                        if (!this_type) continue;
                        ++ran;
                        if (r.outcome == SelftestResult::Outcome::Failed && why.empty())
                            why = fmt::format("self-test '{}' failed: {}", r.case_name, r.message);
                    }
                    (void)ran;  // a provider with no case for the type has nothing against it
                    return selftest[k] = why;
                };

                nlohmann::json out = nlohmann::json::array();
                Table tab({"key", "winner", "times (us)", "excluded"});
                size_t written = 0;
                std::set<std::string> recorded;  // providers hashed in this run
                for (size_t i = 0; i < keys.size(); ++i) {
                    const kpr_op_desc &op = keys[i];
                    std::cerr << fmt::format("calibrate: [{}/{}] {} on {}\n", i + 1, keys.size(), describe(op), dev.id);
                    auto results = bench::bench_op(rt, op, bo, 0);
                    calibration::Entry e;
                    e.device = dev.id;
                    e.op = op;
                    double best = 0;
                    for (auto &r : results) {
                        if (!r.error.empty() || r.samples == 0) {
                            e.excluded[r.provider] = r.error.empty() ? "no samples" : "failed: " + r.error;
                            continue;
                        }
                        if (!a->no_selftest) {
                            std::string why = selftest_of(r.provider, op.weight_type);
                            if (!why.empty()) {
                                e.excluded[r.provider] = why;
                                continue;
                            }
                        }
                        e.times[r.provider] = r.median_us;
                        if (e.winner.empty() || r.median_us < best) e.winner = r.provider, best = r.median_us;
                    }
                    if (results.empty()) {
                        std::cerr << fmt::format("calibrate: no provider accepts {} on {}; skipped\n", describe(op), dev.id);
                        continue;
                    }
                    for (auto &[p, _] : e.times)
                        if (!cal.providers.count(p) || cal.providers[p].sha256.empty() || !recorded.count(p)) {
                            for (auto &info : rt.providers())
                                if (info.name == p && info.state != ProviderState::Failed) cal.providers[p] = calibration::record_of(info);
                            recorded.insert(p);
                        }
                    cal.put(e);
                    ++written;
                    std::string times, excl;
                    for (auto &[p, us] : e.times) times += fmt::format("{}{}={:.2f}", times.empty() ? "" : " ", p, us);
                    for (auto &[p, why] : e.excluded) excl += fmt::format("{}{}: {}", excl.empty() ? "" : "; ", p, why);
                    tab.add({describe(op), e.winner.empty() ? "-" : e.winner, times, excl});
                    nlohmann::json j = {{"device", dev.id}, {"op", describe(op)}, {"winner", e.winner}, {"times_us", e.times},
                                        {"excluded", e.excluded}, {"results", nlohmann::json::array()}};
                    for (auto &r : results) j["results"].push_back(bench_result_json(r));
                    out.push_back(j);
                }
                cal.save(path);
                if (a->json) std::cout << json_text(out, 2) << "\n";
                else std::cout << tab.str();
                std::cerr << fmt::format("kpr: {} calibration entr{} written to {}\n", written, written == 1 ? "y" : "ies",
                                         path.string());
                return 0;
            }};
}

static const bool add_calibrate_registered = register_command(70, add_calibrate);

} // namespace kpr::cli

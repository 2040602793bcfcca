// kpr bench: every provider that accepts an op, timed side by side; or a model's decode window.
#include "cli.hpp"

#include <kpr/bench.hpp>
#include <kpr/formats.hpp>
#include <kpr/gguf.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace kpr::cli {

// Shared with cmd_calibrate.cpp (declared there).
nlohmann::json bench_result_json(const bench::BenchResult &r) {
    nlohmann::json j = {{"provider", r.provider},
                        {"device", r.device},
                        {"device_name", r.device_name},
                        {"op", r.op_kind},
                        {"type", r.type},
                        {"rows", r.rows},
                        {"cols", r.cols},
                        {"ncols", r.ncols},
                        {"median_us", r.median_us},
                        {"min_us", r.min_us},
                        {"max_us", r.max_us},
                        {"p10_us", r.p10_us},
                        {"p90_us", r.p90_us},
                        {"spread", r.spread},
                        {"samples", r.samples},
                        {"gbps", r.gbps},
                        {"bandwidth_fraction", r.bandwidth_fraction},
                        {"weight_bytes", r.weight_bytes},
                        {"copies", r.copies},
                        {"winner", r.winner},
                        {"timing", r.device.rfind("cuda", 0) == 0 ? (r.prequeued ? "gpu, queued behind a hold" : "gpu, host-launched")
                                                                   : "host clock"}};
    if (r.op_kind == "gemv_grouped") j["experts"] = r.experts, j["experts_used"] = r.experts_used;
    if (!r.error.empty()) j["error"] = r.error;
    return j;
}

// A progress bar on a terminal (stderr), plain lines otherwise.
class ProgressOut {
public:
    explicit ProgressOut(bool quiet) : quiet_(quiet), tty_(isatty(fileno(stderr))) {}
    ~ProgressOut() { clear(); }
    void item(const std::string &what) {  // a new unit of work starts
        if (quiet_) return;
        ++items_;
        if (!tty_) std::cerr << fmt::format("bench: [{}{}] {}\n", items_, total_ ? fmt::format("/{}", total_) : "", what);
    }
    void set_total(size_t n) { total_ = n; }
    void note(const std::string &what) {  // a step outside the count
        if (!quiet_ && !tty_) std::cerr << "bench: " << what << "\n";
    }
    void update(const std::string &what, size_t done, size_t total) {
        if (quiet_ || !tty_) return;
        const int W = 30;
        int fill = total ? (int)(W * done / total) : W;
        std::string label = what.size() > 60 ? what.substr(0, 57) + "..." : what;
        std::cerr << fmt::format("\r[{}{}] {:3d}% {}{}{:<60}", std::string(fill, '#'), std::string(W - fill, '.'),
                                 total ? (int)(100 * done / total) : 100, total_ ? fmt::format("({}/{}) ", items_, total_) : "",
                                 "", label)
                  << std::flush;
        shown_ = true;
    }
    void clear() {
        if (shown_) std::cerr << "\r" << std::string(120, ' ') << "\r" << std::flush;
        shown_ = false;
    }

private:
    bool quiet_, tty_;
    bool shown_ = false;
    size_t items_ = 0, total_ = 0;
};

nlohmann::json conditions_json(const Runtime &rt, const Device &d, const std::string &command) {
    nlohmann::json c = nlohmann::json::object();
    for (auto &[k, v] : bench::conditions(rt, d)) c[k] = v;
    c["command"] = command;
    return c;
}

std::vector<std::string> split_list(const std::string &s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string x;
    while (std::getline(ss, x, ','))
        if (!x.empty()) out.push_back(x);
    return out;
}

namespace {

std::string command_line(int argc_hint = 0) {
    (void)argc_hint;
    std::string s;
    if (std::FILE *f = std::fopen("/proc/self/cmdline", "rb")) {
        int c;
        while ((c = std::fgetc(f)) != EOF) s += c ? (char)c : ' ';
        std::fclose(f);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

nlohmann::json bandwidth_json(const bench::Bandwidth &b) {
    return {{"device", b.device}, {"gbps", b.gbps}, {"median_gbps", b.median_gbps}, {"bytes", b.bytes},
            {"method", b.method}, {"peak_gbps", b.peak_gbps}};
}

nlohmann::json decode_json(const bench::DecodeWindow &w) {
    nlohmann::json j = {{"model", w.model}, {"device", w.device}, {"architecture", w.architecture}, {"ncols", w.ncols},
                        {"steps", w.steps}, {"step_us", w.step_us}, {"step_min_us", w.step_min_us},
                        {"step_max_us", w.step_max_us}, {"tokens_per_s", w.tokens_per_s}, {"gbps", w.gbps},
                        {"bandwidth_fraction", w.bandwidth_fraction}, {"bytes_per_step", w.bytes_per_step}};
    j["categories"] = nlohmann::json::object();
    for (auto &[c, us] : w.categories) j["categories"][c] = us;
    j["tensors"] = nlohmann::json::array();
    for (auto &t : w.tensors)
        j["tensors"].push_back({{"name", t.name}, {"category", t.category}, {"type", t.type}, {"provider", t.provider},
                                {"op", t.op}, {"rows", t.rows}, {"cols", t.cols}, {"experts", t.experts},
                                {"experts_used", t.experts_used}, {"weight_bytes", t.weight_bytes},
                                {"median_us", t.median_us}});
    return j;
}

struct Args {
    std::string types, ncols = "1", op = "gemv", device = "cpu", model, report, providers;
    uint64_t rows = 0, cols = 0;
    uint32_t experts = 0, used = 0, x_slots = 1;
    int reps = 15, warmup = 2, steps = 5;
    uint64_t rotate_mb = 0, bandwidth_mb = 0;
    bool json = false, no_bandwidth = false, quiet = false, host_launch = false;
    double warmup_ms = 50;
};

int run_bench(const Globals &g, const Args &a) {
    std::vector<uint32_t> ncols = bench::parse_ncols(a.ncols);
    bool model = !a.model.empty();
    std::vector<uint32_t> types;
    if (!model) {
        if (a.types.empty() || !a.rows || !a.cols)
            throw Error("bench: give --type, --rows and --cols (one op or a sweep), or --model FILE.gguf", 2);
        for (auto &t : split_list(a.types)) types.push_back(parse_type(t));
        if (a.op == "gemv_grouped" && (!a.experts || !a.used))
            throw Error("--op gemv_grouped needs --experts and --experts-used", 2);
    } else if (!a.types.empty() || a.rows || a.cols) {
        throw Error("bench: give either --model or --type/--rows/--cols, not both", 2);
    }
    std::unique_ptr<gguf::File> file;
    if (model) file = std::make_unique<gguf::File>(gguf::File::open(a.model));
    Runtime rt = make_runtime(g);
    const Device &dev = rt.device(a.device);
    ProgressOut prog(a.quiet || (a.json && !isatty(fileno(stderr))));

    nlohmann::json report = {{"conditions", conditions_json(rt, dev, command_line())},
                             {"bandwidth", nlohmann::json::array()},
                             {"ops", nlohmann::json::array()},
                             {"decode", nlohmann::json::array()}};
    double bw = 0;
    if (!a.no_bandwidth) {
        prog.note("measuring the read bandwidth of " + dev.id);
        bench::BandwidthOptions bo;
        bo.bytes = a.bandwidth_mb << 20;
        bench::Bandwidth b = bench::measure_read_bandwidth(dev, bo);
        bw = b.gbps;
        report["bandwidth"].push_back(bandwidth_json(b));
        if (!a.json)
            std::cout << fmt::format("{} read bandwidth: {:.1f} GB/s best, {:.1f} median ({}){}\n", dev.id, b.gbps,
                                     b.median_gbps, b.method,
                                     b.peak_gbps > 0 ? fmt::format("; spec peak {:.0f} GB/s", b.peak_gbps) : "");
    }
    if (!model) {
        bench::BenchOptions bo;
        bo.device = a.device;
        bo.providers = split_list(a.providers);
        bo.reps = a.reps;
        bo.warmup = a.warmup;
        bo.warmup_ms = a.warmup_ms;
        bo.prequeue = !a.host_launch;
        bo.rotate_bytes = a.rotate_mb << 20;
        std::vector<kpr_op_desc> ops;
        for (uint32_t t : types)
            for (uint32_t n : ncols)
                ops.push_back(a.op == "gemv_grouped" ? gemv_grouped(t, a.rows, a.cols, n, a.experts, a.used, a.x_slots)
                                                     : gemv(t, a.rows, a.cols, n));
        prog.set_total(ops.size());
        Table tab({"op", "provider", "median us", "p10-p90 us", "spread", "GB/s", "of bw", "copies", ""});
        for (auto &op : ops) {
            prog.item(describe(op));
            auto results = bench::bench_op(rt, op, bo, bw, [&](const std::string &w, size_t d, size_t t) { prog.update(w, d, t); });
            prog.clear();
            if (results.empty()) std::cerr << fmt::format("kpr: no provider accepts {} on {}\n", describe(op), dev.id);
            for (auto &r : results) {
                report["ops"].push_back(bench_result_json(r));
                if (!r.error.empty())
                    tab.add({describe(op), r.provider, "error", r.error, "", "", "", "", ""});
                else
                    tab.add({describe(op), r.provider, fmt::format("{:.2f}", r.median_us),
                             fmt::format("{:.2f}-{:.2f}", r.p10_us, r.p90_us), fmt::format("{:.1f}%", 100 * r.spread),
                             fmt::format("{:.1f}", r.gbps), bw > 0 ? fmt::format("{:.0f}%", 100 * r.bandwidth_fraction) : "-",
                             std::to_string(r.copies), r.winner ? "(negotiated)" : ""});
            }
        }
        if (a.json) std::cout << json_text(report["ops"], 2) << "\n";
        else std::cout << tab.str();
    } else {
        bench::DecodeOptions dopt;
        dopt.device = a.device;
        dopt.steps = a.steps;
        dopt.warmup = std::max(1, std::min(a.warmup, 3));
        prog.set_total(1);
        prog.item(fmt::format("decode window of {} (ncols {})", a.model, a.ncols));
        auto windows = bench::bench_decode(rt, *file, ncols, dopt, bw,
                                           [&](const std::string &w, size_t d, size_t t) { prog.update(w, d, t); });
        prog.clear();
        for (auto &w : windows) report["decode"].push_back(decode_json(w));
        if (a.json) {
            std::cout << json_text(report["decode"], 2) << "\n";
        } else {
            std::cout << fmt::format("decode window of {} ({}) on {}: every weight matrix once per step, median of {} steps\n",
                                     a.model, windows.empty() ? "" : windows[0].architecture, dev.id, a.steps);
            Table tab({"ncols", "step us", "min-max", "tokens/s", "GB/step", "GB/s", "of bw", "attention", "ffn", "experts",
                       "output"});
            for (auto &w : windows) {
                std::map<std::string, double> c(w.categories.begin(), w.categories.end());
                auto pct = [&](const char *k) {
                    return c.count(k) ? fmt::format("{:.0f} us ({:.0f}%)", c[k], 100 * c[k] / std::max(1e-9, w.step_us)) : "-";
                };
                tab.add({std::to_string(w.ncols), fmt::format("{:.0f}", w.step_us),
                         fmt::format("{:.0f}-{:.0f}", w.step_min_us, w.step_max_us), fmt::format("{:.1f}", w.tokens_per_s),
                         fmt::format("{:.3f}", w.bytes_per_step / 1e9), fmt::format("{:.1f}", w.gbps),
                         bw > 0 ? fmt::format("{:.0f}%", 100 * w.bandwidth_fraction) : "-", pct("attention"), pct("ffn"),
                         pct("experts"), pct("output")});
            }
            std::cout << tab.str();
            std::map<std::string, int> by_provider;
            for (auto &w : windows)
                for (auto &t : w.tensors) by_provider[fmt::format("{} (ncols {})", t.provider, w.ncols)]++;
            for (auto &[p, n] : by_provider) std::cout << fmt::format("  {} tensors served by {}\n", n, p);
        }
    }
    if (!a.report.empty()) {
        bench::write_report(a.report, json_text(report));
        std::cerr << fmt::format("kpr: report written to {}/report.html (data: report.json)\n", a.report);
    }
    return 0;
}

} // namespace

Command add_bench(CLI::App &root, Globals &g) {
    auto a = std::make_shared<Args>();
    auto *sub = root.add_subcommand("bench", "time every provider that accepts an op side by side, or a model's decode window");
    sub->add_option("--model", a->model, "GGUF model: run every weight matrix once per decode step (the decode window)");
    sub->add_option("--type", a->types, "weight type(s), comma-separated: q8_0,q4_K,iq3_xxs,...");
    sub->add_option("--rows", a->rows, "output rows (ne1)")->check(CLI::PositiveNumber);
    sub->add_option("--cols", a->cols, "input columns, K (ne0)")->check(CLI::PositiveNumber);
    sub->add_option("--ncols", a->ncols, "activation columns: 1, 1-8, 1,2,4-8 (default 1)");
    sub->add_option("--op", a->op, "gemv (default) or gemv_grouped")->check(CLI::IsMember({"gemv", "gemv_grouped"}));
    sub->add_option("--experts", a->experts, "gemv_grouped: stacked experts");
    sub->add_option("--experts-used", a->used, "gemv_grouped: experts used per column (random distinct ids)");
    sub->add_option("--x-slots", a->x_slots, "gemv_grouped: 1 (x broadcast) or experts-used");
    sub->add_option("--device", a->device, "cpu (default) or cuda:N");
    sub->add_option("--provider", a->providers, "only these providers (comma-separated); default every one that accepts");
    sub->add_option("--reps", a->reps, "timed samples per provider, interleaved (default 15)")->check(CLI::Range(1, 100000));
    sub->add_option("--warmup", a->warmup, "warm-up passes over the weight copies (default 2)")->check(CLI::Range(0, 1000));
    sub->add_option("--warmup-ms", a->warmup_ms, "and warm up for at least this long per provider and op (default 50)")
        ->check(CLI::Range(0.0, 60000.0));
    sub->add_flag("--host-launch", a->host_launch,
                  "GPU: time the calls as the host launches them (default: each sample is queued behind a short hold, "
                  "so the GPU's own time is measured)");
    sub->add_option("--steps", a->steps, "--model: timed decode steps (default 5)")->check(CLI::Range(1, 100000));
    sub->add_option("--rotate-mb", a->rotate_mb,
                    "weight bytes to rotate through, MiB (default: max(4 x last-level cache, 512 MiB CPU / 1 GiB GPU))");
    sub->add_option("--bandwidth-mb", a->bandwidth_mb, "bytes the bandwidth measurement reads, MiB (default 512 CPU / 1024 GPU)");
    sub->add_flag("--no-bandwidth", a->no_bandwidth, "skip the bandwidth measurement (bandwidth_fraction stays 0)");
    sub->add_flag("--json", a->json, "a JSON list: one object per (provider, op), or per ncols with --model");
    sub->add_option("--report", a->report, "write DIR/report.html (inline SVG plots) and DIR/report.json");
    sub->add_flag("--quiet", a->quiet, "no progress output");
    return {sub, [&g, a] { return run_bench(g, *a); }};
}

static const bool add_bench_registered = register_command(60, add_bench);

} // namespace kpr::cli

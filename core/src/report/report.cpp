// kpr bench --report DIR: one self-contained HTML page (inline SVG drawn here; no scripts, fonts or
// styles from the network) and the JSON it was drawn from.
#include <kpr/bench.hpp>
#include <kpr/error.hpp>

#include "util/atomic_file.hpp"
#include "util/json_text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

namespace kpr::bench {

namespace {

using json = nlohmann::json;

std::string esc(const std::string &s) {
    std::string o;
    for (char c : s) {
        switch (c) {
        case '<': o += "&lt;"; break;
        case '>': o += "&gt;"; break;
        case '&': o += "&amp;"; break;
        case '"': o += "&quot;"; break;
        default: o += c;
        }
    }
    return o;
}

const char *kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string color(size_t i) { return kPalette[i % (sizeof kPalette / sizeof *kPalette)]; }

// A "nice" axis maximum and step.
std::pair<double, double> nice_axis(double maxv) {
    if (!(maxv > 0)) return {1, 0.25};
    double p = std::pow(10, std::floor(std::log10(maxv)));
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
        if (m * p >= maxv) return {m * p, m * p / 5};
    return {10 * p, 2 * p};
}

std::string num(double v) {
    if (v == 0) return "0";
    if (v == std::round(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
    if (std::fabs(v) >= 100) return fmt::format("{:.0f}", v);
    if (std::fabs(v) >= 10) return fmt::format("{:.1f}", v);
    return fmt::format("{:.2f}", v);
}

struct Series {
    std::string name;
    std::vector<std::pair<double, double>> pts;
};

std::string line_chart(const std::string &title, const std::string &xlabel, const std::string &ylabel,
                       const std::vector<Series> &series, double ref = 0, const std::string &ref_label = "") {
    const int W = 640, H = 340, L = 60, R = 190, T = 30, B = 45;
    double xmin = 1e300, xmax = -1e300, ymax = ref;
    for (auto &s : series)
        for (auto &[x, y] : s.pts) xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymax = std::max(ymax, y);
    if (xmin > xmax) xmin = 0, xmax = 1;
    if (xmin == xmax) xmin -= 1, xmax += 1;
    auto [ytop, ystep] = nice_axis(ymax * 1.05);
    auto X = [&](double x) { return L + (x - xmin) / (xmax - xmin) * (W - L - R); };
    auto Y = [&](double y) { return T + (1 - y / ytop) * (H - T - B); };
    std::string o = fmt::format(
        "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
        "role=\"img\"><title>{}</title><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>"
        "<text x=\"{}\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        W, H, W, H, esc(title), L, esc(title));
    for (double y = 0; y <= ytop + 1e-9; y += ystep)
        o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1f}\" "
                         "font-size=\"11\" text-anchor=\"end\">{}</text>",
                         L, W - R, Y(y), Y(y), L - 5, Y(y) + 4, num(y));
    std::set<double> xs;
    for (auto &s : series)
        for (auto &p : s.pts) xs.insert(p.first);
    for (double x : xs)
        o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>", X(x), H - B + 15, num(x));
    o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#000\"/>", L, W - R, H - B, H - B);
    o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#000\"/>", L, L, T, H - B);
    o += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">{}</text>", (L + W - R) / 2, H - 8,
                     esc(xlabel));
    o += fmt::format("<text x=\"14\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
                     (T + H - B) / 2, (T + H - B) / 2, esc(ylabel));
    if (ref > 0)
        o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>"
                         "<text x=\"{}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#555\">{}</text>",
                         L, W - R, Y(ref), Y(ref), L + 4, Y(ref) - 4, esc(ref_label));
    for (size_t i = 0; i < series.size(); ++i) {
        auto pts = series[i].pts;
        std::sort(pts.begin(), pts.end());
        std::string poly;
        for (auto &[x, y] : pts) poly += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
        if (pts.size() > 1)
            o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>", color(i), poly);
        for (auto &[x, y] : pts)
            o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{}: {} at {}</title></circle>",
                             X(x), Y(y), color(i), esc(series[i].name), num(y), num(x));
        o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" "
                         "font-size=\"11\">{}</text>",
                         W - R + 10, T + 18 * i, color(i), W - R + 27, T + 18 * i + 10, esc(series[i].name));
    }
    return o + "</svg>";
}

// Horizontal stacked bars: one bar per label, segments per category.
std::string stacked_bars(const std::string &title, const std::vector<std::string> &labels,
                         const std::vector<std::string> &cats, const std::vector<std::vector<double>> &vals,
                         const std::string &unit) {
    const int W = 680, L = 90, R = 150, T = 30, BH = 26, G = 10;
    int H = T + (int)labels.size() * (BH + G) + 30;
    double maxv = 0;
    for (auto &v : vals) {
        double s = 0;
        for (double x : v) s += x;
        maxv = std::max(maxv, s);
    }
    auto [top, step] = nice_axis(maxv * 1.02);
    auto X = [&](double v) { return L + v / top * (W - L - R); };
    std::string o = fmt::format("<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                                "viewBox=\"0 0 {} {}\" role=\"img\"><title>{}</title><rect width=\"100%\" height=\"100%\" "
                                "fill=\"#fff\"/><text x=\"{}\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{}</text>",
                                W, H, W, H, esc(title), L, esc(title));
    for (double v = 0; v <= top + 1e-9; v += step)
        o += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{:.1f}\" y=\"{}\" "
                         "font-size=\"10\" text-anchor=\"middle\">{}</text>",
                         X(v), X(v), T, H - 25, X(v), H - 12, num(v));
    o += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>", W - R + 30, H - 12, esc(unit));
    for (size_t i = 0; i < labels.size(); ++i) {
        int y = T + (int)i * (BH + G);
        o += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}</text>", L - 6, y + BH / 2 + 4,
                         esc(labels[i]));
        double acc = 0;
        for (size_t c = 0; c < cats.size() && c < vals[i].size(); ++c) {
            double v = vals[i][c];
            if (v <= 0) continue;
            o += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: {} {}</title></rect>",
                             X(acc), y, X(acc + v) - X(acc), BH, color(c), esc(cats[c]), num(v), esc(unit));
            acc += v;
        }
    }
    for (size_t c = 0; c < cats.size(); ++c)
        o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" "
                         "font-size=\"11\">{}</text>",
                         W - R + 10, T + 18 * c, color(c), W - R + 27, T + 18 * c + 10, esc(cats[c]));
    return o + "</svg>";
}

// A grid: one row per tensor, one column per ncols, the cell coloured by the chosen provider.
std::string provider_grid(const json &decode) {
    std::vector<std::string> names, providers;
    std::map<std::string, std::map<uint32_t, std::string>> cell;
    std::vector<uint32_t> ncols;
    for (auto &w : decode) {
        uint32_t nc = w.value("ncols", 1u);
        ncols.push_back(nc);
        for (auto &t : w["tensors"]) {
            std::string n = t.value("name", ""), p = t.value("provider", "");
            if (!cell.count(n)) names.push_back(n);
            cell[n][nc] = p;
            if (std::find(providers.begin(), providers.end(), p) == providers.end()) providers.push_back(p);
        }
    }
    const int CW = 46, RH = 13, L = 230, T = 40;
    int W = L + (int)ncols.size() * CW + 180, H = T + (int)names.size() * RH + 20;
    std::string o = fmt::format("<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                                "viewBox=\"0 0 {} {}\" role=\"img\"><title>chosen provider per tensor</title>"
                                "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/><text x=\"10\" y=\"18\" font-size=\"14\" "
                                "font-weight=\"bold\">Chosen provider per tensor (columns: ncols)</text>",
                                W, H, W, H);
    for (size_t j = 0; j < ncols.size(); ++j)
        o += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>", L + j * CW + CW / 2,
                         T - 6, ncols[j]);
    for (size_t i = 0; i < names.size(); ++i) {
        int y = T + (int)i * RH;
        o += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text>", L - 6, y + RH - 3,
                         esc(names[i]));
        for (size_t j = 0; j < ncols.size(); ++j) {
            std::string p = cell[names[i]][ncols[j]];
            size_t k = std::find(providers.begin(), providers.end(), p) - providers.begin();
            o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#fff\"><title>{} ncols {}: "
                             "{}</title></rect>",
                             L + j * CW, y, CW, RH, color(k), esc(names[i]), ncols[j], esc(p));
        }
    }
    for (size_t k = 0; k < providers.size(); ++k)
        o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" "
                         "font-size=\"11\">{}</text>",
                         L + ncols.size() * CW + 15, T + 18 * k, color(k), L + ncols.size() * CW + 32, T + 18 * k + 10,
                         esc(providers[k]));
    return o + "</svg>";
}

std::string cell(const json &v) {
    if (v.is_string()) return esc(v.get<std::string>());
    if (v.is_number_float()) return num(v.get<double>());
    if (v.is_null()) return "";
    return esc(json_text(v));
}

} // namespace

void write_report(const std::string &dir, const std::string &json_text) {
    json j = json::parse(json_text);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(fmt::format("--report {}: cannot create the folder: {}", dir, ec.message()));

    std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kpr bench report</title>"
                    "<style>body{font-family:sans-serif;margin:24px;max-width:1100px;color:#222}"
                    "table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}"
                    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
                    "td:first-child,th:first-child{text-align:left}#conditions td{text-align:left}svg.plot{display:block;margin:10px 0 24px;"
                    "border:1px solid #eee}h2{border-bottom:1px solid #ddd;padding-bottom:4px}</style></head><body>\n"
                    "<h1>kpr bench report</h1>\n";
    // Conditions.
    if (j.contains("conditions")) {
        h += "<h2>Conditions</h2><table id=\"conditions\">";
        for (auto &[k, v] : j["conditions"].items()) h += fmt::format("<tr><th>{}</th><td>{}</td></tr>", esc(k), cell(v));
        h += "</table>\n";
    }
    double bw = 0;
    if (j.contains("bandwidth") && !j["bandwidth"].empty()) {
        h += "<h2>Read bandwidth, measured at the start of the run</h2><table id=\"bandwidth\"><tr><th>device</th><th>GB/s "
             "(best)</th><th>GB/s (median)</th><th>peak GB/s (spec)</th><th>method</th></tr>";
        for (auto &b : j["bandwidth"]) {
            bw = std::max(bw, b.value("gbps", 0.0));
            h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", cell(b["device"]),
                             num(b.value("gbps", 0.0)), num(b.value("median_gbps", 0.0)), num(b.value("peak_gbps", 0.0)),
                             cell(b["method"]));
        }
        h += "</table>\n";
    }
    // Ops: one chart per (op kind, rows x cols, experts), a line per provider and type.
    if (j.contains("ops") && !j["ops"].empty()) {
        std::map<std::string, std::map<std::string, Series>> groups;
        for (auto &r : j["ops"]) {
            if (r.value("median_us", 0.0) <= 0) continue;
            std::string g = fmt::format("{} {}x{}{}", r.value("op", "gemv"), r.value("rows", 0ull), r.value("cols", 0ull),
                                        r.value("experts", 1u) > 1 ? fmt::format(" x{} experts ({} used)", r.value("experts", 1u),
                                                                                 r.value("experts_used", 1u))
                                                                   : "");
            std::string s = fmt::format("{} {}", r.value("provider", ""), r.value("type", ""));
            auto &ser = groups[g][s];
            ser.name = s;
            ser.pts.emplace_back(r.value("ncols", 1u), r.value("gbps", 0.0));
        }
        h += "<h2>GB/s of weights against ncols</h2>\n";
        for (auto &[g, m] : groups) {
            std::vector<Series> ss;
            for (auto &[_, s] : m) ss.push_back(s);
            h += line_chart(g, "ncols (activation columns)", "GB/s of weights", ss, bw, bw > 0 ? "measured read bandwidth" : "");
        }
        h += "<table id=\"ops\"><tr><th>provider</th><th>device</th><th>op</th><th>type</th><th>rows</th><th>cols</th>"
             "<th>ncols</th><th>median us</th><th>p10</th><th>p90</th><th>GB/s</th><th>of bandwidth</th><th>copies</th>"
             "<th>winner</th><th>error</th></tr>";
        for (auto &r : j["ops"])
            h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                             "<td>{}</td><td>{}</td><td>{}</td><td>{:.0f}%</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                             cell(r["provider"]), cell(r["device"]), cell(r.value("op", json("gemv"))), cell(r["type"]),
                             cell(r["rows"]), cell(r["cols"]), cell(r["ncols"]), num(r.value("median_us", 0.0)),
                             num(r.value("p10_us", 0.0)), num(r.value("p90_us", 0.0)), num(r.value("gbps", 0.0)),
                             100 * r.value("bandwidth_fraction", 0.0), cell(r.value("copies", json(0))),
                             r.value("winner", false) ? "yes" : "", cell(r.value("error", json(""))));
        h += "</table>\n";
    }
    // Decode window.
    if (j.contains("decode") && !j["decode"].empty()) {
        auto &d = j["decode"];
        h += fmt::format("<h2>Decode window: {}</h2>\n", esc(d[0].value("model", "")));
        std::vector<std::string> labels, cats = {"attention", "ffn", "experts", "output"};
        std::vector<std::vector<double>> vals;
        std::vector<Series> tps(1);
        tps[0].name = "tokens/s bound";
        for (auto &w : d) {
            labels.push_back(fmt::format("ncols {}", w.value("ncols", 1u)));
            std::vector<double> v(cats.size(), 0);
            for (auto &[c, us] : w["categories"].items())
                for (size_t k = 0; k < cats.size(); ++k)
                    if (cats[k] == c) v[k] = us.get<double>();
            vals.push_back(v);
            tps[0].pts.emplace_back(w.value("ncols", 1u), w.value("tokens_per_s", 0.0));
        }
        h += stacked_bars("Time per decode step by category", labels, cats, vals, "us per step");
        h += line_chart("Tokens per second these projections allow", "ncols", "tokens/s", tps);
        h += "<table id=\"decode\"><tr><th>ncols</th><th>step us (median)</th><th>min</th><th>max</th><th>tokens/s</th>"
             "<th>GB/step</th><th>GB/s</th><th>of bandwidth</th>";
        for (auto &c : cats) h += "<th>" + c + " us</th>";
        h += "</tr>";
        for (size_t i = 0; i < d.size(); ++i) {
            auto &w = d[i];
            h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{}</td><td>{:.0f}%</td>",
                             w.value("ncols", 1u), num(w.value("step_us", 0.0)), num(w.value("step_min_us", 0.0)),
                             num(w.value("step_max_us", 0.0)), num(w.value("tokens_per_s", 0.0)),
                             w.value("bytes_per_step", 0ull) / 1e9, num(w.value("gbps", 0.0)),
                             100 * w.value("bandwidth_fraction", 0.0));
            for (double v : vals[i]) h += "<td>" + num(v) + "</td>";
            h += "</tr>";
        }
        h += "</table>\n<h2>Chosen provider per tensor</h2>\n" + provider_grid(d);
    }
    h += "<p style=\"color:#777;font-size:12px\">Written by kpr bench. Plots are inline SVG; the data is in report.json "
         "beside this page.</p></body></html>\n";

    // Each file through a temporary of its own (unique name, O_EXCL), every write, the fsync and the close
    // checked, then renamed into place: a full disk leaves the previous report (or none), never half of one.
    auto write = [&](const std::string &name, const std::string &text) {
        util::write_file_atomic((std::filesystem::path(dir) / name).string(), text);
    };
    write("report.json", kpr::json_text(j, 2) + "\n");
    write("report.html", h);
}

} // namespace kpr::bench

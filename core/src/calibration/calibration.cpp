// Calibration: measured winners per key, written by `kpr calibrate`, read back at start-up so negotiation
// consults them after force, disable and priority and before the providers' own scores. Entries whose
// device or providers changed since they were measured are ignored and reported as stale.
#include "runtime/internal.hpp"
#include "util/atomic_file.hpp"

#include <kpr/calibration.hpp>
#include <kpr/formats.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <unistd.h>

namespace kpr {

namespace calibration {

namespace fs = std::filesystem;

namespace {

std::string quote(const std::string &s) {
    std::string o = "\"";
    for (char c : s) {
        switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\t': o += "\\t"; break;
        default:
            // U+0000..U+001F and U+007F (DEL) may not appear raw in a TOML string.
            if ((unsigned char)c < 0x20 || c == 0x7f) o += fmt::format("\\u{:04x}", (unsigned)c);
            else o += c;
        }
    }
    return o + "\"";
}

// A bare TOML key when possible, else a quoted one.
std::string key(const std::string &s) {
    bool bare = !s.empty();
    for (char c : s) bare = bare && (std::isalnum((unsigned char)c) || c == '_' || c == '-');
    return bare ? s : quote(s);
}

const char *kind_name(uint32_t k) { return k == KPR_OP_GEMV_GROUPED ? "gemv_grouped" : "gemv"; }

// The registry of the path each runtime was started with (RuntimeOptions::calibration_file is not kept
// in RuntimeImpl).
std::mutex g_mu;
std::map<const RuntimeImpl *, fs::path> g_paths;

fs::path resolve_path(const Config &config, const std::optional<fs::path> &explicit_path) {
    if (explicit_path) return *explicit_path;
    if (config.calibration_file) return *config.calibration_file;
    if (!config.files.empty()) return fs::path(config.files.front()).parent_path() / "calibration.toml";
    if (const char *x = std::getenv("XDG_CONFIG_HOME"); x && *x) return fs::path(x) / "kpr" / "calibration.toml";
    if (const char *h = std::getenv("HOME"); h && *h) return fs::path(h) / ".config" / "kpr" / "calibration.toml";
    return fs::path("calibration.toml");
}

// FILE:LINE:COL of key k in t, or just FILE when t has no such key.
std::string at(const toml::table &t, const char *k, const std::string &where) {
    auto *n = t.get(k);
    if (!n) return where;
    return fmt::format("{}:{}:{}", n->source().path ? *n->source().path : where, n->source().begin.line,
                       n->source().begin.column);
}

template <typename T> T need(const toml::table &t, const char *k, const std::string &where) {
    auto v = t[k].value<T>();
    if (!v) throw Error(fmt::format("{}: key '{}' is missing or has the wrong type", at(t, k, where), k));
    return *v;
}

// An integer, or a float that holds a whole number (as toml++'s value<int64_t>() reads them). Not that
// function itself: it casts the float to int64_t before checking the range, undefined behaviour for
// 4294967e95 (UBSan, the `files` fuzz target).
std::optional<int64_t> integer(const toml::node *n) {
    if (!n) return std::nullopt;
    if (auto v = n->value_exact<int64_t>()) return v;
    if (auto d = n->value_exact<double>(); d && std::isfinite(*d) && *d >= -0x1p63 && *d < 0x1p63 && std::trunc(*d) == *d)
        return static_cast<int64_t>(*d);
    return std::nullopt;
}

// An integer for an unsigned field of type U. A value that does not fit (negative, too large) is an error:
// a cast would change it, silently, and save() would write 2^64 - 1 for rows = -1, which no TOML reader
// (this one included) accepts -- the file would no longer load.
template <typename U> U fit(const toml::table &t, const char *k, int64_t v, const std::string &where) {
    if (v < 0 || uint64_t(v) > uint64_t(std::numeric_limits<U>::max()))
        throw Error(fmt::format("{}: key '{}': {} is out of range (0 to {})", at(t, k, where), k, v,
                                uint64_t(std::numeric_limits<U>::max())));
    return static_cast<U>(v);
}
template <typename U> U need_unsigned(const toml::table &t, const char *k, const std::string &where) {
    auto v = integer(t.get(k));
    if (!v) throw Error(fmt::format("{}: key '{}' is missing or has the wrong type", at(t, k, where), k));
    return fit<U>(t, k, *v, where);
}
// Absent (or not an integer, as before): `def`.
template <typename U> U unsigned_or(const toml::table &t, const char *k, U def, const std::string &where) {
    auto v = integer(t.get(k));
    return v ? fit<U>(t, k, *v, where) : def;
}

// A time as TOML: three decimals where that is short; otherwise the shortest form that reads back the same
// (toml++ refuses a number longer than 126 characters, and 1e300 with three decimals has 304).
std::string number(double v) {
    if (std::isfinite(v) && std::fabs(v) < 1e15) return fmt::format("{:.3f}", v);
    return fmt::format("{}", v);
}

} // namespace

std::string key_of(const std::string &device, const kpr_op_desc &op) {
    return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}", device, op.kind, op.weight_type, op.rows, op.cols, op.ncols,
                       std::max<uint32_t>(op.n_experts, 1), std::max<uint32_t>(op.n_used, 1),
                       std::max<uint32_t>(op.x_slots, 1));
}

DeviceRecord record_of(const Device &d) {
    DeviceRecord r;
    r.id = d.id;
    r.name = d.desc.name;
    r.uuid = d.desc.uuid;
    if (d.is_cuda()) {
        r.cc = fmt::format("{}.{}", d.desc.cc_major, d.desc.cc_minor);
        r.driver = d.desc.driver_version;
    } else {
        r.features = cpu_feature_names(d.desc.cpu_features);
    }
    return r;
}

ProviderRecord record_of(const ProviderInfo &p) {
    return {p.name, p.version, p.file, p.file.empty() ? "" : sha256_file(p.file)};
}

std::string device_mismatch(const DeviceRecord &then, const DeviceRecord &now) {
    std::vector<std::string> d;
    if (then.uuid != now.uuid) d.push_back(fmt::format("uuid {} -> {}", then.uuid.empty() ? "-" : then.uuid, now.uuid.empty() ? "-" : now.uuid));
    if (then.name != now.name) d.push_back(fmt::format("name '{}' -> '{}'", then.name, now.name));
    if (then.cc != now.cc) d.push_back(fmt::format("compute capability {} -> {}", then.cc, now.cc));
    if (then.driver != now.driver) d.push_back(fmt::format("driver {} -> {}", then.driver, now.driver));
    if (then.features != now.features) d.push_back(fmt::format("CPU features '{}' -> '{}'", then.features, now.features));
    return fmt::format("{}", fmt::join(d, ", "));
}

File File::load(const fs::path &path) {
    toml::table root;
    try {
        root = toml::parse_file(path.string());
    } catch (const toml::parse_error &e) {
        throw Error(fmt::format("{}:{}:{}: {}", path.string(), e.source().begin.line, e.source().begin.column,
                                e.description()));
    }
    std::string where = path.string();
    File f;
    if (auto v = integer(root.get("version")); v && *v != 1)
        throw Error(fmt::format("{}: calibration file version {} is not one kpr reads (1)", where, *v));
    if (auto *devs = root["devices"].as_table())
        for (auto &[k, n] : *devs) {
            auto *t = n.as_table();
            if (!t) throw Error(fmt::format("{}: devices.{} must be a table", where, k.str()));
            DeviceRecord r;
            r.id = std::string(k.str());
            r.name = t->get("name") ? need<std::string>(*t, "name", where) : "";
            r.uuid = (*t)["uuid"].value_or(std::string());
            r.cc = (*t)["cc"].value_or(std::string());
            r.features = (*t)["cpu_features"].value_or(std::string());
            r.driver = unsigned_or<uint32_t>(*t, "driver", 0, where);
            f.devices[r.id] = r;
        }
    if (auto *ps = root["providers"].as_table())
        for (auto &[k, n] : *ps) {
            auto *t = n.as_table();
            if (!t) throw Error(fmt::format("{}: providers.{} must be a table", where, k.str()));
            ProviderRecord r;
            r.name = std::string(k.str());
            r.version = need<std::string>(*t, "version", where);
            r.file = (*t)["file"].value_or(std::string());
            r.sha256 = need<std::string>(*t, "sha256", where);
            f.providers[r.name] = r;
        }
    if (auto *es = root["entries"].as_array())
        for (auto &n : *es) {
            auto *t = n.as_table();
            if (!t) throw Error(fmt::format("{}: entries must be tables ([[entries]])", where));
            Entry e;
            e.device = need<std::string>(*t, "device", where);
            std::string kind = need<std::string>(*t, "kind", where), type = need<std::string>(*t, "type", where);
            auto tid = formats::type_from_name(type);
            if (!tid) throw Error(fmt::format("{}:{}: unknown weight type '{}'", where, t->source().begin.line, type));
            uint32_t ncols = need_unsigned<uint32_t>(*t, "ncols", where);
            uint64_t rows = need_unsigned<uint64_t>(*t, "rows", where), cols = need_unsigned<uint64_t>(*t, "cols", where);
            if (kind == "gemv_grouped")
                e.op = gemv_grouped(*tid, rows, cols, ncols, unsigned_or<uint32_t>(*t, "experts", 1, where),
                                    unsigned_or<uint32_t>(*t, "experts_used", 1, where),
                                    unsigned_or<uint32_t>(*t, "x_slots", 1, where));
            else if (kind == "gemv")
                e.op = gemv(*tid, rows, cols, ncols);
            else
                throw Error(fmt::format("{}:{}: unknown op kind '{}'", where, t->source().begin.line, kind));
            e.winner = (*t)["winner"].value_or(std::string());
            if (auto *times = (*t)["times"].as_table())
                for (auto &[p, v] : *times)
                    if (auto d = v.value<double>()) e.times[std::string(p.str())] = *d;
            if (auto *ex = (*t)["excluded"].as_table())
                for (auto &[p, v] : *ex) e.excluded[std::string(p.str())] = v.value_or(std::string());
            f.entries.push_back(std::move(e));
        }
    return f;
}

void File::put(const Entry &e) {
    std::string k = key_of(e.device, e.op);
    for (auto &x : entries)
        if (key_of(x.device, x.op) == k) {
            x = e;
            return;
        }
    entries.push_back(e);
}

void File::save(const fs::path &path) const {
    std::string o = "# kpr calibration: measured winners per key, written by `kpr calibrate`.\n"
                    "# Entries whose device or provider (version, library SHA-256) changed are ignored as stale.\n"
                    "version = 1\n";
    for (auto &[id, d] : devices) {
        o += fmt::format("\n[devices.{}]\nname = {}\nuuid = {}\n", key(id), quote(d.name), quote(d.uuid));
        if (!d.cc.empty()) o += fmt::format("cc = {}\ndriver = {}\n", quote(d.cc), d.driver);
        if (!d.features.empty()) o += fmt::format("cpu_features = {}\n", quote(d.features));
    }
    for (auto &[n, p] : providers)
        o += fmt::format("\n[providers.{}]\nversion = {}\nfile = {}\nsha256 = {}\n", key(n), quote(p.version),
                         quote(p.file), quote(p.sha256));
    for (auto &e : entries) {
        o += fmt::format("\n[[entries]]\ndevice = {}\nkind = \"{}\"\ntype = {}\nrows = {}\ncols = {}\nncols = {}\n",
                         quote(e.device), kind_name(e.op.kind), quote(formats::type_name(e.op.weight_type)), e.op.rows,
                         e.op.cols, e.op.ncols);
        if (e.op.kind == KPR_OP_GEMV_GROUPED)
            o += fmt::format("experts = {}\nexperts_used = {}\nx_slots = {}\n", e.op.n_experts, e.op.n_used, e.op.x_slots);
        o += fmt::format("winner = {}\n", quote(e.winner));
        std::vector<std::string> ts, xs;
        for (auto &[p, us] : e.times) ts.push_back(fmt::format("{} = {}", key(p), number(us)));
        for (auto &[p, why] : e.excluded) xs.push_back(fmt::format("{} = {}", key(p), quote(why)));
        o += fmt::format("times = {{ {} }}\n", fmt::join(ts, ", "));
        if (!xs.empty()) o += fmt::format("excluded = {{ {} }}\n", fmt::join(xs, ", "));
    }
    std::error_code ec;
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
    // A temporary of our own (unique name, O_EXCL), renamed over the file once written and synced.
    util::write_file_atomic(path.string(), o);
}

fs::path default_path(const Runtime &rt) {
    auto impl = rt.impl();
    {
        std::lock_guard<std::mutex> g(g_mu);
        if (auto it = g_paths.find(impl.get()); it != g_paths.end()) return it->second;
    }
    return resolve_path(impl->config, std::nullopt);
}

} // namespace calibration

void attach_calibration(RuntimeImpl &impl, const RuntimeOptions &opts) {
    namespace fs = std::filesystem;
    namespace cal = calibration;
    fs::path path = cal::resolve_path(impl.config, opts.calibration_file);
    {
        std::lock_guard<std::mutex> g(cal::g_mu);
        cal::g_paths[&impl] = path;
    }
    std::error_code ec;
    if (!fs::exists(path, ec)) return;
    cal::File file;
    try {
        file = cal::File::load(path);
    } catch (const Error &e) {
        impl.warnings.push_back(fmt::format("calibration file not used: {}", e.what()));
        spdlog::warn("{}", impl.warnings.back());
        return;
    }
    // Devices: present and unchanged, or stale (a device not on this machine is simply not used).
    std::map<std::string, std::string> device_stale;
    std::map<std::string, bool> device_ok;
    for (auto &[id, rec] : file.devices) {
        for (auto &d : impl.devices) {
            if (d.id != id || d.desc.simulated) continue;
            std::string why = cal::device_mismatch(rec, cal::record_of(d));
            if (why.empty()) device_ok[id] = true;
            else device_stale[id] = why;
        }
    }
    // Providers: hashed lazily, only those entries on present devices name.
    std::map<std::string, std::string> provider_stale;
    std::map<std::string, bool> provider_checked;
    auto provider_ok = [&](const std::string &name) -> bool {
        if (auto it = provider_checked.find(name); it != provider_checked.end()) return it->second;
        bool ok = true;
        auto rec = file.providers.find(name);
        auto p = impl.find(name);
        if (rec == file.providers.end()) {
            ok = false;
            provider_stale[name] = "not recorded in the file";
        } else if (!p) {
            ok = false;  // not loaded now: its time cannot matter, and it is no longer the same provider
            provider_stale[name] = "not loaded any more";
        } else if (p->info.version != rec->second.version) {
            ok = false;
            provider_stale[name] = fmt::format("version {} -> {}", rec->second.version, p->info.version);
        } else {
            std::string now;
            try {
                now = cal::sha256_file(p->info.file);
            } catch (const Error &e) {
                now = std::string("unreadable: ") + e.what();
            }
            if (now != rec->second.sha256) {
                ok = false;
                provider_stale[name] = fmt::format("library {} changed (sha256 {} -> {})", p->info.file,
                                                   rec->second.sha256.substr(0, 12), now.substr(0, 12));
            }
        }
        provider_checked[name] = ok;
        return ok;
    };

    auto table = std::make_shared<std::map<std::string, std::map<std::string, double>>>();
    std::map<std::string, size_t> stale_counts;  // reason -> entries
    size_t used = 0;
    for (auto &e : file.entries) {
        if (device_stale.count(e.device)) {
            ++stale_counts[fmt::format("device {} changed ({})", e.device, device_stale[e.device])];
            continue;
        }
        if (!device_ok.count(e.device)) continue;  // not on this machine (or no record of it)
        std::string why;
        for (auto &[p, us] : e.times)
            if (!provider_ok(p)) {
                why = fmt::format("provider '{}': {}", p, provider_stale[p]);
                break;
            }
        if (!why.empty()) {
            ++stale_counts[why];
            continue;  // the comparison no longer holds: ignore the whole entry
        }
        (*table)[cal::key_of(e.device, e.op)] = e.times;
        ++used;
    }
    for (auto &[why, n] : stale_counts) {
        impl.warnings.push_back(fmt::format("calibration {}: {} stale entr{} ignored: {}; run `kpr calibrate` again",
                                            path.string(), n, n == 1 ? "y" : "ies", why));
        spdlog::warn("{}", impl.warnings.back());
    }
    spdlog::info("calibration {}: {} entries in use", path.string(), used);
    if (table->empty()) return;
    impl.calibration = [table](const std::string &provider, const kpr_op_desc &op,
                               const Device &d) -> std::optional<double> {
        auto it = table->find(cal::key_of(d.id, op));
        if (it == table->end()) return std::nullopt;
        auto t = it->second.find(provider);
        if (t == it->second.end()) return std::nullopt;
        return t->second;
    };
}

} // namespace kpr

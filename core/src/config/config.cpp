// Reading the per-machine TOML configuration. Every error names file, line, column and key.
#include <kpr/config.hpp>
#include <kpr/error.hpp>

#include <toml++/toml.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fnmatch.h>
#include <sstream>

namespace kpr {
namespace {

std::string pos(const std::string &file, const toml::source_region &r) {
    return fmt::format("{}:{}:{}", file, r.begin.line, r.begin.column);
}

[[noreturn]] void fail(const std::string &file, const toml::node &n, const std::string &key, const std::string &what) {
    throw Error(fmt::format("{}: {}: {}", pos(file, n.source()), key, what));
}

const char *type_name(const toml::node &n) {
    switch (n.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    default: return "date/time";
    }
}

bool get_bool(const std::string &file, const toml::node &n, const std::string &key) {
    if (auto v = n.value_exact<bool>()) return *v;
    fail(file, n, key, fmt::format("expected a boolean (true or false), found {}", type_name(n)));
}

int64_t get_int(const std::string &file, const toml::node &n, const std::string &key) {
    if (auto v = n.value_exact<int64_t>()) return *v;
    fail(file, n, key, fmt::format("expected an integer, found {}", type_name(n)));
}

std::string get_string(const std::string &file, const toml::node &n, const std::string &key) {
    if (auto v = n.value_exact<std::string>()) return *v;
    fail(file, n, key, fmt::format("expected a string, found {}", type_name(n)));
}

const toml::table &get_table(const std::string &file, const toml::node &n, const std::string &key) {
    if (auto t = n.as_table()) return *t;
    fail(file, n, key, fmt::format("expected a table, found {}", type_name(n)));
}

void unknown_key(const std::string &file, const toml::key &k, const toml::node &, const std::string &key,
                 const std::vector<std::string> &allowed) {
    std::string leaf = key.substr(key.rfind('.') + 1);
    std::string hint = closest_name(leaf, allowed);
    throw Error(fmt::format("{}: {}: {}", pos(file, k.source()), key, hint.empty() ? fmt::format("unknown key (allowed: {})", fmt::join(allowed, ", "))
                                    : fmt::format("unknown key (did you mean '{}'?)", hint)));
}

bool is_sha256_hex(const std::string &s) {
    if (s.size() != 64) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
    return true;
}

ProviderSettings parse_provider(const std::string &file, const toml::table &t, const std::string &prefix,
                                bool in_rule) {
    static const std::vector<std::string> rule_keys = {"enabled", "force", "require", "priority", "options",
                                                       "quarantine_on_failure"};
    static const std::vector<std::string> file_keys = {"enabled", "force", "require", "priority", "options",
                                                       "quarantine_on_failure", "sha256"};
    const std::vector<std::string> &keys = in_rule ? rule_keys : file_keys;
    ProviderSettings s;
    s.where = pos(file, t.source());
    for (auto &&[k_, v] : t) {
        const toml::key &k = k_;  // clang 14 cannot capture a structured binding in a lambda
        std::string key = prefix + "." + std::string(k.str());
        auto where = [&](const std::string &value) { return fmt::format("{} ({} = {})", pos(file, k.source()), key, value); };
        if (k == "enabled") { bool b = get_bool(file, v, key); s.enabled = Setting<bool>{b, where(b ? "true" : "false")}; }
        else if (k == "force") { bool b = get_bool(file, v, key); s.force = Setting<bool>{b, where(b ? "true" : "false")}; }
        else if (k == "require") { bool b = get_bool(file, v, key); s.require = Setting<bool>{b, where(b ? "true" : "false")}; }
        else if (k == "priority") { int64_t i = get_int(file, v, key); s.priority = Setting<int64_t>{i, where(std::to_string(i))}; }
        else if (k == "quarantine_on_failure") { bool b = get_bool(file, v, key); s.quarantine_on_failure = Setting<bool>{b, where(b ? "true" : "false")}; }
        else if (k == "sha256" && !in_rule) {
            std::string h = get_string(file, v, key);
            if (!is_sha256_hex(h))
                fail(file, v, key, fmt::format("expected 64 hexadecimal digits (the output of sha256sum), found '{}'",
                                               h.size() > 80 ? h.substr(0, 77) + "..." : h));
            std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return (char)std::tolower(c); });
            s.sha256 = Setting<std::string>{h, where("\"" + h + "\"")};
        }
        else if (k == "options") {
            for (auto &&[ok, ov] : get_table(file, v, key)) {
                std::string okey = key + "." + std::string(ok.str());
                OptionSetting o;
                o.where = pos(file, ov.source());
                if (auto b = ov.value_exact<bool>()) o = {*b ? "true" : "false", "bool", o.where};
                else if (auto i = ov.value_exact<int64_t>()) o = {std::to_string(*i), "int", o.where};
                else if (auto f = ov.value_exact<double>()) o = {fmt::format("{}", *f), "float", o.where};
                else if (auto str = ov.value_exact<std::string>()) o = {*str, "string", o.where};
                else fail(file, ov, okey, fmt::format("an option value must be a boolean, integer, float or string, found {}", type_name(ov)));
                s.options[std::string(ok.str())] = o;
            }
        } else unknown_key(file, k, v, key, keys);
    }
    return s;
}

std::map<std::string, ProviderSettings> parse_providers(const std::string &file, const toml::node &n,
                                                         const std::string &prefix, bool in_rule) {
    std::map<std::string, ProviderSettings> out;
    for (auto &&[name, v] : get_table(file, n, prefix)) {
        std::string key = prefix + "." + std::string(name.str());
        out[std::string(name.str())] = parse_provider(file, get_table(file, v, key), key, in_rule);
    }
    return out;
}

} // namespace

void ProviderSettings::overlay(const ProviderSettings &o) {
    if (o.enabled) enabled = o.enabled;
    if (o.force) force = o.force;
    if (o.require) require = o.require;
    if (o.priority) priority = o.priority;
    if (o.sha256) sha256 = o.sha256;
    if (o.quarantine_on_failure) quarantine_on_failure = o.quarantine_on_failure;
    for (auto &[k, v] : o.options) options[k] = v;
}

Config Config::parse(const std::string &text, const std::string &file) {
    toml::table root;
    try {
        root = toml::parse(text, file);
    } catch (const toml::parse_error &e) {
        throw Error(fmt::format("{}: syntax error: {}", pos(file, e.source()), e.description()));
    }
    Config c;
    c.files.push_back(file);
    std::filesystem::path base = std::filesystem::path(file).parent_path();
    static const std::vector<std::string> top = {"runtime", "providers", "rules"};
    for (auto &&[k, v] : root) {
        std::string key(k.str());
        if (key == "runtime") {
            static const std::vector<std::string> rk = {"provider_paths", "log_level", "calibration_file",
                                                        "allow_untrusted_providers", "quarantine_on_failure",
                                                        "state_file"};
            for (auto &&[rk_, rv] : get_table(file, v, key)) {
                std::string rkey = "runtime." + std::string(rk_.str());
                if (rk_ == "provider_paths") {
                    auto *arr = rv.as_array();
                    if (!arr) fail(file, rv, rkey, fmt::format("expected an array of strings, found {}", type_name(rv)));
                    for (auto &&e : *arr) {
                        std::filesystem::path p = get_string(file, e, rkey);
                        c.provider_paths.push_back(p.is_relative() && !base.empty() ? base / p : p);
                    }
                } else if (rk_ == "calibration_file") {
                    std::filesystem::path p = get_string(file, rv, rkey);
                    c.calibration_file = p.is_relative() && !base.empty() ? base / p : p;
                } else if (rk_ == "state_file") {
                    std::filesystem::path p = get_string(file, rv, rkey);
                    if (p.empty()) fail(file, rv, rkey, "expected a file name, found an empty string");
                    c.state_file = p.is_relative() && !base.empty() ? base / p : p;
                } else if (rk_ == "allow_untrusted_providers" || rk_ == "quarantine_on_failure") {
                    bool b = get_bool(file, rv, rkey);
                    Setting<bool> st{b, fmt::format("{} ({} = {})", pos(file, rk_.source()), rkey, b ? "true" : "false")};
                    (rk_ == "allow_untrusted_providers" ? c.allow_untrusted_providers : c.quarantine_on_failure) = st;
                } else if (rk_ == "log_level") {
                    std::string lvl = get_string(file, rv, rkey);
                    static const std::vector<std::string> levels = {"trace", "debug", "info", "warn", "error", "off"};
                    if (std::find(levels.begin(), levels.end(), lvl) == levels.end())
                        fail(file, rv, rkey, fmt::format("'{}' is not a log level (one of {})", lvl, fmt::join(levels, ", ")));
                    c.log_level = lvl;
                } else unknown_key(file, rk_, rv, rkey, rk);
            }
        } else if (key == "providers") {
            c.providers = parse_providers(file, v, "providers", false);
        } else if (key == "rules") {
            auto *arr = v.as_array();
            if (!arr) fail(file, v, key, "expected an array of tables ([[rules]])");
            size_t i = 0;
            for (auto &&e : *arr) {
                std::string rkey = fmt::format("rules[{}]", i++);
                Rule r;
                r.where = pos(file, e.source());
                static const std::vector<std::string> mk = {"device", "arch", "device_name", "providers"};
                for (auto &&[mk_, mv] : get_table(file, e, rkey)) {
                    std::string mkey = rkey + "." + std::string(mk_.str());
                    if (mk_ == "device") r.device = get_string(file, mv, mkey);
                    else if (mk_ == "arch") r.arch = get_string(file, mv, mkey);
                    else if (mk_ == "device_name") r.device_name = get_string(file, mv, mkey);
                    else if (mk_ == "providers") r.providers = parse_providers(file, mv, mkey, true);
                    else unknown_key(file, mk_, mv, mkey, mk);
                }
                c.rules.push_back(std::move(r));
            }
        } else unknown_key(file, k, v, key, top);
    }
    return c;
}

Config Config::load(const std::filesystem::path &file) {
    std::error_code ec;
    if (std::filesystem::is_directory(file, ec))
        throw Error(fmt::format("{}: is a directory, not a TOML config file", file.string()));
    FILE *f = std::fopen(file.c_str(), "rb");
    if (!f) throw Error(fmt::format("{}: cannot read config: {}", file.string(), std::strerror(errno)));
    std::string text;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
        text.append(buf, n);
        if (text.size() > (16u << 20)) {
            std::fclose(f);
            throw Error(fmt::format("{}: config file larger than 16 MiB", file.string()));
        }
    }
    std::fclose(f);
    return parse(text, file.string());
}

void Config::apply_environment() {
    auto split = [](const char *s) {
        std::vector<std::string> out;
        std::stringstream ss(s);
        std::string item;
        while (std::getline(ss, item, ',')) {
            item.erase(0, item.find_first_not_of(" \t"));
            item.erase(item.find_last_not_of(" \t") + 1);
            if (!item.empty()) out.push_back(item);
        }
        return out;
    };
    if (const char *e = std::getenv("KPR_ENABLE"))
        for (auto &n : split(e)) env_[n].enabled = Setting<bool>{true, "KPR_ENABLE"};
    if (const char *e = std::getenv("KPR_DISABLE"))
        for (auto &n : split(e)) env_[n].enabled = Setting<bool>{false, "KPR_DISABLE"};
    if (const char *e = std::getenv("KPR_FORCE"))
        for (auto &n : split(e)) {
            env_[n].force = Setting<bool>{true, "KPR_FORCE"};
            if (!env_[n].enabled) env_[n].enabled = Setting<bool>{true, "KPR_FORCE"};
        }
}

ProviderSettings Config::effective(const std::string &provider, const std::string &device_id,
                                   const std::string &device_arch, const std::string &device_name) const {
    ProviderSettings s;
    if (auto it = providers.find(provider); it != providers.end()) s.overlay(it->second);
    for (const Rule &r : rules) {
        if (r.device && *r.device != device_id) continue;
        if (r.arch && *r.arch != device_arch) continue;
        if (r.device_name && fnmatch(r.device_name->c_str(), device_name.c_str(), FNM_CASEFOLD) != 0) continue;
        if (auto it = r.providers.find(provider); it != r.providers.end()) s.overlay(it->second);
    }
    if (auto it = env_.find(provider); it != env_.end()) s.overlay(it->second);
    return s;
}

std::string closest_name(const std::string &name, const std::vector<std::string> &candidates) {
    std::string best;
    size_t best_d = 4;
    for (const auto &c : candidates) {
        std::vector<size_t> prev(c.size() + 1), cur(c.size() + 1);
        for (size_t j = 0; j <= c.size(); ++j) prev[j] = j;
        for (size_t i = 1; i <= name.size(); ++i) {
            cur[0] = i;
            for (size_t j = 1; j <= c.size(); ++j)
                cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (name[i - 1] == c[j - 1] ? 0 : 1)});
            std::swap(prev, cur);
        }
        if (prev[c.size()] < best_d) best_d = prev[c.size()], best = c;
    }
    return best;
}

std::string canonical_option_value(const kpr_option_decl &d, const OptionSetting &v) {
    switch (d.type) {
    case KPR_OPTION_BOOL:
        if (v.toml_type == "bool" || v.text == "true" || v.text == "false") {
            if (v.text == "true" || v.text == "false") return v.text;
        }
        throw Error(fmt::format("option '{}' takes a boolean, got {} '{}'", d.name, v.toml_type, v.text));
    case KPR_OPTION_INT: {
        if (v.toml_type != "int" && v.toml_type != "string" && !v.toml_type.empty())
            throw Error(fmt::format("option '{}' takes an integer, got {} '{}'", d.name, v.toml_type, v.text));
        char *end = nullptr;
        errno = 0;
        long long x = std::strtoll(v.text.c_str(), &end, 10);
        if (v.text.empty() || *end || errno)
            throw Error(fmt::format("option '{}' takes an integer, got '{}'", d.name, v.text));
        if (d.min_value < d.max_value && (x < d.min_value || x > d.max_value))
            throw Error(fmt::format("option '{}' = {} is out of range [{}, {}]", d.name, x, d.min_value, d.max_value));
        return std::to_string(x);
    }
    case KPR_OPTION_FLOAT: {
        if (v.toml_type == "bool")
            throw Error(fmt::format("option '{}' takes a number, got boolean '{}'", d.name, v.text));
        char *end = nullptr;
        double x = std::strtod(v.text.c_str(), &end);
        if (v.text.empty() || *end) throw Error(fmt::format("option '{}' takes a number, got '{}'", d.name, v.text));
        return fmt::format("{}", x);
    }
    case KPR_OPTION_STRING:
    default:
        if (v.toml_type != "string" && v.toml_type != "")
            throw Error(fmt::format("option '{}' takes a string, got {} '{}'", d.name, v.toml_type, v.text));
        if (d.choices) {
            std::stringstream ss(d.choices);
            std::string c;
            while (std::getline(ss, c, ','))
                if (c == v.text) return v.text;
            throw Error(fmt::format("option '{}' = '{}' is not one of {}", d.name, v.text, d.choices));
        }
        return v.text;
    }
}

std::vector<std::string> Config::check_against(const std::map<std::string, std::vector<kpr_option_decl>> &known) const {
    std::vector<std::string> errors;
    std::vector<std::string> names;
    for (auto &[n, _] : known) names.push_back(n);
    auto check = [&](const std::string &name, const ProviderSettings &s, const std::string &prefix) {
        auto it = known.find(name);
        if (it == known.end() && unavailable_providers.count(name)) return;  // found but refused: reported there
        if (it == known.end()) {
            std::string hint = closest_name(name, names);
            errors.push_back(fmt::format("{}: {}.{}: unknown provider '{}'{}", s.where, prefix, name, name,
                                         hint.empty() ? fmt::format(" (known: {})", fmt::join(names, ", "))
                                                      : fmt::format(" (did you mean '{}'?)", hint)));
            return;
        }
        for (auto &[oname_, oval] : s.options) {
            const std::string &oname = oname_;  // clang 14 cannot capture a structured binding in a lambda
            auto d = std::find_if(it->second.begin(), it->second.end(),
                                  [&](const kpr_option_decl &x) { return x.name && oname == x.name; });
            if (d == it->second.end()) {
                std::vector<std::string> onames;
                for (auto &x : it->second) onames.push_back(x.name);
                std::string hint = closest_name(oname, onames);
                errors.push_back(fmt::format("{}: {}.{}.options.{}: provider '{}' declares no option '{}'{}", oval.where,
                                             prefix, name, oname, name, oname,
                                             hint.empty() ? (onames.empty() ? std::string(" (it takes no options)")
                                                                            : fmt::format(" (it takes: {})", fmt::join(onames, ", ")))
                                                          : fmt::format(" (did you mean '{}'?)", hint)));
                continue;
            }
            try {
                canonical_option_value(*d, oval);
            } catch (const Error &e) {
                errors.push_back(fmt::format("{}: {}.{}.options.{}: {}", oval.where, prefix, name, oname, e.what()));
            }
        }
    };
    for (auto &[n, s] : providers) check(n, s, "providers");
    for (size_t i = 0; i < rules.size(); ++i)
        for (auto &[n, s] : rules[i].providers) check(n, s, fmt::format("rules[{}].providers", i));
    return errors;
}

} // namespace kpr

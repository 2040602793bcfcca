// Finding and loading provider libraries with Boost.DLL. A library that fails is recorded with its file
// and reason and skipped; nothing is ever unloaded (a provider may have threads or device memory alive).
#include "runtime/internal.hpp"

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <regex>
#include <set>
#include <unistd.h>

namespace kpr {

namespace fs = std::filesystem;

struct LogContext {
    std::string name;  // the provider's name once known, else the file name
};

namespace {

void host_log(void *user, int32_t level, const char *message) {
    auto *ctx = static_cast<LogContext *>(user);
    const char *name = ctx ? ctx->name.c_str() : "?";
    if (!message) return;
    spdlog::level::level_enum l = spdlog::level::info;
    switch (level) {
    case KPR_LOG_TRACE: l = spdlog::level::trace; break;
    case KPR_LOG_DEBUG: l = spdlog::level::debug; break;
    case KPR_LOG_INFO: l = spdlog::level::info; break;
    case KPR_LOG_WARN: l = spdlog::level::warn; break;
    default: l = spdlog::level::err; break;
    }
    spdlog::log(l, "[{}] {}", name, message);
}

// Keeps every library mapped for the life of the process.
std::vector<boost::dll::shared_library> &library_keeper() {
    static auto *libs = new std::vector<boost::dll::shared_library>();
    return *libs;
}
std::mutex &library_keeper_mutex() {
    static std::mutex m;
    return m;
}

fs::path executable_dir() {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : exe.parent_path();
}

std::string message_of(const kpr_error &e) {
    std::string m(e.message, strnlen(e.message, sizeof e.message));
    return m.empty() ? "(the provider gave no message)" : m;
}

std::string status_name(int s) {
    switch (s) {
    case KPR_OK: return "ok";
    case KPR_ERR_INVALID_ARGUMENT: return "invalid argument";
    case KPR_ERR_UNSUPPORTED: return "unsupported";
    case KPR_ERR_WRONG_ARCH: return "wrong architecture";
    case KPR_ERR_OUT_OF_MEMORY: return "out of memory";
    case KPR_ERR_DEVICE: return "device error";
    case KPR_ERR_VERSION: return "version mismatch";
    case KPR_ERR_INTERNAL: return "internal error";
    default: return fmt::format("status {}", s);
    }
}

std::string safe_str(const char *s, size_t max = 256) {
    if (!s) return {};
    return std::string(s, strnlen(s, max));
}

} // namespace

std::vector<fs::path> provider_search_path(const RuntimeOptions &opts, const Config &config, bool use_env) {
    std::vector<fs::path> dirs;
    for (auto &p : opts.provider_paths) dirs.push_back(p);
    for (auto &p : config.provider_paths) dirs.push_back(p);
    if (use_env) {
        if (const char *e = std::getenv("KPR_PROVIDER_PATH")) {
            std::string s = e;
            size_t start = 0;
            while (start <= s.size()) {
                size_t end = s.find(':', start);
                if (end == std::string::npos) end = s.size();
                if (end > start) dirs.emplace_back(s.substr(start, end - start));
                start = end + 1;
            }
        }
    }
    // The build tree: where this build put its providers, or -- when the tree was moved (copied to
    // another machine) -- a providers/ folder beside a CMakeCache.txt above the executable.
    fs::path exe_dir = executable_dir();
    std::error_code ec;
    if (!exe_dir.empty()) {
        fs::path d = exe_dir;
        for (int up = 0; up < 5 && !d.empty(); ++up, d = d.parent_path()) {
            if (fs::exists(d / "CMakeCache.txt", ec) && fs::is_directory(d / "providers", ec)) {
                dirs.push_back(d / "providers");
                break;
            }
            if (d == d.root_path()) break;
        }
    }
    if (fs::is_directory(KPR_BUILD_PROVIDER_DIR, ec)) dirs.emplace_back(KPR_BUILD_PROVIDER_DIR);
    // The install tree: <prefix>/lib/kpr/providers with <prefix> = the executable's parent's parent.
    if (!exe_dir.empty()) dirs.push_back(exe_dir.parent_path() / KPR_INSTALL_PROVIDER_SUBDIR);

    std::vector<fs::path> out;
    std::set<fs::path> seen;
    for (auto &d : dirs) {
        fs::path c = fs::weakly_canonical(d, ec);
        if (ec) c = d;
        if (seen.insert(c).second) out.push_back(c);
    }
    return out;
}

void RuntimeImpl::load_providers(const std::vector<fs::path> &dirs) {
    static const std::regex name_re("libkpr_([a-z0-9_]+)\\.so");
    std::set<fs::path> seen_files;
    for (const fs::path &dir : dirs) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) {
            spdlog::debug("provider path {}: not a directory, skipped", dir.string());
            continue;
        }
        std::vector<fs::path> files;
        for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
            std::string fname = it->path().filename().string();
            if (std::regex_match(fname, name_re)) files.push_back(it->path());
        }
        std::sort(files.begin(), files.end());
        for (auto &f : files) {
            fs::path c = fs::weakly_canonical(f, ec);
            if (!seen_files.insert(ec ? f : c).second) continue;
            load_one(f);
        }
    }
}

void RuntimeImpl::load_one(const fs::path &file) {
    auto p = std::make_shared<LoadedProvider>();
    p->info.file = file.string();
    std::smatch m;
    std::string fname = file.filename().string();
    static const std::regex name_re("libkpr_([a-z0-9_]+)\\.so");
    std::string file_name = std::regex_match(fname, m, name_re) ? m[1].str() : fname;
    auto fail = [&](const std::string &why) {
        p->info.state = ProviderState::Failed;
        p->info.reason = why;
        p->table = nullptr;
        if (p->info.name.empty()) p->info.name = file_name;
        spdlog::warn("provider {}: skipped: {}", file.string(), why);
        providers.push_back(p);
    };

    boost::dll::shared_library lib;
    try {
        lib.load(boost::dll::fs::path(file.string()),
                 boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception &e) {
        return fail(fmt::format("not a loadable library: {}", e.what()));
    }
    {
        std::lock_guard<std::mutex> g(library_keeper_mutex());
        library_keeper().push_back(lib);
    }
    if (!lib.has(KPR_PROVIDER_ENTRY_SYMBOL))
        return fail(fmt::format("no entry point: the library does not export '{}'", KPR_PROVIDER_ENTRY_SYMBOL));
    auto entry = lib.get<std::remove_pointer_t<kpr_provider_entry_fn>>(KPR_PROVIDER_ENTRY_SYMBOL);

    p->log = new LogContext{file_name};  // intentionally never freed: the library may log until exit
    host.log_user = p->log;
    kpr_host_api *host_copy = new kpr_host_api(host);  // per provider: log_user differs; lives forever
    host_copy->log_user = p->log;

    kpr_handshake_offer offer{sizeof offer, KPR_MAKE_VERSION(KPR_ABI_VERSION_MAJOR, 0), KPR_ABI_VERSION, 0, host_copy};
    kpr_handshake_answer answer{sizeof answer, 0, nullptr};
    kpr_error err{sizeof err, {}};
    kpr_status st;
    try {
        st = entry(&offer, &answer, &err);
    } catch (...) {
        return fail("threw a C++ exception out of kpr_provider_entry (providers must catch everything at their edge)");
    }
    std::string core_range = fmt::format("{}.0..{}.{}", KPR_ABI_VERSION_MAJOR, KPR_ABI_VERSION_MAJOR, KPR_ABI_VERSION_MINOR);
    if (st != KPR_OK) {
        if (st == KPR_ERR_VERSION || KPR_VERSION_MAJOR(answer.abi_version) != KPR_ABI_VERSION_MAJOR)
            return fail(fmt::format("speaks provider ABI {}.{}, this core speaks {}: rebuild the provider against this kpr",
                                    KPR_VERSION_MAJOR(answer.abi_version), KPR_VERSION_MINOR(answer.abi_version), core_range));
        return fail(fmt::format("handshake failed ({}): {}", status_name(st), message_of(err)));
    }
    if (KPR_VERSION_MAJOR(answer.abi_version) != KPR_ABI_VERSION_MAJOR ||
        KPR_VERSION_MINOR(answer.abi_version) > KPR_ABI_VERSION_MINOR)
        return fail(fmt::format("speaks provider ABI {}.{}, this core speaks {}: rebuild the provider against this kpr",
                                KPR_VERSION_MAJOR(answer.abi_version), KPR_VERSION_MINOR(answer.abi_version), core_range));
    const kpr_provider_v1 *t = answer.table;
    if (!t) return fail("handshake returned no function table");
    if (t->struct_size < offsetof(kpr_provider_v1, release) + sizeof(t->release))
        return fail(fmt::format("function table too small ({} bytes) for ABI 1.0", t->struct_size));
    if (!t->identity || !t->query || !t->prepare || !t->run || !t->release)
        return fail("function table lacks a required slot (identity, query, prepare, run and release are required)");
    p->table = t;
    p->info.abi_version = answer.abi_version;

    try {
        if (p->has(&kpr_provider_v1::init)) {
            void *state = nullptr;
            kpr_error ierr{sizeof ierr, {}};
            kpr_status s = t->init(host_copy, &state, &ierr);
            if (s != KPR_OK) return fail(fmt::format("init failed ({}): {}", status_name(s), message_of(ierr)));
            p->state = state;
        }
        const kpr_provider_identity *id = t->identity(p->state);
        if (!id) return fail("identity() returned null");
        std::string name = safe_str(id->name, 64);
        static const std::regex valid("[a-z0-9_]+");
        if (name.empty() || !std::regex_match(name, valid))
            return fail(fmt::format("identity has an invalid name '{}' (expected [a-z0-9_]+)", name));
        if (name != file_name)
            return fail(fmt::format("calls itself '{}' but the file is named for '{}' (expected libkpr_{}.so)", name,
                                    file_name, name));
        if (id->device_kind != KPR_DEVICE_CPU && id->device_kind != KPR_DEVICE_CUDA)
            return fail(fmt::format("identity has an unknown device kind {}", id->device_kind));
        for (auto &other : providers)
            if (other->ok() && other->info.name == name)
                return fail(fmt::format("duplicate name '{}': already loaded from {}", name, other->info.file));
        p->info.name = name;
        p->log->name = name;
        p->info.version = safe_str(id->version, 64);
        p->info.family = safe_str(id->family, 64);
        p->info.description = safe_str(id->description, 512);
        p->info.device_kind = id->device_kind;
        if (id->sass_archs && id->n_sass_archs < 64) p->info.sass_archs.assign(id->sass_archs, id->sass_archs + id->n_sass_archs);
        if (id->ptx_archs && id->n_ptx_archs < 64) p->info.ptx_archs.assign(id->ptx_archs, id->ptx_archs + id->n_ptx_archs);
        if (id->struct_size >= offsetof(kpr_provider_identity, opt_in) + sizeof(uint32_t)) p->info.opt_in = id->opt_in != 0;

        if (p->has(&kpr_provider_v1::option_count) && p->has(&kpr_provider_v1::option_get)) {
            uint32_t n = t->option_count(p->state);
            if (n > 256) return fail(fmt::format("declares {} options (at most 256)", n));
            static const char *tnames[] = {"bool", "int", "float", "string"};
            for (uint32_t i = 0; i < n; ++i) {
                const kpr_option_decl *d = t->option_get(p->state, i);
                if (!d || !d->name || !d->default_value || d->type > KPR_OPTION_STRING)
                    return fail(fmt::format("option {} is malformed (null name or default, or unknown type)", i));
                p->option_decls.push_back(*d);
                OptionInfo oi;
                oi.name = safe_str(d->name, 64);
                oi.type = tnames[d->type];
                oi.default_value = safe_str(d->default_value);
                oi.doc = safe_str(d->doc, 512);
                oi.choices = safe_str(d->choices);
                oi.min_value = d->min_value;
                oi.max_value = d->max_value;
                try {
                    canonical_option_value(*d, OptionSetting{oi.default_value, "", ""});
                } catch (const Error &e) {
                    return fail(fmt::format("option '{}' has an invalid default: {}", oi.name, e.what()));
                }
                p->info.options.push_back(oi);
            }
        }
    } catch (...) {
        return fail("threw a C++ exception during initialisation (providers must catch everything at their edge)");
    }
    spdlog::debug("provider {} {} loaded from {} (ABI {}.{})", p->info.name, p->info.version, file.string(),
                  KPR_VERSION_MAJOR(p->info.abi_version), KPR_VERSION_MINOR(p->info.abi_version));
    providers.push_back(p);
}

// ---- calls into a provider ----------------------------------------------------------------------

#define KPR_GUARDED(what, expr)                                                                            \
    try {                                                                                                  \
        expr;                                                                                              \
    } catch (const Error &) {                                                                              \
        throw;                                                                                             \
    } catch (...) {                                                                                        \
        throw Error(fmt::format("provider '{}': {}: threw a C++ exception across the ABI", info.name, what)); \
    }

kpr_offer LoadedProvider::query(const kpr_op_desc &op, const kpr_device_desc &dev, const OptionStore &opts) const {
    kpr_offer offer{};
    offer.struct_size = sizeof offer;
    kpr_error err{sizeof err, {}};
    kpr_status s;
    KPR_GUARDED("query", s = table->query(state, &op, &dev, &opts.set, &offer, &err));
    if (s != KPR_OK)
        throw Error(fmt::format("provider '{}': query failed ({}): {}", info.name, status_name(s), message_of(err)));
    offer.reason[sizeof offer.reason - 1] = 0;
    return offer;
}

kpr_prepared *LoadedProvider::prepare(const kpr_op_desc &op, const kpr_device_desc &dev, const OptionStore &opts,
                                      const void *weights, uint64_t bytes, uint64_t identity) const {
    kpr_weights w{sizeof w, 0, weights, bytes, identity};
    kpr_prepared *out = nullptr;
    kpr_error err{sizeof err, {}};
    kpr_status s;
    KPR_GUARDED("prepare", s = table->prepare(state, &op, &dev, &opts.set, &w, &out, &err));
    if (s != KPR_OK)
        throw Error(fmt::format("provider '{}': prepare failed ({}): {}", info.name, status_name(s), message_of(err)));
    if (!out) throw Error(fmt::format("provider '{}': prepare returned KPR_OK but no handle", info.name));
    return out;
}

void LoadedProvider::run(kpr_prepared *p, const kpr_run_args &args) const {
    kpr_error err{sizeof err, {}};
    kpr_status s;
    KPR_GUARDED("run", s = table->run(state, p, &args, &err));
    if (s != KPR_OK)
        throw Error(fmt::format("provider '{}': run failed ({}): {}", info.name, status_name(s), message_of(err)));
}

void LoadedProvider::release(kpr_prepared *p) const noexcept {
    if (!p) return;
    try {
        table->release(state, p);
    } catch (...) {
        spdlog::error("provider '{}': release threw a C++ exception across the ABI", info.name);
    }
}

uint32_t LoadedProvider::selftest_count(const kpr_device_desc &dev) const {
    if (!has(&kpr_provider_v1::selftest_count) || !has(&kpr_provider_v1::selftest_get)) return 0;
    uint32_t n = 0;
    KPR_GUARDED("selftest_count", n = table->selftest_count(state, &dev));
    return std::min<uint32_t>(n, 100000);
}

kpr_selftest_case LoadedProvider::selftest_get(const kpr_device_desc &dev, uint32_t index) const {
    kpr_selftest_case c{};
    c.struct_size = sizeof c;
    kpr_error err{sizeof err, {}};
    kpr_status s;
    KPR_GUARDED("selftest_get", s = table->selftest_get(state, &dev, index, &c, &err));
    if (s != KPR_OK)
        throw Error(fmt::format("provider '{}': selftest_get({}) failed ({}): {}", info.name, index, status_name(s),
                                message_of(err)));
    c.name[sizeof c.name - 1] = 0;
    return c;
}

std::string LoadedProvider::selftest_run(const kpr_device_desc &dev, uint32_t index, double *measured) const {
    if (!has(&kpr_provider_v1::selftest_run)) return "declares an internal self-test but has no selftest_run";
    kpr_error err{sizeof err, {}};
    kpr_status s;
    KPR_GUARDED("selftest_run", s = table->selftest_run(state, &dev, index, measured, &err));
    return s == KPR_OK ? std::string() : message_of(err);
}

} // namespace kpr

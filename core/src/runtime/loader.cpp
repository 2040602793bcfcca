// Finding and loading provider libraries with Boost.DLL. A library that fails is recorded with its file
// and reason and skipped; nothing is ever unloaded (a provider may have threads or device memory alive).
//
// Trusted loading (docs/reliability.md): before a library is mapped, the loader checks that it is an ELF
// shared object for this machine, that neither the file nor its folder is writable by group or others or
// owned by a user other than this process's and root (unless [runtime] allow_untrusted_providers), and,
// when the config pins it (`sha256 = "..."`), that the bytes it is about to map hash to the pin (it then
// maps exactly the file descriptor it hashed). Under secure execution KPR_PROVIDER_PATH and KPR_CONFIG are
// removed from the environment when the library starts, as glibc does for LD_LIBRARY_PATH.
#include "runtime/internal.hpp"

#include <kpr/calibration.hpp>
#include <kpr/selftest.hpp>

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <regex>
#include <set>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace kpr {

namespace fs = std::filesystem;

struct LogContext {
    std::string name;  // the provider's name once known, else the file name
    // Device id -> why this provider is quarantined there (a recorded self-test failure). Set at load.
    std::map<std::string, std::string> quarantined;
};

// ---- secure execution -----------------------------------------------------------------------------

namespace {

struct SecureExecution {
    bool secure = false;
    std::vector<std::string> dropped;  // "KPR_CONFIG=/x"
};

SecureExecution &secure_execution() {
    static SecureExecution s;
    return s;
}

// Runs when the library is loaded, before main: a setuid/setgid/capability-raised process (AT_SECURE) must
// not take its provider path or config from whoever started it. KPR_SECURE_EXECUTION=1 asks for the same
// treatment without privileges (for tests; it can only make kpr stricter).
__attribute__((constructor)) void kpr_secure_execution_scrub() {
    SecureExecution &s = secure_execution();
    s.secure = getauxval(AT_SECURE) != 0;
    if (const char *e = std::getenv("KPR_SECURE_EXECUTION"); e && std::strcmp(e, "1") == 0) s.secure = true;
    if (!s.secure) return;
    for (const char *var : {"KPR_PROVIDER_PATH", "KPR_CONFIG"})
        if (const char *v = std::getenv(var)) {
            s.dropped.push_back(fmt::format("{}={}", var, v));
            unsetenv(var);
        }
}

} // namespace

bool secure_execution_active() { return secure_execution().secure; }

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
struct ProcessLifetime {
    std::vector<std::unique_ptr<LogContext>> logs;
    std::vector<std::unique_ptr<kpr_host_api>> hosts;
};
ProcessLifetime &process_lifetime() {
    static auto *k = new ProcessLifetime();
    return *k;
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

// `s` with every byte outside printable ASCII written as \xNN, for messages about a provider's strings.
std::string printable(const std::string &s) {
    std::string out;
    for (unsigned char c : s) out += c >= 0x20 && c < 0x7f ? std::string(1, char(c)) : fmt::format("\\x{:02x}", c);
    return out;
}

thread_local bool tl_quarantine_bypass = false;

// "" when `st` (of `path`, a "file" or "folder") may be trusted: owned by this process's user or root, and
// not writable by group or others.
std::string untrusted(const struct stat &st, const std::string &what, const std::string &path) {
    uid_t me = geteuid();
    if (st.st_uid != me && st.st_uid != 0)
        return fmt::format("the {} {} is owned by uid {}, neither this process's user (uid {}) nor root", what, path,
                           st.st_uid, me);
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        const char *who = (st.st_mode & S_IWGRP) && (st.st_mode & S_IWOTH) ? "group and others"
                          : (st.st_mode & S_IWGRP)                        ? "its group"
                                                                          : "others";
        return fmt::format("the {} {} is writable by {} (mode {:04o})", what, path, who, st.st_mode & 07777);
    }
    return {};
}

std::string elf_machine_name(uint16_t m) {
    switch (m) {
    case EM_386: return "x86 (32-bit)";
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "aarch64";
    case EM_ARM: return "arm";
    case EM_PPC64: return "ppc64";
    case EM_RISCV: return "riscv";
    case EM_S390: return "s390";
    default: return fmt::format("ELF machine {}", m);
    }
}

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr uint16_t kHostMachine = EM_PPC64;
#else
constexpr uint16_t kHostMachine = 0;  // not checked
#endif

// "" when the first bytes of the file are an ELF shared object this process can map.
std::string elf_problem(int fd) {
    Elf64_Ehdr h{};
    ssize_t n = pread(fd, &h, sizeof h, 0);
    if (n < 0) return fmt::format("cannot read it: {}", std::strerror(errno));
    if (n == 0) return "not a loadable library: the file is empty";
    if (size_t(n) < EI_NIDENT || std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0)
        return "not a loadable library: not an ELF file";
    if (h.e_ident[EI_CLASS] != ELFCLASS64) return "not a loadable library: a 32-bit ELF file, this machine runs 64-bit code";
    if (h.e_ident[EI_DATA] != ELFDATA2LSB) return "not a loadable library: a big-endian ELF file";
    if (size_t(n) < sizeof h) return "not a loadable library: the ELF header is truncated";
    if (kHostMachine && h.e_machine != kHostMachine)
        return fmt::format("not a loadable library: an ELF file for {}, this machine is {}", elf_machine_name(h.e_machine),
                           elf_machine_name(kHostMachine));
    if (h.e_type != ET_DYN)
        return fmt::format("not a loadable library: an ELF {}, not a shared object", h.e_type == ET_EXEC ? std::string("executable") : h.e_type == ET_REL ? std::string("relocatable object (.o)") : fmt::format("of type {}", h.e_type));
    return {};
}

bool read_all(int fd, std::vector<uint8_t> &out, std::string *err) {
    struct stat st{};
    if (fstat(fd, &st) != 0) return *err = std::strerror(errno), false;
    out.clear();
    out.reserve(size_t(st.st_size));
    uint8_t buf[1 << 16];
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return *err = std::strerror(errno), false;
        }
        if (n == 0) break;
        out.insert(out.end(), buf, buf + n);
        off += n;
    }
    return true;
}

std::string device_id_of(const kpr_device_desc &d) {
    return d.kind == KPR_DEVICE_CUDA ? fmt::format("cuda:{}", d.ordinal) : std::string("cpu");
}

} // namespace

namespace detail {
void set_quarantine_bypass(bool on) { tl_quarantine_bypass = on; }
} // namespace detail

std::vector<fs::path> provider_search_path(const RuntimeOptions &opts, const Config &config, bool use_env) {
    std::vector<fs::path> dirs;
    for (auto &p : opts.provider_paths) dirs.push_back(p);
    for (auto &p : config.provider_paths) dirs.push_back(p);
    if (!secure_execution().dropped.empty()) {
        static std::once_flag once;
        std::call_once(once, [] {
            spdlog::warn("secure execution (setuid, setgid or capabilities): ignored {}",
                         fmt::join(secure_execution().dropped, " and "));
        });
    }
    if (use_env && !secure_execution().secure) {
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
    // The build tree this core was compiled in, only for programs that live in it (kpr, tests, examples
    // under <build>/): an installed kpr, or an engine linking the installed libkpr.a, must not load a build
    // folder's providers just because that folder still exists on this machine.
    if (!exe_dir.empty() && fs::is_directory(KPR_BUILD_PROVIDER_DIR, ec)) {
        const fs::path root = fs::weakly_canonical(fs::path(KPR_BUILD_PROVIDER_DIR).parent_path(), ec);
        const fs::path exe = fs::weakly_canonical(exe_dir, ec);
        if (std::mismatch(root.begin(), root.end(), exe.begin(), exe.end()).first == root.end())
            dirs.emplace_back(KPR_BUILD_PROVIDER_DIR);
    }
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
        (void)seen_files;
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
        config.unavailable_providers[p->info.name.empty() ? file_name : p->info.name] = why;
        p->table = nullptr;
        if (p->info.name.empty()) p->info.name = file_name;
        spdlog::warn("provider {}: skipped: {}", file.string(), why);
        providers.push_back(p);
    };

    // Before anything of the file is mapped: is it ours to trust, is it a library for this machine, and
    // does it hash to its pin? All checked on one open descriptor, which is what gets mapped when pinned.
    bool allow_untrusted = config.allow_untrusted_providers && config.allow_untrusted_providers->value;
    auto refuse = [&](const std::string &why) { return fail(why); };
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return refuse(fmt::format("cannot open it: {}", std::strerror(errno)));
    struct FdCloser {
        int fd;
        ~FdCloser() { ::close(fd); }
    } closer{fd};
    struct stat fst{};
    if (fstat(fd, &fst) != 0) return refuse(fmt::format("cannot stat it: {}", std::strerror(errno)));
    if (!S_ISREG(fst.st_mode)) return refuse("not a regular file");
    if (!allow_untrusted) {
        std::error_code ec;
        fs::path real = fs::canonical(file, ec);
        std::vector<std::pair<std::string, fs::path>> dirs = {{"folder", file.parent_path()}};
        if (!ec && real.parent_path() != fs::weakly_canonical(file.parent_path(), ec)) dirs.push_back({"folder", real.parent_path()});
        std::string why = untrusted(fst, "file", ec ? file.string() : real.string());
        for (auto &[what, d] : dirs) {
            if (!why.empty()) break;
            struct stat dst{};
            if (::stat((d.empty() ? fs::path(".") : d).c_str(), &dst) != 0) {
                why = fmt::format("cannot stat its folder {}: {}", d.string(), std::strerror(errno));
                break;
            }
            why = untrusted(dst, what, d.string());
        }
        if (!why.empty())
            return refuse(fmt::format("refused, untrusted: {}: whoever can write there can run code in this process "
                                      "(fix with chmod go-w / chown, or set [runtime] allow_untrusted_providers = true)",
                                      why));
    }
    if (std::string e = elf_problem(fd); !e.empty()) return refuse(e);
    std::string load_path = file.string();
    if (auto it = config.providers.find(file_name); it != config.providers.end() && it->second.sha256) {
        std::vector<uint8_t> bytes;
        std::string rerr;
        if (!read_all(fd, bytes, &rerr)) return refuse(fmt::format("cannot read it to check its SHA-256: {}", rerr));
        std::string got = calibration::sha256_hex(bytes.data(), bytes.size());
        if (got != it->second.sha256->value)
            return refuse(fmt::format("refused: its SHA-256 is {}, but the config pins {} ({}); not loaded", got,
                                      it->second.sha256->value, it->second.sha256->where));
        // Map exactly what was hashed: a file swapped in after the check is not what gets loaded.
        std::string via_fd = fmt::format("/proc/self/fd/{}", fd);
        std::error_code ec;
        if (fs::exists(via_fd, ec)) load_path = via_fd;
        spdlog::debug("provider {}: SHA-256 matches the pin", file.string());
    }

    boost::dll::shared_library lib;
    try {
        lib.load(boost::dll::fs::path(load_path),
                 boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    } catch (const std::exception &e) {
        return refuse(fmt::format("not a loadable library: {}", e.what()));
    }
    {
        std::lock_guard<std::mutex> g(library_keeper_mutex());
        library_keeper().push_back(lib);
    }
    if (!lib.has(KPR_PROVIDER_ENTRY_SYMBOL))
        return fail(fmt::format("no entry point: the library does not export '{}'", KPR_PROVIDER_ENTRY_SYMBOL));
    auto entry = lib.get<std::remove_pointer_t<kpr_provider_entry_fn>>(KPR_PROVIDER_ENTRY_SYMBOL);

    // Both live as long as the process (the library may log until exit), held by a process-wide keeper so
    // they stay reachable: a provider that failed after this point does not leak them.
    kpr_host_api *host_copy = nullptr;
    {
        std::lock_guard<std::mutex> g(library_keeper_mutex());
        auto &k = process_lifetime();
        k.logs.push_back(std::make_unique<LogContext>(LogContext{file_name, {}}));
        p->log = k.logs.back().get();
        k.hosts.push_back(std::make_unique<kpr_host_api>(host));  // per provider: log_user differs
        host_copy = k.hosts.back().get();
    }
    host.log_user = p->log;
    host_copy->log = host_log;
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
            return fail(fmt::format("identity has an invalid name '{}' (expected [a-z0-9_]+)", printable(name)));
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
        for (auto [list, n, what] : {std::tuple{id->sass_archs, id->n_sass_archs, "sass_archs"},
                                     std::tuple{id->ptx_archs, id->n_ptx_archs, "ptx_archs"}}) {
            if (n > 64) return fail(fmt::format("identity declares {} {} (at most 64)", n, what));
            if (n > 0 && !list) return fail(fmt::format("identity declares {} {} but the list is null", n, what));
        }
        if (id->n_sass_archs) p->info.sass_archs.assign(id->sass_archs, id->sass_archs + id->n_sass_archs);
        if (id->n_ptx_archs) p->info.ptx_archs.assign(id->ptx_archs, id->ptx_archs + id->n_ptx_archs);
        if (id->struct_size >= offsetof(kpr_provider_identity, opt_in) + sizeof(uint32_t)) p->info.opt_in = id->opt_in != 0;

        if (p->has(&kpr_provider_v1::option_count) && p->has(&kpr_provider_v1::option_get)) {
            uint32_t n = t->option_count(p->state);
            if (n > 256) return fail(fmt::format("declares {} options (at most 256)", n));
            static const char *tnames[] = {"bool", "int", "float", "string"};
            for (uint32_t i = 0; i < n; ++i) {
                const kpr_option_decl *d = t->option_get(p->state, i);
                if (!d || !d->name || !d->default_value || d->type > KPR_OPTION_STRING)
                    return fail(fmt::format("option {} is malformed (null name or default, or unknown type)", i));
                OptionInfo oi;
                oi.name = safe_str(d->name, 65);
                if (oi.name.empty() || oi.name.size() > 64 ||
                    oi.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
                    return fail(fmt::format("option {} has a malformed name '{}' (1-64 characters of [a-z0-9_])", i,
                                            printable(oi.name)));
                for (auto &o : p->info.options)
                    if (o.name == oi.name) return fail(fmt::format("declares option '{}' twice", oi.name));
                oi.type = tnames[d->type];
                oi.default_value = safe_str(d->default_value, 257);
                if (oi.default_value.size() > 256)
                    return fail(fmt::format("option '{}' has a default longer than 256 characters", oi.name));
                oi.doc = safe_str(d->doc, 512);
                oi.choices = safe_str(d->choices);
                // The core keeps its own copies: option_get's pointers need not outlive the call.
                kpr_option_decl own = *d;
                own.name = p->option_strings.emplace_back(oi.name).c_str();
                own.default_value = p->option_strings.emplace_back(oi.default_value).c_str();
                own.doc = p->option_strings.emplace_back(oi.doc).c_str();
                own.choices = d->choices ? p->option_strings.emplace_back(oi.choices).c_str() : nullptr;
                p->option_decls.push_back(own);
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
    // Quarantine: a recorded self-test failure on a device of this machine, for this very library.
    {
        const Config &cfg = config;
        std::vector<std::pair<std::string, std::string>> on;  // device id, reason
        std::string file_hash;
        for (const Device &d : devices) {
            if (d.desc.simulated || d.desc.kind != p->info.device_kind) continue;
            ProviderSettings ps = cfg.effective(p->info.name, d.id, d.arch(), d.desc.name);
            bool q = ps.quarantine_on_failure ? ps.quarantine_on_failure->value
                                              : (cfg.quarantine_on_failure && cfg.quarantine_on_failure->value);
            if (!q) continue;
            static std::mutex state_mu;
            std::lock_guard<std::mutex> g(state_mu);
            std::string warning;
            fs::path state = selftest_state_file(cfg);
            if (state.empty()) continue;
            for (const SelftestRecord &r : read_selftest_state(state, &warning)) {
                if (r.provider != p->info.name || r.device != d.id) continue;
                if (file_hash.empty()) {
                    try {
                        file_hash = calibration::sha256_file(file);
                    } catch (const Error &) {
                        file_hash = "?";
                    }
                }
                if (r.sha256 != file_hash) {
                    spdlog::info("provider {}: the self-test failure recorded on {} ({}) was for another build of the library; not quarantined",
                                 p->info.name, d.id, r.when);
                    continue;
                }
                on.emplace_back(d.id, fmt::format("quarantined: failed its self-test on this machine ({}, {}): {} "
                                                  "(quarantine_on_failure; run `kpr selftest --provider {}` to clear)",
                                                  d.id, r.when, r.reason, p->info.name));
            }
            if (!warning.empty()) spdlog::warn("{}", warning);
        }
        for (auto &[dev, why] : on) {
            p->log->quarantined[dev] = why;
            spdlog::warn("provider {}: {}", p->info.name, why);
        }
        if (!on.empty()) p->info.reason = on.front().second;
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
    if (log && !tl_quarantine_bypass && !dev.simulated) {
        if (auto it = log->quarantined.find(device_id_of(dev)); it != log->quarantined.end()) {
            offer.accepted = 0;
            offer.decline_code = KPR_ERR_UNSUPPORTED;
            std::snprintf(offer.reason, sizeof offer.reason, "%s", it->second.c_str());
            return offer;
        }
    }
    KPR_GUARDED("query", s = table->query(state, &op, &dev, &opts.set, &offer, &err));
    if (s != KPR_OK)
        throw Error(fmt::format("provider '{}': query failed ({}): {}", info.name, status_name(s), message_of(err)));
    offer.reason[sizeof offer.reason - 1] = 0;
    // Nonsense answers are the provider's failure, not a plan.
    if (offer.accepted > 1)
        throw Error(fmt::format("provider '{}': query returned a malformed offer (accepted = {}, must be 0 or 1)", info.name,
                                offer.accepted));
    if (offer.accepted) {
        uint64_t limit = dev.kind == KPR_DEVICE_CUDA ? (dev.memory_bytes ? dev.memory_bytes : (1ull << 50)) : 0;
        if (!limit) {
            long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
            limit = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : (1ull << 50);
        }
        for (auto [what, bytes] : {std::pair<const char *, uint64_t>{"prepared", offer.prepared_bytes},
                                   std::pair<const char *, uint64_t>{"workspace", offer.workspace_bytes}})
            if (bytes > limit)
                throw Error(fmt::format("provider '{}': query accepted with an impossible offer: {} {} bytes, more than the "
                                        "{} bytes {} has",
                                        info.name, bytes, what, limit, device_id_of(dev)));
    }
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
    // The name travels in the contained runner's line protocol: no control characters. (Bytes that are not
    // UTF-8 are allowed; the JSON writers replace them.)
    const std::string name(c.name);
    if (std::any_of(name.begin(), name.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; }))
        throw Error(fmt::format("provider '{}': self-test case {} has a control character in its name '{}'",
                                info.name, index, printable(name)));
    if (c.n_options > 64 || (c.n_options > 0 && !c.options))
        throw Error(fmt::format("provider '{}': self-test case '{}' has {} option overrides{}", info.name, name,
                                c.n_options, c.n_options > 64 ? " (at most 64)" : " but a null list"));
    for (uint32_t i = 0; i < c.n_options; ++i) {
        const kpr_option_value &o = c.options[i];
        const std::string on = safe_str(o.name, 65);
        bool declared = false;
        for (const kpr_option_decl &d : option_decls) declared = declared || on == d.name;
        if (!declared || !o.value)
            throw Error(fmt::format("provider '{}': self-test case '{}' overrides option '{}', {}", info.name, name,
                                    printable(on), !declared ? "which the provider does not declare" : "with a null value"));
    }
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

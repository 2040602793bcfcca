#include "test_support.hpp"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <random>
#include <signal.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

#include <dlfcn.h>

extern char **environ;

namespace kpr_test {

fs::path mock_dir(const std::string &variant) { return fs::path(KPR_MOCK_PROVIDER_DIR) / variant; }

fs::path mock_file(const std::string &variant, const std::string &name) {
    return mock_dir(variant) / ("libkpr_" + name + ".so");
}

fs::path build_dir() { return fs::path(KPR_TEST_BUILD_DIR); }
fs::path kpr_binary() { return build_dir() / "bin" / "kpr"; }
fs::path provider_build_dir() { return build_dir() / "providers"; }

// ---- TempDir ------------------------------------------------------------------------------------

TempDir::TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/kpr-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back(0);
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
    path_ = buf.data();
}

TempDir::~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

// Folders 0755 and files 0644 whatever the umask: the loader refuses provider files and folders that
// group or others can write.
static void make_dirs(const fs::path &p) {
    // Only the folders this call creates are touched.
    std::vector<fs::path> created;
    for (fs::path d = p; !d.empty() && !fs::exists(d); d = d.parent_path()) {
        created.push_back(d);
        if (d == d.parent_path()) break;
    }
    fs::create_directories(p);
    for (auto &d : created) {
        std::error_code ec;
        fs::permissions(d, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec, ec);
    }
}

static void make_file_private(const fs::path &p, bool exec) {
    std::error_code ec;
    fs::perms r = fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read;
    if (exec) r |= fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec;
    fs::permissions(p, r, ec);
}

fs::path TempDir::write(const std::string &name, const std::string &text) const {
    fs::path p = path_ / name;
    make_dirs(p.parent_path());
    {
        std::ofstream f(p, std::ios::binary);
        f << text;
        if (!f) throw std::runtime_error("cannot write " + p.string());
    }
    make_file_private(p, false);
    return p;
}

fs::path TempDir::dir(const std::string &name) const {
    fs::path p = path_ / name;
    make_dirs(p);
    return p;
}

// ---- EnvGuard -----------------------------------------------------------------------------------

void EnvGuard::remember(const std::string &name) {
    if (saved_.count(name)) return;
    const char *v = std::getenv(name.c_str());
    saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
}

void EnvGuard::set(const std::string &name, const std::string &value) {
    remember(name);
    ::setenv(name.c_str(), value.c_str(), 1);
}

void EnvGuard::unset(const std::string &name) {
    remember(name);
    ::unsetenv(name.c_str());
}

void EnvGuard::clear_kpr() {
    for (const char *v : {"KPR_CONFIG", "KPR_PROVIDER_PATH", "KPR_ENABLE", "KPR_DISABLE", "KPR_FORCE", "KPR_LOG"})
        unset(v);
}

EnvGuard::~EnvGuard() {
    for (auto &[name, value] : saved_) {
        if (value) ::setenv(name.c_str(), value->c_str(), 1);
        else ::unsetenv(name.c_str());
    }
}

// ---- files and libraries ------------------------------------------------------------------------

fs::path write_garbage_library(const fs::path &dir, const std::string &name, size_t bytes) {
    make_dirs(dir);
    fs::path p = dir / ("libkpr_" + name + ".so");
    std::mt19937_64 rng(0x6b7072u);
    std::string data(bytes, '\0');
    for (auto &c : data) c = static_cast<char>(rng() & 0xff);
    {
        std::ofstream f(p, std::ios::binary);
        f.write(data.data(), static_cast<std::streamsize>(data.size()));
    }
    make_file_private(p, true);
    return p;
}

fs::path copy_mock(const std::string &variant, const std::string &name, const fs::path &dir) {
    make_dirs(dir);
    fs::path src = mock_file(variant, name), dst = dir / src.filename();
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
    make_file_private(dst, true);
    return dst;
}

KprMockStats *mock_stats(const fs::path &file) {
    void *h = dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (!h) return nullptr;
    auto fn = reinterpret_cast<kpr_mock_stats_fn>(dlsym(h, KPR_MOCK_STATS_SYMBOL));
    KprMockStats *s = fn ? fn() : nullptr;
    dlclose(h);  // drops the reference RTLD_NOLOAD added; the core's stays
    return s;
}

kpr::RuntimeOptions isolated_options(const std::vector<fs::path> &dirs) {
    kpr::RuntimeOptions o;
    o.use_environment = false;
    o.probe_gpus = false;
    o.provider_paths = dirs;
    o.log_level = "error";
    return o;
}

const kpr::ProviderInfo *find_provider(const std::vector<kpr::ProviderInfo> &ps, const std::string &name) {
    for (auto &p : ps)
        if (p.name == name) return &p;
    return nullptr;
}

std::optional<kpr::ProviderInfo> loaded_info(const kpr::Runtime &rt, const std::string &name) {
    for (auto &p : rt.providers())
        if (p.name == name && p.state != kpr::ProviderState::Failed) return p;
    return std::nullopt;
}

const kpr::Answer *find_answer(const kpr::Plan &plan, const std::string &name) {
    for (auto &a : plan.answers())
        if (a.provider == name) return &a;
    return nullptr;
}

bool contains(const std::string &haystack, const std::string &needle) {
    return haystack.find(needle) != std::string::npos;
}

// ---- running commands ---------------------------------------------------------------------------

CommandResult run_command(const std::vector<std::string> &argv,
                          const std::vector<std::pair<std::string, std::string>> &env, int timeout_s) {
    CommandResult r;
    std::vector<std::string> envs;
    // Inherit the environment without KPR_* and without the variables the caller sets (a duplicate would
    // be read first by getenv, hiding the caller's value: e.g. ASAN_OPTIONS under a sanitizer run).
    auto named = [&](const char *e) {
        for (auto &kv : env)
            if (std::strncmp(e, kv.first.c_str(), kv.first.size()) == 0 && e[kv.first.size()] == '=') return true;
        return false;
    };
    for (char **e = environ; e && *e; ++e)
        if (std::strncmp(*e, "KPR_", 4) != 0 && !named(*e)) envs.emplace_back(*e);
    for (auto &[k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char *> cenv, cargv;
    for (auto &s : envs) cenv.push_back(s.data());
    cenv.push_back(nullptr);
    std::vector<std::string> args = argv;
    for (auto &s : args) cargv.push_back(s.data());
    cargv.push_back(nullptr);

    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) throw std::runtime_error("pipe failed");
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        execve(cargv[0], cargv.data(), cenv.data());
        dprintf(2, "execve %s: %s\n", cargv[0], std::strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string *dst[2] = {&r.out, &r.err};
    int open_fds = 2;
    bool killed = false;
    while (open_fds > 0) {
        int left = (int)std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) {
            kill(pid, SIGKILL);
            killed = true;
            break;
        }
        int n = poll(fds, 2, left);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[65536];
            ssize_t got = read(fds[i].fd, buf, sizeof buf);
            if (got > 0) dst[i]->append(buf, static_cast<size_t>(got));
            else {
                close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    for (auto &f : fds)
        if (f.fd >= 0) close(f.fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (killed) r.exit_code = -1;
    else if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    else r.exit_code = 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return r;
}

CommandResult run_kpr(const std::vector<std::string> &args,
                      const std::vector<std::pair<std::string, std::string>> &env, int timeout_s) {
    std::vector<std::string> argv = {kpr_binary().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, env, timeout_s);
}

} // namespace kpr_test

// Internal: files replaced atomically through a temporary of their own (see atomic_file.hpp).
#include "atomic_file.hpp"

#include <kpr/error.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kpr::util {
namespace {

// ".<name>.kpr-tmp-<pid>-<random>" in the folder of `target`.
std::string temp_name(const std::string &target) {
    static std::atomic<uint64_t> counter{0};
    thread_local std::mt19937_64 rng([] {
        std::random_device rd;
        const uint64_t t = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
        return ((uint64_t)rd() << 32) ^ rd() ^ t;
    }());
    const uint64_t r = rng() ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    const size_t slash = target.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : target.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? target : target.substr(slash + 1);
    char tail[64];
    std::snprintf(tail, sizeof tail, ".kpr-tmp-%ld-%016llx", (long)::getpid(), (unsigned long long)r);
    return dir + "." + base + tail;
}

constexpr int kTries = 100;

} // namespace

TempFile::TempFile(const std::string &target) : target_(target) {
    int fd = -1, e = 0;
    for (int i = 0; i < kTries; ++i) {
        path_ = temp_name(target);
        fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) break;
        e = errno;
        if (e != EEXIST) break;
    }
    if (fd < 0) throw Error(target + ": cannot create a temporary file next to it (" + path_ + "): " + std::strerror(e));
    live_ = true;
    f_ = ::fdopen(fd, "wb");
    if (!f_) {
        e = errno;
        ::close(fd);
        discard();
        throw Error(target + ": cannot open " + path_ + ": " + std::strerror(e));
    }
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
}

bool TempFile::link_to(const std::string &from, const std::string &target, TempFile &out, std::string *why) {
    TempFile t;
    t.target_ = target;
    int e = 0;
    for (int i = 0; i < kTries; ++i) {
        t.path_ = temp_name(target);
        if (::link(from.c_str(), t.path_.c_str()) == 0) {
            t.live_ = true;
            out = std::move(t);
            return true;
        }
        e = errno;
        if (e != EEXIST) break;
    }
    if (e == EXDEV || e == EPERM || e == EMLINK || e == ENOTSUP) {
        if (why) *why = std::strerror(e);
        return false;
    }
    throw Error(target + ": cannot hard-link " + from + " (as " + t.path_ + "): " + std::strerror(e));
}

TempFile::~TempFile() { discard(); }

TempFile::TempFile(TempFile &&o) noexcept : target_(std::move(o.target_)), path_(std::move(o.path_)), f_(o.f_), live_(o.live_) {
    o.f_ = nullptr;
    o.live_ = false;
}

TempFile &TempFile::operator=(TempFile &&o) noexcept {
    if (this != &o) {
        discard();
        target_ = std::move(o.target_);
        path_ = std::move(o.path_);
        f_ = o.f_;
        live_ = o.live_;
        o.f_ = nullptr;
        o.live_ = false;
    }
    return *this;
}

void TempFile::discard() noexcept {
    if (f_) {
        std::fclose(f_);
        f_ = nullptr;
    }
    if (live_) {
        ::unlink(path_.c_str());
        live_ = false;
    }
}

void TempFile::write(const void *p, size_t n) {
    if (!f_) throw Error(target_ + ": internal error: write to a closed temporary " + path_);
    if (n && std::fwrite(p, 1, n, f_) != n) {
        const int e = errno;
        discard();
        throw Error(target_ + ": cannot write " + path_ + ": " + std::strerror(e));
    }
}

void TempFile::copy_from(const std::string &from) {
    const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        throw Error(target_ + ": cannot read " + from + ": " + std::strerror(e));
    }
    std::string buf(1 << 20, '\0');
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            const int e = errno;
            ::close(fd);
            throw Error(target_ + ": cannot read " + from + ": " + std::strerror(e));
        }
        try {
            write(buf.data(), (size_t)n);
        } catch (...) {
            ::close(fd);
            throw;
        }
    }
    ::close(fd);
}

void TempFile::finish() {
    if (!f_) return;
    int e = 0;
    if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) e = errno;
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (!e && rc != 0) e = errno;
    if (e) {
        discard();
        throw Error(target_ + ": cannot write " + path_ + ": " + std::strerror(e));
    }
}

void TempFile::commit() {
    if (!live_) throw Error(target_ + ": internal error: no temporary to rename into place");
    finish();
    // rename() does nothing when both names are links to one file: drop the temporary name then.
    struct stat a {}, b {};
    if (::lstat(path_.c_str(), &a) == 0 && ::lstat(target_.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
        discard();
        return;
    }
    if (std::rename(path_.c_str(), target_.c_str()) != 0) {
        const int e = errno;
        discard();
        throw Error(target_ + ": cannot rename " + path_ + " into place: " + std::strerror(e));
    }
    live_ = false;
}

void write_file_atomic(const std::string &target, std::string_view bytes) {
    TempFile t(target);
    t.write(bytes);
    t.commit();
}

} // namespace kpr::util

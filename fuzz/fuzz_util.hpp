// Shared helpers for the libFuzzer targets: the readers under test take a path (the GGUF reader maps
// it), so each input is written to an anonymous memory file and handed over as /proc/self/fd/N.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace kpr_fuzz {

class MemFile {
public:
    MemFile(const uint8_t *data, size_t size) {
        fd_ = memfd_create("kpr-fuzz", MFD_CLOEXEC);
        if (fd_ < 0) __builtin_trap();
        size_t off = 0;
        while (off < size) {
            ssize_t n = write(fd_, data + off, size - off);
            if (n <= 0) __builtin_trap();
            off += size_t(n);
        }
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    ~MemFile() { close(fd_); }
    MemFile(const MemFile &) = delete;
    MemFile &operator=(const MemFile &) = delete;
    const std::string &path() const { return path_; }

private:
    int fd_ = -1;
    std::string path_;
};

} // namespace kpr_fuzz

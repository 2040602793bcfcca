#include "device/memory_check.hpp"

#include <kpr/error.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace kpr::detail {

uint64_t host_available_bytes() {
    if (FILE *f = std::fopen("/proc/meminfo", "re")) {
        char line[256];
        unsigned long long kib = 0;
        bool found = false;
        while (std::fgets(line, sizeof line, f))
            if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                found = true;
                break;
            }
        std::fclose(f);
        if (found) return sat_mul(kib, 1024);
    }
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) return sat_mul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page));
    return 0;
}

namespace {
std::string bytes_text(uint64_t b) {
    return b == UINT64_MAX ? std::string("more than 2^64 bytes") : fmt::format("{} bytes ({})", b, human_bytes(b));
}
} // namespace

void check_host_bytes(uint64_t bytes, const std::string &what) {
    const uint64_t avail = host_available_bytes();
    if (avail && bytes > avail)
        throw Error(fmt::format("{}: needs {} of host memory, but only {} is available (MemAvailable)", what,
                                bytes_text(bytes), bytes_text(avail)));
}

void check_device_bytes(const Device &dev, uint64_t bytes, const std::string &what) {
    if (!dev.is_cuda()) return check_host_bytes(bytes, what);
    if (dev.desc.memory_bytes && bytes > dev.desc.memory_bytes)
        throw Error(fmt::format("{}: needs {} of memory on {}, which has {}", what, bytes_text(bytes), dev.id,
                                bytes_text(dev.desc.memory_bytes)));
}

uint64_t sat_add(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

} // namespace kpr::detail

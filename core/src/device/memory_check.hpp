// Checks, before a large allocation, that the bytes asked for can exist on the device that must hold them,
// so that an absurd (but valid) shape ends with an error naming the op and the size instead of
// std::bad_alloc or the out-of-memory killer.
#pragma once

#include <kpr/runtime.hpp>

#include <cstdint>
#include <string>

namespace kpr::detail {

// What the host can give a process now: MemAvailable from /proc/meminfo, else the physical memory
// (sysconf), else 0 (unknown).
uint64_t host_available_bytes();

// Throws kpr::Error "{what}: needs {bytes} of host memory, but only {available} is available ..." when
// `bytes` exceeds host_available_bytes() (nothing is checked when that is unknown).
void check_host_bytes(uint64_t bytes, const std::string &what);

// The same against the device's own memory (desc.memory_bytes) for a CUDA device; a CPU device is the host.
void check_device_bytes(const Device &dev, uint64_t bytes, const std::string &what);

// a + b, or UINT64_MAX when that overflows; a * b likewise. For adding up byte counts.
uint64_t sat_add(uint64_t a, uint64_t b);
uint64_t sat_mul(uint64_t a, uint64_t b);

} // namespace kpr::detail

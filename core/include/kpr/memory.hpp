// kpr/memory.hpp -- memory and streams on a kpr device, for engines, tools and tests.
//
// The core talks to NVIDIA GPUs through the driver API opened at run time, so these work in any build:
// on the CPU a Buffer is aligned host memory; on cuda:N it is device memory in the primary context
// (the one the CUDA runtime inside providers uses too).
#pragma once

#include <kpr/runtime.hpp>

#include <cstddef>
#include <memory>
#include <vector>

namespace kpr {

class Buffer {
public:
    Buffer() = default;
    Buffer(const Device &device, size_t bytes);  // throws kpr::Error when allocation fails
    Buffer(Buffer &&) noexcept;
    Buffer &operator=(Buffer &&) noexcept;
    ~Buffer();
    void *data() const { return ptr_; }          // host pointer (CPU) or device pointer (CUDA)
    size_t size() const { return bytes_; }
    void upload(const void *src, size_t bytes, size_t offset = 0);   // synchronous
    void download(void *dst, size_t bytes, size_t offset = 0) const;  // synchronous

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    void *ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A stream (CUDA) or nothing (CPU), with a timer. Timing a CUDA stream uses events: the time the GPU spent.
class Stream {
public:
    explicit Stream(const Device &device);
    ~Stream();
    Stream(const Stream &) = delete;
    Stream &operator=(const Stream &) = delete;
    void *handle() const { return stream_; }  // pass to PreparedOp::run
    void synchronize() const;
    void record_start();
    // Milliseconds since record_start(), after waiting for the work in between.
    double elapsed_ms();

private:
    Device device_;
    void *stream_ = nullptr;
    void *start_ = nullptr, *stop_ = nullptr;
    double host_start_ = 0;
};

} // namespace kpr

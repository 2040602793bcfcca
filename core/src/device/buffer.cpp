#include <kpr/memory.hpp>

#include "device/cuda_driver.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace kpr {

struct Buffer::Impl {
    cuda::DeviceBuffer dev;
    void *host = nullptr;
    ~Impl() { std::free(host); }
};

Buffer::Buffer(const Device &d, size_t bytes) : impl_(std::make_unique<Impl>()), bytes_(bytes) {
    if (d.desc.simulated) throw Error(fmt::format("cannot allocate on {}: a simulated device", d.id));
    if (d.is_cuda()) {
        impl_->dev = cuda::DeviceBuffer(d.desc.ordinal, bytes);
        ptr_ = impl_->dev.ptr();
    } else {
        size_t rounded = (bytes + 63) / 64 * 64;
        impl_->host = std::aligned_alloc(64, rounded ? rounded : 64);
        if (!impl_->host) throw Error(fmt::format("out of host memory allocating {} bytes", bytes));
        ptr_ = impl_->host;
    }
}
Buffer::Buffer(Buffer &&o) noexcept { *this = std::move(o); }
Buffer &Buffer::operator=(Buffer &&o) noexcept {
    std::swap(impl_, o.impl_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
}
Buffer::~Buffer() = default;

void Buffer::upload(const void *src, size_t bytes, size_t offset) {
    if (offset > bytes_ || bytes > bytes_ - offset) throw Error("Buffer::upload past the end of the buffer");
    if (impl_->host) std::memcpy(static_cast<char *>(impl_->host) + offset, src, bytes);
    else impl_->dev.upload(src, bytes, offset);
}

void Buffer::download(void *dst, size_t bytes, size_t offset) const {
    if (offset > bytes_ || bytes > bytes_ - offset) throw Error("Buffer::download past the end of the buffer");
    if (impl_->host) std::memcpy(dst, static_cast<const char *>(impl_->host) + offset, bytes);
    else impl_->dev.download(dst, bytes, offset);
}

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Stream::Stream(const Device &d) : device_(d) {
    if (!d.is_cuda()) return;
    const cuda::Driver &drv = cuda::driver();
    drv.make_current(d.desc.ordinal);
    cuda::CUstream s;
    drv.check(drv.cuStreamCreate(&s, 1 /* non-blocking */), "cuStreamCreate");
    stream_ = s;
    cuda::CUevent a, b;
    drv.check(drv.cuEventCreate(&a, 0), "cuEventCreate");
    drv.check(drv.cuEventCreate(&b, 0), "cuEventCreate");
    start_ = a;
    stop_ = b;
}

Stream::~Stream() {
    if (!stream_) return;
    const cuda::Driver &drv = cuda::driver();
    drv.cuEventDestroy(static_cast<cuda::CUevent>(start_));
    drv.cuEventDestroy(static_cast<cuda::CUevent>(stop_));
    drv.cuStreamDestroy(static_cast<cuda::CUstream>(stream_));
}

void Stream::synchronize() const {
    if (!stream_) return;
    cuda::driver().check(cuda::driver().cuStreamSynchronize(static_cast<cuda::CUstream>(stream_)), "cuStreamSynchronize");
}

void Stream::record_start() {
    if (!stream_) {
        host_start_ = now_ms();
        return;
    }
    cuda::driver().check(cuda::driver().cuEventRecord(static_cast<cuda::CUevent>(start_), static_cast<cuda::CUstream>(stream_)),
                         "cuEventRecord");
}

double Stream::elapsed_ms() {
    if (!stream_) return now_ms() - host_start_;
    const cuda::Driver &drv = cuda::driver();
    drv.check(drv.cuEventRecord(static_cast<cuda::CUevent>(stop_), static_cast<cuda::CUstream>(stream_)), "cuEventRecord");
    drv.check(drv.cuEventSynchronize(static_cast<cuda::CUevent>(stop_)), "cuEventSynchronize");
    float ms = 0;
    drv.check(drv.cuEventElapsedTime(&ms, static_cast<cuda::CUevent>(start_), static_cast<cuda::CUevent>(stop_)),
              "cuEventElapsedTime");
    return ms;
}

} // namespace kpr

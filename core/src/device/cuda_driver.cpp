#include "device/cuda_driver.hpp"

#include <kpr/error.hpp>

#include <dlfcn.h>
#include <fmt/format.h>

namespace kpr::cuda {

namespace {
template <typename F> bool bind(void *lib, F &fn, const char *name) {
    fn = reinterpret_cast<F>(dlsym(lib, name));
    return fn != nullptr;
}

Driver open_driver() {
    Driver d;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        d.why_not = "no NVIDIA driver (libcuda.so.1 not found)";
        return d;
    }
    bool ok = bind(lib, d.cuInit, "cuInit") && bind(lib, d.cuDriverGetVersion, "cuDriverGetVersion") &&
              bind(lib, d.cuDeviceGetCount, "cuDeviceGetCount") && bind(lib, d.cuDeviceGet, "cuDeviceGet") &&
              bind(lib, d.cuDeviceGetName, "cuDeviceGetName") &&
              bind(lib, d.cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
              bind(lib, d.cuDeviceTotalMem, "cuDeviceTotalMem_v2") &&
              bind(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
              bind(lib, d.cuCtxSetCurrent, "cuCtxSetCurrent") && bind(lib, d.cuMemAlloc, "cuMemAlloc_v2") &&
              bind(lib, d.cuMemFree, "cuMemFree_v2") && bind(lib, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
              bind(lib, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2") && bind(lib, d.cuMemsetD8, "cuMemsetD8_v2") &&
              bind(lib, d.cuStreamCreate, "cuStreamCreate") && bind(lib, d.cuStreamDestroy, "cuStreamDestroy_v2") &&
              bind(lib, d.cuStreamSynchronize, "cuStreamSynchronize") &&
              bind(lib, d.cuEventCreate, "cuEventCreate") && bind(lib, d.cuEventDestroy, "cuEventDestroy_v2") &&
              bind(lib, d.cuEventRecord, "cuEventRecord") && bind(lib, d.cuEventSynchronize, "cuEventSynchronize") &&
              bind(lib, d.cuEventElapsedTime, "cuEventElapsedTime");
    bind(lib, d.cuGetErrorString, "cuGetErrorString");
    if (!bind(lib, d.cuDeviceGetUuid, "cuDeviceGetUuid_v2")) bind(lib, d.cuDeviceGetUuid, "cuDeviceGetUuid");
    if (!ok) {
        d.why_not = "libcuda.so.1 lacks driver API entry points kpr needs (a stub or a very old driver)";
        return d;
    }
    if (CUresult r = d.cuInit(0); r != 0) {
        d.why_not = fmt::format("cuInit failed: {} (no usable GPU, or the driver is a stub)", d.error_string(r));
        return d;
    }
    d.cuDriverGetVersion(&d.version);
    d.loaded = true;
    return d;
}
} // namespace

std::string Driver::error_string(CUresult r) const {
    const char *s = nullptr;
    if (cuGetErrorString && cuGetErrorString(r, &s) == 0 && s) return fmt::format("CUDA error {} ({})", r, s);
    return fmt::format("CUDA error {}", r);
}

void Driver::check(CUresult r, const char *what) const {
    if (r != 0) throw Error(fmt::format("{}: {}", what, error_string(r)));
}

void Driver::make_current(int ordinal) const {
    if (!loaded) throw Error("CUDA is not available: " + why_not);
    CUdevice dev;
    check(cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    CUcontext ctx;
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

const Driver &driver() {
    static const Driver d = open_driver();
    return d;
}

DeviceBuffer::DeviceBuffer(int ordinal, size_t bytes) : ordinal_(ordinal), bytes_(bytes) {
    const Driver &d = driver();
    d.make_current(ordinal);
    d.check(d.cuMemAlloc(&ptr_, bytes ? bytes : 1), "cuMemAlloc");
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
    std::swap(ordinal_, o.ordinal_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) {
        try {
            driver().make_current(ordinal_);
            driver().cuMemFree(ptr_);
        } catch (...) {
        }
    }
}

void DeviceBuffer::upload(const void *src, size_t bytes, size_t offset) {
    if (offset + bytes > bytes_) throw Error("DeviceBuffer::upload past the end");
    driver().make_current(ordinal_);
    driver().check(driver().cuMemcpyHtoD(ptr_ + offset, src, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void *dst, size_t bytes, size_t offset) const {
    if (offset + bytes > bytes_) throw Error("DeviceBuffer::download past the end");
    driver().make_current(ordinal_);
    driver().check(driver().cuMemcpyDtoH(dst, ptr_ + offset, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill(unsigned char byte) {
    driver().make_current(ordinal_);
    driver().check(driver().cuMemsetD8(ptr_, byte, bytes_), "cuMemsetD8");
}

} // namespace kpr::cuda

// ---- appended for kpr bench -----------------------------------------------------------------------
namespace kpr::cuda {
const ModuleApi &module_api() {
    static const ModuleApi api = [] {
        ModuleApi a;
        if (!driver().loaded) return a;
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (!lib) return a;
        a.cuModuleLoadDataEx = reinterpret_cast<decltype(a.cuModuleLoadDataEx)>(dlsym(lib, "cuModuleLoadDataEx"));
        a.cuModuleGetFunction = reinterpret_cast<decltype(a.cuModuleGetFunction)>(dlsym(lib, "cuModuleGetFunction"));
        a.cuModuleUnload = reinterpret_cast<decltype(a.cuModuleUnload)>(dlsym(lib, "cuModuleUnload"));
        a.cuLaunchKernel = reinterpret_cast<decltype(a.cuLaunchKernel)>(dlsym(lib, "cuLaunchKernel"));
        a.loaded = a.cuModuleLoadDataEx && a.cuModuleGetFunction && a.cuModuleUnload && a.cuLaunchKernel;
        return a;
    }();
    return api;
}
} // namespace kpr::cuda

// The CUDA driver API, opened at run time (libcuda.so.1): the core never links the CUDA toolkit, so one
// binary runs on machines with and without a GPU. Only the handful of entry points kpr uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kpr::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUdeviceptr = unsigned long long;

struct Driver {
    bool loaded = false;
    std::string why_not;  // when !loaded: "libcuda.so.1 not found", "cuInit failed: ..."
    int version = 0;

    CUresult (*cuInit)(unsigned) = nullptr;
    CUresult (*cuDriverGetVersion)(int *) = nullptr;
    CUresult (*cuDeviceGetCount)(int *) = nullptr;
    CUresult (*cuDeviceGet)(CUdevice *, int) = nullptr;
    CUresult (*cuDeviceGetName)(char *, int, CUdevice) = nullptr;
    CUresult (*cuDeviceGetUuid)(unsigned char *, CUdevice) = nullptr;
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice) = nullptr;
    CUresult (*cuDeviceTotalMem)(size_t *, CUdevice) = nullptr;
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = nullptr;
    CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = nullptr;
    CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) = nullptr;
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) = nullptr;
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
    CUresult (*cuStreamCreate)(CUstream *, unsigned) = nullptr;
    CUresult (*cuStreamDestroy)(CUstream) = nullptr;
    CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
    CUresult (*cuEventCreate)(CUevent *, unsigned) = nullptr;
    CUresult (*cuEventDestroy)(CUevent) = nullptr;
    CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
    CUresult (*cuEventSynchronize)(CUevent) = nullptr;
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent) = nullptr;
    CUresult (*cuGetErrorString)(CUresult, const char **) = nullptr;

    std::string error_string(CUresult r) const;
    // Throws kpr::Error("what: CUDA error N (name)") when r != 0.
    void check(CUresult r, const char *what) const;
    // Makes the device's primary context current on this thread (the one cudart uses too).
    void make_current(int ordinal) const;
};

// The process-wide driver, opened on first use. Never unloaded.
const Driver &driver();

// Device memory owned by the core (self-tests, benchmarks, the CLI's gemv).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(int ordinal, size_t bytes);
    DeviceBuffer(DeviceBuffer &&o) noexcept { *this = std::move(o); }
    DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
    ~DeviceBuffer();
    void *ptr() const { return reinterpret_cast<void *>(static_cast<uintptr_t>(ptr_)); }
    size_t size() const { return bytes_; }
    void upload(const void *src, size_t bytes, size_t offset = 0);
    void download(void *dst, size_t bytes, size_t offset = 0) const;
    void fill(unsigned char byte);

private:
    int ordinal_ = 0;
    CUdeviceptr ptr_ = 0;
    size_t bytes_ = 0;
};

} // namespace kpr::cuda

// ---- appended for kpr bench: loading hand-written PTX through the driver (it JIT-compiles PTX; no
// toolkit at run time). Opened on first use from the same libcuda.so.1; `loaded` false when absent.
namespace kpr::cuda {
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;

struct ModuleApi {
    bool loaded = false;
    CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **) = nullptr;
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *) = nullptr;
    CUresult (*cuModuleUnload)(CUmodule) = nullptr;
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               CUstream, void **, void **) = nullptr;
};
const ModuleApi &module_api();
} // namespace kpr::cuda

// bench_timing.cuh -- what the CUDA benchmark programs share: the streaming read that defines the device's
// read bandwidth, graph-replayed timing of a sequence of calls, and the median.
#pragma once

#include "kpr_cuda_util.cuh" // pdl_wait / pdl_launch_dependents

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

// The probes' check of a CUDA call: the file, line and error, then exit(1).
#define PROBE_CK(...)                                                                                          \
    do {                                                                                                       \
        cudaError_t e_ = (__VA_ARGS__);                                                                        \
        if (e_ != cudaSuccess) {                                                                               \
            std::printf("%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                          \
            std::exit(1);                                                                                      \
        }                                                                                                      \
    } while (0)

namespace kpr::bench {

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Grid-stride 16-byte loads over n vectors, xor-reduced so they stay alive. PDL: lets the next kernel
// launch at once and waits for the previous one only before its (never taken) write; WAIT_FIRST (with
// PDL): waits before its first load instead, as a call that depends on the one before does.
template <bool PDL, bool WAIT_FIRST = false>
__global__ void stream_read_kernel(const uint4 *__restrict__ p, size_t n, uint32_t *out) {
    if (PDL) kpr::cuda::pdl_launch_dependents();
    if (PDL && WAIT_FIRST) kpr::cuda::pdl_wait();
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint4 v = __ldg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (PDL && !WAIT_FIRST) kpr::cuda::pdl_wait();
    if (acc == 0x12345678u) out[0] = acc;
}

// Pseudo-random words whose two 16-bit halves are finite f16 values below 1 (weight scales that are never
// inf or NaN) and that read as small floats.
static __global__ void fill_finite_halves(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        p[i] = x & 0x3bff3bffu;
    }
}

// The device's read bandwidth in GB/s: stream_read_kernel over the first `bytes` of buf (a multiple of 16),
// one warm-up pass and 7 timed ones, the median. `out`: 4 bytes of device memory the kernel may write.
inline double measure_read_bandwidth(cudaStream_t s, const uint8_t *buf, size_t bytes, int sms, uint32_t *out) {
    std::vector<double> g;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int r = 0; r < 8; ++r) {
        cudaEventRecord(a, s);
        stream_read_kernel<false><<<sms * 8, 256, 0, s>>>(reinterpret_cast<const uint4 *>(buf), bytes / 16, out);
        cudaEventRecord(b, s);
        PROBE_CK(cudaEventSynchronize(b));
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (r) g.push_back(bytes / (ms * 1e-3) / 1e9);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(g);
}

// Device 0's multiprocessors and shared-memory limits, for the probes that need compute capability 9.0;
// false (with the reason printed) where there is no such GPU.
struct ProbeDevice {
    int sms = 0, smem_optin = 0, smem_per_sm = 0;
};
inline bool probe_device_cc9(ProbeDevice &d, const char *why) {
    int n = 0, cc = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        std::printf("no CUDA GPU\n");
        return false;
    }
    cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, 0);
    if (cc < 9) {
        std::printf("needs compute capability 9.0 (%s)\n", why);
        return false;
    }
    cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    cudaDeviceGetAttribute(&d.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
    return true;
}

inline void replay_check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "graph replay: %s: %s\n", what, cudaGetErrorString(e));
        std::abort();
    }
}

// Captures body(0) .. body(iters - 1) on stream s into a graph, replays it once to warm up, then five
// times timed with events: the median, in microseconds per call.
template <class F>
double replay_us(cudaStream_t s, uint32_t iters, F &&body) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    replay_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
    for (uint32_t i = 0; i < iters; ++i) body(i);
    replay_check(cudaStreamEndCapture(s, &g), "end capture");
    replay_check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    replay_check(cudaGraphLaunch(ge, s), "warm-up launch");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> t;
    for (int rep = 0; rep < 5; ++rep) {
        cudaEventRecord(e0, s);
        replay_check(cudaGraphLaunch(ge, s), "launch");
        cudaEventRecord(e1, s);
        replay_check(cudaEventSynchronize(e1), "synchronize");
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        t.push_back(ms * 1e3 / iters);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    replay_check(cudaGetLastError(), "a captured call");
    return median(t);
}

} // namespace kpr::bench

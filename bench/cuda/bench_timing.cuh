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

namespace kpr::bench {

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Grid-stride 16-byte loads over n vectors, xor-reduced so they stay alive. PDL: lets the next kernel
// launch at once and waits for the previous one only before its (never taken) write.
template <bool PDL>
__global__ void stream_read_kernel(const uint4 *__restrict__ p, size_t n, uint32_t *out) {
    if (PDL) kpr::cuda::pdl_launch_dependents();
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint4 v = __ldg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (PDL) kpr::cuda::pdl_wait();
    if (acc == 0x12345678u) out[0] = acc;
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

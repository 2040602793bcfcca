// A one-thread kernel that keeps a CUDA stream busy for a given time (it spins on %globaltimer).
//
// Why: a sample of `kpr bench` launches many short calls. Launched straight from the host, a call of a few
// microseconds can run faster than the host issues it, and the events then time the host's launch rate.
// With the stream held for longer than the host needs to queue the sample, the GPU finds the whole sample
// queued when the hold ends and runs it back to back: the events time the GPU, as an engine replaying a
// CUDA graph sees it.
#pragma once

#include <kpr/runtime.hpp>

namespace kpr::bench {

class GpuHold {
public:
    explicit GpuHold(const Device &dev);  // loads the kernel (PTX, JIT by the driver); throws kpr::Error
    ~GpuHold();
    GpuHold(const GpuHold &) = delete;
    GpuHold &operator=(const GpuHold &) = delete;
    void hold(void *stream, double ms) const;  // enqueue: the stream waits `ms` before its next work

private:
    void *mod_ = nullptr;
    void *fn_ = nullptr;
};

} // namespace kpr::bench

// kpr_cuda_weight_copy.hpp -- device copies of weight tensors that a provider makes at prepare time (a
// repacked layout), shared between the prepared ops of one provider library that name the same tensor:
// same caller identity (kpr_weights::identity, non-zero), same device pointer and size, same device and
// layout. The copy is freed with the last prepared op holding it. Identity 0: never shared.
#pragma once

#include "kpr_cuda_host.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>

namespace kpr::cuda {

struct WeightCopy {
    void *data = nullptr;
    uint64_t bytes = 0;
    int ordinal = 0;
};

// identity, source pointer, source bytes, device, layout (the provider's own tag)
using WeightCopyKey = std::tuple<uint64_t, const void *, uint64_t, int, uint32_t>;

class WeightCopies {
public:
    // The copy for `key`, made by fill(dst) into `bytes` of new device memory if no live prepared op holds
    // one. fill enqueues on the legacy default stream after the device has finished what was queued (the
    // caller's upload of the weights may still be in flight); acquire returns when the copy is complete.
    template <class Fill>
    kpr_status acquire(const WeightCopyKey &key, uint64_t bytes, Fill &&fill, std::shared_ptr<WeightCopy> *out,
                       kpr_error *err) {
        const bool shared = std::get<0>(key) != 0;
        std::lock_guard<std::mutex> lock(mu_);
        if (shared) {
            auto it = live_.find(key);
            if (it != live_.end()) {
                if (auto sp = it->second.lock()) {
                    *out = std::move(sp);
                    return KPR_OK;
                }
            }
        }
        const int ordinal = std::get<3>(key);
        void *mem = nullptr;
        cudaError_t e = cudaMalloc(&mem, bytes);
        if (e != cudaSuccess) return cuda_fail(err, e, "prepare: device memory for the repacked weights");
        e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = fill(mem);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
            cudaFree(mem);
            return cuda_fail(err, e, "prepare: repacking the weights");
        }
        auto *c = new (std::nothrow) WeightCopy{mem, bytes, ordinal};
        if (c == nullptr) {
            cudaFree(mem);
            return fail(err, KPR_ERR_OUT_OF_MEMORY, "prepare: host allocation failed");
        }
        std::shared_ptr<WeightCopy> sp(c, [this, key, shared](WeightCopy *w) { release(key, shared, w); });
        if (shared) live_[key] = sp;
        *out = std::move(sp);
        return KPR_OK;
    }

private:
    void release(const WeightCopyKey &key, bool shared, WeightCopy *w) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (shared) {
                auto it = live_.find(key);
                if (it != live_.end() && it->second.expired()) live_.erase(it);
            }
        }
        use_device(w->ordinal);
        cudaFree(w->data);
        delete w;
    }

    std::mutex mu_;
    std::map<WeightCopyKey, std::weak_ptr<WeightCopy>> live_;
};

} // namespace kpr::cuda

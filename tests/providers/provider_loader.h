// Loads libkpr_generic_cpu.so with dlopen and shakes hands, as the core would (no core needed).
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "kpr/provider.h"

namespace kpr_test {

inline void quiet_log(void *, int32_t, const char *) {}

inline const kpr_host_api *test_host() {
    static kpr_host_api host = {sizeof(kpr_host_api), KPR_ABI_VERSION, quiet_log, nullptr, KPR_LOG_WARN};
    return &host;
}

struct LoadedProvider {
    void *handle = nullptr;
    kpr_provider_entry_fn entry = nullptr;
    const kpr_provider_v1 *table = nullptr;
    void *state = nullptr;
    std::string error;

    bool load(const std::string &path) {
        handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            error = dlerror();
            return false;
        }
        entry = reinterpret_cast<kpr_provider_entry_fn>(dlsym(handle, KPR_PROVIDER_ENTRY_SYMBOL));
        if (!entry) {
            error = "no kpr_provider_entry";
            return false;
        }
        kpr_handshake_offer offer = {sizeof offer, KPR_MAKE_VERSION(1, 0), KPR_ABI_VERSION, 0, test_host()};
        kpr_handshake_answer answer = {sizeof answer, 0, nullptr};
        kpr_error err = {sizeof err, {0}};
        if (entry(&offer, &answer, &err) != KPR_OK || !answer.table) {
            error = std::string("handshake: ") + err.message;
            return false;
        }
        table = answer.table;
        if (table->init && table->init(test_host(), &state, &err) != KPR_OK) {
            error = std::string("init: ") + err.message;
            return false;
        }
        return true;
    }
};

// The CPU this process runs on, described as the core's probe would.
inline kpr_device_desc host_cpu_device() {
    kpr_device_desc d;
    std::memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.kind = KPR_DEVICE_CPU;
    std::snprintf(d.name, sizeof d.name, "host cpu");
    __builtin_cpu_init();
    uint64_t f = 0;
    if (__builtin_cpu_supports("sse4.2")) f |= KPR_CPU_SSE42;
    if (__builtin_cpu_supports("avx")) f |= KPR_CPU_AVX;
    if (__builtin_cpu_supports("avx2")) f |= KPR_CPU_AVX2;
    if (__builtin_cpu_supports("fma")) f |= KPR_CPU_FMA;
    if (__builtin_cpu_supports("f16c")) f |= KPR_CPU_F16C;
    if (__builtin_cpu_supports("avx512f")) f |= KPR_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512bw")) f |= KPR_CPU_AVX512BW;
    if (__builtin_cpu_supports("avx512vl")) f |= KPR_CPU_AVX512VL;
    if (__builtin_cpu_supports("avx512dq")) f |= KPR_CPU_AVX512DQ;
    if (__builtin_cpu_supports("avx512vnni")) f |= KPR_CPU_AVX512VNNI;
    if (__builtin_cpu_supports("bmi2")) f |= KPR_CPU_BMI2;
    d.cpu_features = f;
    d.cpu_threads = 2;
    d.cpu_cores = 2;
    return d;
}

inline bool host_has_avx2() {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
inline bool host_has_avx512() {
    return host_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

} // namespace kpr_test

// libFuzzer target: the .npy reader (kpr::npy::read) on arbitrary bytes; an accepted array must hold
// exactly product(shape) values.
#include "fuzz_util.hpp"

#include <kpr/error.hpp>
#include <kpr/npy.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kpr_fuzz::MemFile mf(data, size);
    try {
        kpr::npy::Array a = kpr::npy::read(mf.path());
        uint64_t n = 1;
        for (uint64_t d : a.shape)
            if (__builtin_mul_overflow(n, d, &n)) __builtin_trap();  // accepted a shape whose size overflows
        if (n != a.data.size()) __builtin_trap();
    } catch (const kpr::Error &) {
    }
    return 0;
}

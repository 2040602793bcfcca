// Placeholder until the SIMD kernels land: no entries, the portable kernels serve.
#include "cpu_common.h"
namespace kpr_cpu {
const KernelTable &avx512vnni_kernels() {
    static const KernelTable t{"avx512vnni", {}};
    return t;
}
} // namespace kpr_cpu

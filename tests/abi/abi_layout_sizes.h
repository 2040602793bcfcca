/* sizeof of every ABI struct as one language compiled it, so a C++ test can compare C's answer with its own. */
#ifndef KPR_ABI_LAYOUT_SIZES_H
#define KPR_ABI_LAYOUT_SIZES_H

#include <kpr/provider.h>
#include <stddef.h>

#define KPR_ABI_N_SIZES 15
#define KPR_ABI_FILL_SIZES(out)                                                                     \
    do {                                                                                            \
        (out)[0] = sizeof(kpr_error);                                                               \
        (out)[1] = sizeof(kpr_host_api);                                                            \
        (out)[2] = sizeof(kpr_device_desc);                                                         \
        (out)[3] = sizeof(kpr_op_desc);                                                             \
        (out)[4] = sizeof(kpr_option_decl);                                                         \
        (out)[5] = sizeof(kpr_option_value);                                                        \
        (out)[6] = sizeof(kpr_option_set);                                                          \
        (out)[7] = sizeof(kpr_provider_identity);                                                   \
        (out)[8] = sizeof(kpr_offer);                                                               \
        (out)[9] = sizeof(kpr_weights);                                                             \
        (out)[10] = sizeof(kpr_run_args);                                                           \
        (out)[11] = sizeof(kpr_selftest_case);                                                      \
        (out)[12] = sizeof(kpr_provider_v1);                                                        \
        (out)[13] = sizeof(kpr_handshake_offer);                                                    \
        (out)[14] = sizeof(kpr_handshake_answer);                                                   \
    } while (0)

#ifdef __cplusplus
extern "C" {
#endif
void kpr_abi_sizes_c99(size_t out[KPR_ABI_N_SIZES]);
void kpr_abi_sizes_c11(size_t out[KPR_ABI_N_SIZES]);
#ifdef __cplusplus
}
#endif

#endif

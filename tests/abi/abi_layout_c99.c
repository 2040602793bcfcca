/* The ABI headers compiled as C99 (-pedantic-errors), with every layout check. */
#define KPR_LAYOUT_CHECK(c, m) _Static_assert(c, m)
#include "abi_layout_checks.inc"

#include "abi_layout_sizes.h"

void kpr_abi_sizes_c99(size_t out[KPR_ABI_N_SIZES]) { KPR_ABI_FILL_SIZES(out); }

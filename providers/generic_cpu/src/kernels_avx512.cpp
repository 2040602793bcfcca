// AVX-512 F/BW/VL/DQ kernels without VNNI (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq).
#define KPR_ISA_NS avx512
#define KPR_ISA_NAME "avx512"
#define KPR_TABLE_FN avx512_kernels
#include "kernels_x86.inc"

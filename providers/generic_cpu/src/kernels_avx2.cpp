// AVX2 + FMA + F16C kernels (this file is compiled with -mavx2 -mfma -mf16c).
#define KPR_ISA_NS avx2
#define KPR_ISA_NAME "avx2"
#define KPR_TABLE_FN avx2_kernels
#include "kernels_x86.inc"

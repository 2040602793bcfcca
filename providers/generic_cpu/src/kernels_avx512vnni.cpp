// AVX-512 kernels with VNNI (vpdpbusd); compiled with the AVX-512 flags plus -mavx512vnni.
#define KPR_ISA_NS avx512vnni
#define KPR_ISA_NAME "avx512+vnni"
#define KPR_TABLE_FN avx512vnni_kernels
#include "kernels_x86.inc"

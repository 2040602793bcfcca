#!/bin/bash
# The device runs owed on an H200 since the fifty-fourth session, ready to run (written by the fifty-fifth session,
# which got no machine: of 20 calls, 13 failed to start and 7 were refused). Copy it to .devcarry/ with the pack and
# call it there.
#
# The pack (about 10 minutes on this machine's two cores, from a fresh checkout):
#   cmake --preset cuda-h200 && nice ninja -C build-cuda-h200 -j 2 bin/kpr providers/libkpr_generic_cpu.so \
#     providers/libkpr_generic_cuda.so providers/libkpr_sm60_q8.so providers/libkpr_iq_stage_tables.so \
#     tests/gpu/kpr_gpu_tests bench/cuda/kpr_cuda_bench
#   scripts/variant-build --patch docs/measurements/iq4-nl-multi-column-old-selectors-experiment.patch nlold2 \
#     providers/generic_cuda/k_iq4_nl.cu:KPR_NL_OLD_MULTI=1
#   scripts/variant-build --patch docs/measurements/iq4-nl-two-column-three-stages-experiment.patch nc2s3 \
#     providers/generic_cuda/k_iq4_nl.cu:KPR_NC2_STAGES=3
#   scripts/device-pack nlold2=build-variants/nlold2 nc2s3=build-variants/nc2s3      (34 MiB)
#   cp docs/measurements/h200-owed-runs.sh .devcarry/
# Then, with the run tool (carry [".devcarry"], kind nvidia-h200), one call per part:
#   bash .devcarry/h200-owed-runs.sh main        T, C, S, A below: about 300 s on an H100
#   bash .devcarry/h200-owed-runs.sh racecheck   racecheck on every self-test case: about 450 s on an H100
#   bash .devcarry/h200-owed-runs.sh gpu-tests   kpr_gpu_tests: about 200 s on an H100
#   bash .devcarry/h200-owed-runs.sh short       C then T only, for a call with little device time left
# Part main: T, main's targets at 1..8 columns (4096 x 14336, every type of the table); C, every CUDA
# self-test; S, memcheck and synccheck on every self-test case of the three CUDA providers; A, nlold2 (IQ4_NL's
# 2..8-column tile kernels on the older selectors) and nc2s3 (the one-wave 2-column launch at 3 stages) against base
# at 2, 4 and 8 columns on six shapes. On a card other than an H200 (main's checks ran on an H100 in the fifty-fourth
# session) main runs T and A only, short T only, and racecheck and gpu-tests nothing.
set -u
PART=${1:-main}
case "$PART" in main|short|racecheck|gpu-tests) ;; *) echo "usage: $0 [main|short|racecheck|gpu-tests]" >&2; exit 2 ;; esac
exec > >(tee "$OUT/log.txt") 2>&1
T0=$(date +%s); el() { echo "-- t=$(( $(date +%s) - T0 )) s"; }
save() { cp "$OUT/device-ab.txt" "$OUT/device-ab-$1.txt"; }
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
h200() { case "$CARD" in *H200*) return 0 ;; *) echo "not an H200 ($CARD): $1 left out"; return 1 ;; esac; }
part_t() {
  echo "### part T: main's targets, 1..8 columns, 4096x14336"
  timeout 150 scripts/device-ab --passes 3 --ncols 1,2,3,4,5,6,7,8 base > /dev/null 2>&1; echo "rc $?"; save T
  grep -m1 bandwidth "$OUT/device-ab-T.txt"; sed -n '/== summary/,$p' "$OUT/device-ab-T.txt"; el
}
part_c() { # $1: the seconds it may take
  echo "### part C: every CUDA self-test, base"
  timeout "$1" scripts/device-ab --no-bench --selftest base > /dev/null 2>&1; echo "rc $?"; save C
  grep -E "passed|failed|FAIL|no case" "$OUT/device-ab-C.txt" | sed 's/(seed.*//' | sort | uniq -c | sort -rn | head -8; el
}
part_a() {
  echo "### part A: nlold2 and nc2s3 against base, IQ4_NL at 2, 4, 8 columns"
  timeout 200 scripts/device-ab --passes 3 --ncols 2,4,8 --types iq4_nl \
    --shapes 4096x14336,14336x4096,4096x11008,8192x8192,5120x13824,3584x18944 \
    base nlold2 nc2s3 > /dev/null 2>&1; echo "rc $?"; save A
  grep -m1 bandwidth "$OUT/device-ab-A.txt"; sed -n '/== summary/,$p' "$OUT/device-ab-A.txt"; el
}
case "$PART" in
  main)
    part_t
    if h200 "parts C and S"; then
      part_c 150
      echo "### part S: memcheck and synccheck on every self-test case, base"
      timeout 220 scripts/device-ab --no-bench --sanitize-all --tools memcheck,synccheck base > /dev/null 2>&1
      echo "rc $?"; save S
      grep -E "ERROR SUMMARY|[1-9][0-9]* failed|FAIL|no case|timed out|killed" "$OUT/device-ab-S.txt" | sort | uniq -c | sort -rn | head -12; el
    fi
    part_a ;;
  short)
    if h200 "part C"; then part_c 110; fi
    part_t ;;
  racecheck)
    h200 racecheck || exit 0
    timeout 575 scripts/device-ab --no-bench --sanitize-all --tools racecheck base > /dev/null 2>&1; echo "rc $?"
    grep -E "passed|failed|FAIL|ERROR SUMMARY|RACECHECK SUMMARY|hazard|no case|timed out|killed" "$OUT/device-ab.txt" |
      sed 's/(seed.*//' | sort | uniq -c | sort -rn | head -30
    grep -E "^\[" "$OUT/device-ab.txt" | tail -3; el ;;
  gpu-tests)
    h200 kpr_gpu_tests || exit 0
    timeout 400 scripts/device-ab --no-bench --gpu-tests base > /dev/null 2>&1; echo "rc $?"
    grep -E "PASSED|FAILED|tests ran|Skipped|SKIPPED|cases" "$OUT/device-ab.txt" | head -12; el ;;
esac

#!/usr/bin/env bash
# scripts/sass-diff on two copies of HEAD's providers/ and abi/: the unchanged copy must compile to the same SASS as
# HEAD (exit 0), and a copy with one kernel's arithmetic changed (Q8_0's dot product, 1 added) must not (exit 1, the
# Q8_0 kernels named). Needs nvcc and cuobjdump; run by scripts/test after the Pascal check, which fetches a
# cuobjdump. Usage: sass_diff_test.sh REPO_ROOT
set -uo pipefail
root="$1"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for t in same changed; do
  mkdir -p "$tmp/$t" && git -C "$root" archive HEAD providers abi | tar x -C "$tmp/$t" || fail "git archive HEAD"
done
h="$tmp/changed/providers/common/cuda/kpr_cuda_blocks.cuh"
grep -q 'const int s = dot_words<8, EMU>(q\[r\], xw);' "$h" || fail "the line to change is not in kpr_cuda_blocks.cuh"
sed -i 's/const int s = dot_words<8, EMU>(q\[r\], xw);/const int s = dot_words<8, EMU>(q[r], xw) + 1;/' "$h"
out="$("$root/scripts/sass-diff" --tree "$tmp/same" providers/generic_cuda/k_q8_0.cu 2>&1)"; rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "unchanged sources: exit $rc, not 0"
grep -q "same SASS for sm_90" <<<"$out" || fail "unchanged sources: no 'same SASS' line"
out="$("$root/scripts/sass-diff" --tree "$tmp/changed" providers/generic_cuda/k_q8_0.cu 2>&1)"; rc=$?
echo "$out" | head -5
[ $rc -eq 1 ] || fail "changed sources: exit $rc, not 1"
grep -q "SASS differs for sm_90" <<<"$out" || fail "changed sources: no 'SASS differs' line"
grep -q "TQ8_0" <<<"$out" || fail "changed sources: no Q8_0 kernel named"
out="$("$root/scripts/sass-diff" --tree "$tmp/same" README.md 2>&1)"; rc=$?
[ $rc -eq 2 ] && grep -q "not a .cu file under providers/" <<<"$out" || fail "a non-.cu argument: exit $rc, '$out'"
echo "sass-diff: all checks passed"

#!/usr/bin/env bash
# scripts/variant-build against a CUDA build (CI's test build): a variant of k_q8_0.cu with no patch compiles to the
# build's own machine code and links a library exporting the same symbols; one with a patch that changes Q8_0's dot
# product (1 added) does not; a patch and a definition reach the compile (an #error under the definition fails it,
# exit 1); an unknown source, a patch that does not apply, a reserved NAME, a malformed definition, a missing build
# folder and sources of two libraries are usage errors (exit 2). Needs nvcc and cuobjdump
# ($CUOBJDUMP or on PATH); run by scripts/test after the sass-diff check. Usage: variant_build_test.sh REPO_ROOT BUILD
set -uo pipefail
root="$1" build="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
objdump="${CUOBJDUMP:-cuobjdump}"
command -v "$objdump" >/dev/null 2>&1 || fail "no cuobjdump (set CUOBJDUMP)"
src=providers/generic_cuda/k_q8_0.cu
built_obj="$build/providers/generic_cuda/CMakeFiles/kpr_provider_generic_cuda.dir/k_q8_0.cu.o"
[ -f "$built_obj" ] || fail "$built_obj is missing: build the CUDA providers in $build first"
sass() { "$objdump" -sass "$1" | grep -E '^\s+/\*[0-9a-f]{4}\*/' | sed -E 's#/\*[0-9a-f]{4}\*/##; s#/\*.*\*/##'; }
# variant LOG ARGS...: scripts/variant-build --build BUILD --out TMP/LOG ARGS..., its output in TMP/LOG.log
variant() { "$root/scripts/variant-build" --build "$build" --out "$tmp/$1" "${@:2}" > "$tmp/$1.log" 2>&1; }
patch_of() { # patch_of NAME SED-EXPRESSION FILE: a patch of one header under providers/common/cuda
  mkdir -p "$tmp/p/a" "$tmp/p/b"
  cp "$root/providers/common/cuda/$3" "$tmp/p/a/$3" && cp "$root/providers/common/cuda/$3" "$tmp/p/b/$3"
  sed -i "$2" "$tmp/p/b/$3"
  (cd "$tmp/p" && diff -u "a/$3" "b/$3" | sed -e "1s#a/$3#a/providers/common/cuda/$3#; 1s#\t.*##" \
    -e "2s#b/$3#b/providers/common/cuda/$3#; 2s#\t.*##") > "$tmp/$1.patch"
  rm -rf "$tmp/p"
}

# unchanged: the same machine code, a library with the same exports
variant same same "$src"; rc=$?
[ $rc -eq 0 ] || { cat "$tmp/same.log"; fail "unchanged variant: exit $rc, not 0"; }
[ -f "$tmp/same/libkpr_generic_cuda.so" ] || fail "unchanged variant: no library"
n=$(sass "$tmp/same/obj/k_q8_0.cu.o" | wc -l)
[ "$n" -gt 1000 ] || fail "unchanged variant: only $n instructions disassembled"
cmp -s <(sass "$tmp/same/obj/k_q8_0.cu.o") <(sass "$built_obj") || fail "unchanged variant: its SASS differs from $built_obj"
cmp -s <(nm -D --defined-only "$tmp/same/libkpr_generic_cuda.so" | awk '{print $3}') \
       <(nm -D --defined-only "$build/providers/libkpr_generic_cuda.so" | awk '{print $3}') ||
  fail "unchanged variant: its library exports other symbols than the build's"

# changed by a patch: other machine code
line='const int s = dot_words<8, EMU>(q\[r\], xw);'
grep -q "$line" "$root/providers/common/cuda/kpr_cuda_blocks.cuh" || fail "the line to change is not in kpr_cuda_blocks.cuh"
patch_of plus1 "s/$line/const int s = dot_words<8, EMU>(q[r], xw) + 1;/" kpr_cuda_blocks.cuh
variant changed --patch "$tmp/plus1.patch" changed "$src"; rc=$?
[ $rc -eq 0 ] || { cat "$tmp/changed.log"; fail "patched variant: exit $rc, not 0"; }
grep -q "dot_words<8, EMU>(q\[r\], xw) + 1;" "$tmp/changed/tree/providers/common/cuda/kpr_cuda_blocks.cuh" ||
  fail "patched variant: the patch is not in its tree"
cmp -s <(sass "$tmp/changed/obj/k_q8_0.cu.o") <(sass "$built_obj") && fail "patched variant: the same SASS as the build's"

# a definition reaches the compile of its source only: an #error under it fails that compile
patch_of guard '1i #ifdef KPR_VARIANT_TEST_DEFINE\n#error variant-build test definition seen\n#endif' kpr_cuda_blocks.cuh
variant guarded --patch "$tmp/guard.patch" guarded "$src:KPR_VARIANT_TEST_DEFINE=1"; rc=$?
[ $rc -eq 1 ] || { cat "$tmp/guarded.log"; fail "a definition that fails the compile: exit $rc, not 1"; }
grep -q "variant-build test definition seen" "$tmp/guarded.log" || fail "a definition that fails the compile: no #error"

# usage errors
variant bad bad providers/generic_cuda/no_such_file.cu; rc=$?
[ $rc -eq 2 ] && grep -q "not a source file under providers/" "$tmp/bad.log" || fail "an unknown source: exit $rc"
printf -- '--- a/providers/none.h\n+++ b/providers/none.h\n@@ -1 +1 @@\n-x\n+y\n' > "$tmp/none.patch"
variant nopatch --patch "$tmp/none.patch" nopatch "$src"; rc=$?
[ $rc -eq 2 ] && grep -q "does not apply" "$tmp/nopatch.log" || fail "a patch that does not apply: exit $rc"
variant badname base "$src"; rc=$?
[ $rc -eq 2 ] && grep -q "not base or bin" "$tmp/badname.log" || fail "NAME base: exit $rc"
variant baddef baddef "$src:1X"; rc=$?
[ $rc -eq 2 ] && grep -q "is not NAME or NAME=VALUE" "$tmp/baddef.log" || fail "a malformed definition: exit $rc"
"$root/scripts/variant-build" --build "$tmp/no-such-build" --out "$tmp/nobuild" nobuild "$src" > "$tmp/nobuild.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "no build folder" "$tmp/nobuild.log" || fail "a missing build folder: exit $rc"
variant twolibs twolibs "$src" providers/sm60_q8/provider.cu; rc=$?
[ $rc -eq 2 ] && grep -q "sources of two libraries" "$tmp/twolibs.log" || fail "sources of two libraries: exit $rc"
echo "variant-build: all checks passed"

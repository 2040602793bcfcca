#!/usr/bin/env bash
# Runs scripts/device-ab on a fake pack, without a GPU: stand-ins for kpr_cuda_bench, kpr, kpr_gpu_tests and
# compute-sanitizer print what the real ones print, with times that depend on the provider folder and the pass.
# Checks the summary's medians and ratios, the filling of an experiment's folder from base/, that failing checks
# fail the run, and the argument errors. Usage: device_ab_test.sh PATH/TO/scripts/device-ab
set -uo pipefail
AB="$1"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
fails=0
expect() { # description, command's status, wanted status, output, regex the output must match
  if [[ "$2" != "$3" ]] || ! grep -Eq -- "$5" <<< "$4"; then
    echo "FAIL: $1 (status $2, wanted $3; output must match: $5)"; echo "$4" | sed 's/^/    /'; fails=$((fails + 1))
  else
    echo "ok: $1"
  fi
}

mkdir -p "$W/p/bin" "$W/p/base" "$W/p/exp" "$W/tools"
cat > "$W/p/bin/kpr_cuda_bench" <<'EOF'
#!/usr/bin/env bash
# pass number from a counter per provider folder; base: 10.0 10.2 10.1 us, exp: 9.0 9.4 9.2 us
c="$KPR_PROVIDER_DIR/.calls"; n=$(( $(cat "$c" 2>/dev/null || echo 0) + 1 )); echo $n > "$c"
echo "$*" >> "$KPR_PROVIDER_DIR/.args"
case "$(basename "$KPR_PROVIDER_DIR"):$n" in
  base:1) t=10.0 f=0.70 ;; base:2) t=10.2 f=0.69 ;; base:3) t=10.1 f=0.70 ;;
  exp:1) t=9.0 f=0.78 ;; exp:2) t=9.4 f=0.75 ;; exp:3) t=9.2 f=0.77 ;;
esac
echo "device: fake (cc 9.0, 132 SMs); measured read bandwidth 4400 GB/s"
echo "| provider | type | shape | ncols | time (us) | GB/s | fraction of read bw | host-launched (us) |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
echo "| generic_cuda | q4_K | 4096x14336 | 1 | $t | 3100 | $f | 11.0 |"
EOF
cat > "$W/p/bin/kpr" <<'EOF'
#!/usr/bin/env bash
# a self-test run; the folder "exp" fails one case when KPR_FAKE_FAIL is set; a filter "nomatch" matches nothing
[[ "$*" == *nomatch* ]] && { echo "0 passed, 0 failed, 0 skipped"; exit 0; }
if [[ "$*" == *--list* ]]; then # generic_cuda's cases, as kpr selftest --list prints them (empty with KPR_FAKE_NO_CASES)
  echo "provider      device  case                    kind       op                              threshold  rounded"
  [[ -n "${KPR_FAKE_NO_CASES:-}" ]] && exit 1
  for c in "q8_0 4096x4096 n1" "q8_0 77x1536 n4" "q4_K 4096x14336 n1 tile_kernel=off" "f16 4096x4096 n1" "bf16 130x768 n6"; do
    printf 'generic_cuda  cuda:0  %-22s  reference  gemv x 4096x4096 ncols 1          2.0e-02    q8_1\n' "$c"
  done
  exit 0
fi
if [[ -n "${KPR_FAKE_FAIL:-}" && "$*" == */exp* ]]; then echo "FAIL q4_k 4096x14336 n1"; echo "2 passed, 1 failed, 0 skipped"; exit 1; fi
echo "3 passed, 0 failed, 0 skipped"
EOF
printf '#!/usr/bin/env bash\necho "[  PASSED  ] 15 tests."\n' > "$W/p/bin/kpr_gpu_tests"
cat > "$W/tools/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
[[ -n "${KPR_FAKE_SAN_LOG:-}" ]] && echo "$*" >> "$KPR_FAKE_SAN_LOG"
while [[ "$1" != */bin/kpr ]]; do shift; done
"$@"; rc=$?
echo "========= ERROR SUMMARY: ${KPR_FAKE_SAN_ERRORS:-0} errors"
exit $rc
EOF
chmod +x "$W"/p/bin/* "$W/tools/compute-sanitizer"
echo lib > "$W/p/base/libkpr_generic_cuda.so"
echo lib > "$W/p/base/libkpr_generic_cpu.so"
echo exp > "$W/p/exp/libkpr_generic_cuda.so"
tar -cf - -C "$W/p" bin base exp | xz > "$W/pack.tar.xz"
export PATH="$W/tools:$PATH"

out=$(bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --types q4_K base exp 2>&1); rc=$?
expect "summary: medians and the ratio to the first name" $rc 0 "$out" \
  '^\| generic_cuda \| q4_K \| 4096x14336 \| 1 \| 10\.10 us, 0\.700 \| 9\.20 us, 0\.770 \(1\.10x\) \|$'
expect "three passes, the names taking turns" $rc 0 "$out" 'pass 3 \[exp\]'
args=$(cat "$W/u/exp/.args" 2>/dev/null)
expect "no --copies for the bench unless asked" 0 0 "x$args" '^x--providers generic_cuda --no-moe --types q4_K --shapes 4096x14336 --ncols 1$'
[[ "$(cat "$W/u/exp/libkpr_generic_cpu.so" 2>/dev/null)" == lib && "$(cat "$W/u/exp/libkpr_generic_cuda.so")" == exp ]]
expect "an experiment's folder filled from base/, its own library kept" $? 0 "" ''
out=$(bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --types q4_K --passes 1 --copies 1 base 2>&1); rc=$?
expect "--copies in the bench header" $rc 0 "$out" '^== bench: .* --ncols 1 --copies 1, 1 passes$'
expect "--copies reaches the bench" 0 0 "$(cat "$W/u/base/.args" 2>/dev/null)" '--ncols 1 --copies 1$'

out=$(bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --selftest --gpu-tests --sanitize "q4_k 4093x14336 n1" base exp 2>&1); rc=$?
expect "checks that pass" $rc 0 "$out" 'nothing failed'
expect "racecheck asked for warnings" $rc 0 "$out" "\[exp\] racecheck generic_cuda 'q4_k 4093x14336 n1'"

out=$(KPR_FAKE_FAIL=1 bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --selftest base exp 2>&1); rc=$?
expect "a failing self-test fails the run" $rc 1 "$out" '\[exp\] selftest: exit 1'
out=$(KPR_FAKE_FAIL=1 bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --types q4_K --passes 1 --selftest --gpu-tests \
        --check-only base base exp 2>&1); rc=$?
expect "--check-only: the failing experiment is benched, not checked" $rc 0 "$out" 'nothing failed'
expect "--check-only: base is checked" $rc 0 "$out" '\[base\] kpr_gpu_tests'
expect "--check-only: the experiment is benched" $rc 0 "$out" 'pass 1 \[exp\]'
grep -q '\[exp\] selftest\|\[exp\] kpr_gpu_tests' <<< "$out"
expect "--check-only: the experiment is not checked" $? 1 "" ''
out=$(bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --check-only exp,other base exp 2>&1); rc=$?
expect "--check-only with a name that is not one of the NAMEs" $rc 2 "$out" "--check-only names 'other', which is not one of the NAMEs"
out=$(bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --sanitize nomatch base 2>&1); rc=$?
expect "a sanitizer filter that matches no case fails" $rc 1 "$out" 'no self-test case matched'
out=$(KPR_FAKE_SAN_ERRORS=2 bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --sanitize q4_k base 2>&1); rc=$?
expect "sanitizer errors fail the run" $rc 1 "$out" 'memcheck generic_cuda .q4_k.: sanitizer errors'
out=$(KPR_FAKE_SAN_LOG="$W/san.log" bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --sanitize-all base 2>&1); rc=$?
expect "--sanitize-all passes" $rc 0 "$out" 'nothing failed'
expect "--sanitize-all: 3 tools x (2 providers + the 4 weight types of generic_cuda's listed cases)" 0 0 "$(wc -l < "$W/san.log")" '^18$'
expect "--sanitize-all: every case of sm60_q8 in one process" 0 0 "$(cat "$W/san.log")" \
  'memcheck .*/bin/kpr --provider-path .*/base selftest --in-process --provider sm60_q8 --device cuda:0$'
expect "--sanitize-all: generic_cuda per weight type, bf16 included" 0 0 "$(cat "$W/san.log")" \
  '--provider generic_cuda --device cuda:0 --filter bf16 $'
expect "--sanitize-all: synccheck with room for 65536 mbarriers" 0 0 "$(grep -c -- '--tool synccheck --num-cuda-barriers 65536 ' "$W/san.log")" '^6$'
expect "--sanitize-all: a type once, in the order listed" 0 0 "$(grep -- '--tool memcheck' "$W/san.log" | grep -o -- '--filter .*' | tr '\n' '|')" \
  '^--filter q8_0 \|--filter q4_K \|--filter f16 \|--filter bf16 \|$'
out=$(KPR_FAKE_NO_CASES=1 bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --sanitize-all base 2>&1); rc=$?
expect "--sanitize-all: no generic_cuda case listed fails the run" $rc 1 "$out" 'gave no generic_cuda case'
out=$(KPR_FAKE_SAN_ERRORS=1 bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --sanitize-all base 2>&1); rc=$?
expect "--sanitize-all: sanitizer errors fail the run" $rc 1 "$out" "racecheck generic_cuda 'bf16 ': sanitizer errors"
rm -f "$W/san.log"
out=$(KPR_FAKE_SAN_LOG="$W/san.log" bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --tools racecheck --sanitize-all base 2>&1); rc=$?
expect "--tools racecheck --sanitize-all passes" $rc 0 "$out" 'nothing failed'
expect "--tools racecheck: the 6 processes of one tool, racecheck" 0 0 "$(grep -c -- '--tool racecheck ' "$W/san.log")/$(wc -l < "$W/san.log")" '^6/6$'
rm -f "$W/san.log"
out=$(KPR_FAKE_SAN_LOG="$W/san.log" bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --tools synccheck,memcheck --sanitize q4_k base 2>&1); rc=$?
expect "--tools synccheck,memcheck --sanitize passes" $rc 0 "$out" 'nothing failed'
expect "--tools: the tools named, in their order" 0 0 "$(grep -o -- '--tool [a-z]*' "$W/san.log" | tr '\n' '|')" '^--tool synccheck\|--tool memcheck\|$'
out=$(bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" --no-bench --tools memcheck,helgrind --sanitize q4_k base 2>&1); rc=$?
expect "--tools: an unknown tool is a bad argument" $rc 2 "$out" "'helgrind' is not memcheck, racecheck or synccheck"

out=$(bash "$AB" --pack "$W/pack.tar.xz" --dir "$W/u" base nosuch 2>&1); rc=$?
expect "a name the pack lacks" $rc 1 "$out" "has no folder 'nosuch'"
out=$(bash "$AB" --pack "$W/missing.tar.xz" base 2>&1); rc=$?
expect "a missing pack" $rc 1 "$out" 'missing.tar.xz is missing'
out=$(bash "$AB" 2>&1); rc=$?
expect "no name" $rc 2 "$out" 'name at least one folder'
out=$(bash "$AB" --bogus base 2>&1); rc=$?
expect "an unknown option" $rc 2 "$out" "unknown option '--bogus'"
out=$(bash "$AB" --passes 0 base 2>&1); rc=$?
expect "a pass count of 0" $rc 2 "$out" "--passes takes 1..99, not '0'"
out=$(bash "$AB" --copies 0 base 2>&1); rc=$?
expect "a copy count of 0" $rc 2 "$out" "--copies takes a count from 1 to 1024, not '0'"
out=$(bash "$AB" --types 2>&1); rc=$?
expect "an option without its value" $rc 2 "$out" '--types needs a value'
out=$(bash "$AB" "a/b" 2>&1); rc=$?
expect "a name that is not a folder name" $rc 2 "$out" "'a/b' is not a folder name"

[[ $fails == 0 ]] && echo "device-ab: all checks passed" || { echo "device-ab: $fails check(s) failed"; exit 1; }

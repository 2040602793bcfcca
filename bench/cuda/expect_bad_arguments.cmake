# ctest script: kpr_cuda_bench must refuse malformed --shapes, --ncols, --copies, --ab and --with values, type names it
# does not know and arguments it does not know, with exit status 2 and a message naming them, before any GPU
# is needed. -DBENCH=<path to kpr_cuda_bench>

# FLAG VALUE must exit with status 2 and an error containing EXPECT.
function(expect_refused flag value expect)
  execute_process(COMMAND "${BENCH}" ${flag} "${value}" RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out
                  TIMEOUT 30)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${flag} ${value}: exit status ${rc}, expected 2\n${out}${err}")
  endif()
  string(FIND "${err}" "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${flag} ${value}: the error does not name it: ${err}")
  endif()
endfunction()

foreach(bad "4096x1000" "abc" "0x4096" "4096x4096x2")
  expect_refused(--shapes "4096x14336,${bad}" "--shapes: '${bad}' is not ROWSxCOLS")
endforeach()
foreach(flag_bad "--ab|block_lanes" "--ab|block_lanes=on" "--ab|=off,on" "--with|planar_weights" "--with|=true")
  string(REPLACE "|" ";" fb "${flag_bad}")
  list(GET fb 0 flag)
  list(GET fb 1 bad)
  expect_refused(${flag} "${bad}" "${flag}: '${bad}' is not OPTION=")
endforeach()
foreach(bad "0" "1025" "-1" "2x" "")
  expect_refused(--copies "${bad}" "--copies: '${bad}' is not a copy count")
endforeach()
# kpr writes q4_K, not q4_k; a misspelt name used to be skipped without a word
foreach(bad "q4_k" "q8" "iq3xxs")
  expect_refused(--types "q8_0,${bad}" "--types: unknown type '${bad}'")
endforeach()
foreach(bad "0" "9" "two" "4x" "-1")
  expect_refused(--ncols "1,${bad}" "--ncols: '${bad}' is not a column count from 1 to 8")
endforeach()
expect_refused(--type "q8_0" "unknown argument '--type'")
expect_refused(--no-moe "--shape" "unknown argument '--shape'")

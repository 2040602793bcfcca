# ctest script: kpr_cuda_bench must refuse malformed --shapes entries, and malformed --ab / --with
# options, with exit status 2 and a message naming them. -DBENCH=<path to kpr_cuda_bench>

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

# ctest script: kpr_cuda_bench must refuse malformed --shapes entries with exit status 2 and a message
# naming the entry. -DBENCH=<path to kpr_cuda_bench>
foreach(bad "4096x1000" "abc" "0x4096" "4096x4096x2")
  execute_process(COMMAND "${BENCH}" --shapes "4096x14336,${bad}" RESULT_VARIABLE rc ERROR_VARIABLE err
                  OUTPUT_VARIABLE out TIMEOUT 30)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "--shapes ${bad}: exit status ${rc}, expected 2\n${out}${err}")
  endif()
  string(FIND "${err}" "--shapes: '${bad}' is not ROWSxCOLS" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--shapes ${bad}: the error does not name the entry: ${err}")
  endif()
endforeach()

# kpr_add_test(NAME <name> SOURCES <files...> LABELS <labels...> [LIBRARIES <libs...>])
# One GoogleTest executable, registered with ctest test by test (gtest_discover_tests) under LABELS.
#
# KPR_TEST_ONLY (a list of test executable names, empty by default: all): when set, a test executable not
# in the list is still defined (so the folders' add_dependencies and properties keep working) but is left
# out of `all` and not registered with ctest. The reduced sanitizer build (preset asan-ci) uses it to build
# and run only the suites it can afford on a 2-core CI machine.
set(KPR_TEST_ONLY "" CACHE STRING "Build and register only these test executables (empty: all)")
include(GoogleTest)
function(kpr_test_selected name out)
  if(KPR_TEST_ONLY AND NOT name IN_LIST KPR_TEST_ONLY)
    set(${out} OFF PARENT_SCOPE)
  else()
    set(${out} ON PARENT_SCOPE)
  endif()
endfunction()

function(kpr_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LABELS;LIBRARIES" ${ARGN})
  kpr_test_selected(${T_NAME} selected)
  if(selected)
    add_executable(${T_NAME} ${T_SOURCES})
  else()
    add_executable(${T_NAME} EXCLUDE_FROM_ALL ${T_SOURCES})
  endif()
  target_link_libraries(${T_NAME} PRIVATE GTest::gtest GTest::gmock GTest::gtest_main ${T_LIBRARIES})
  target_compile_definitions(${T_NAME} PRIVATE
    KPR_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    KPR_BUILD_DIR="${PROJECT_BINARY_DIR}"
    KPR_PROVIDER_BUILD_DIR="${KPR_PROVIDER_OUTPUT_DIR}")
  if(selected)
    gtest_discover_tests(${T_NAME}
      PROPERTIES LABELS "${T_LABELS}"
      DISCOVERY_TIMEOUT 60)
  endif()
endfunction()

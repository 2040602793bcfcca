# kpr_add_test(NAME <name> SOURCES <files...> LABELS <labels...> [LIBRARIES <libs...>])
# One GoogleTest executable, registered with ctest test by test (gtest_discover_tests) under LABELS.
include(GoogleTest)
function(kpr_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LABELS;LIBRARIES" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE GTest::gtest GTest::gmock GTest::gtest_main ${T_LIBRARIES})
  target_compile_definitions(${T_NAME} PRIVATE
    KPR_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    KPR_BUILD_DIR="${PROJECT_BINARY_DIR}"
    KPR_PROVIDER_BUILD_DIR="${KPR_PROVIDER_OUTPUT_DIR}")
  gtest_discover_tests(${T_NAME}
    PROPERTIES LABELS "${T_LABELS}"
    DISCOVERY_TIMEOUT 60)
endfunction()

# kpr_add_provider(NAME <name> SOURCES <files...> [LIBRARIES <libs...>])
#
# Builds libkpr_<name>.so: a module that links kpr::abi, hides every symbol but kpr_provider_entry,
# links libstdc++/libgcc as the toolchain has them (nothing else at run time) and lands in
# ${KPR_PROVIDER_OUTPUT_DIR} so the build tree is a provider path.
function(kpr_add_provider)
  cmake_parse_arguments(P "" "NAME" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT P_NAME OR NOT P_SOURCES)
    message(FATAL_ERROR "kpr_add_provider needs NAME and SOURCES")
  endif()
  set(target kpr_provider_${P_NAME})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE kpr::abi ${P_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME kpr_${P_NAME}
    PREFIX lib
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${KPR_PROVIDER_OUTPUT_DIR})
  target_link_options(${target} PRIVATE "LINKER:--exclude-libs,ALL" "LINKER:-z,defs")
  if(KPR_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/kpr/providers)
  endif()
endfunction()

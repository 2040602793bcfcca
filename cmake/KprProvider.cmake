# kpr_add_provider(NAME <name> SOURCES <files...>
#                  [LIBRARIES <libs...>]
#                  [OUTPUT_DIRECTORY <dir>] [INSTALL_DESTINATION <dir>] [NO_INSTALL])
#
# Builds libkpr_<name>.so, a provider module for the kpr core:
#   - links kpr::abi (the C headers; nothing of the core is linked into a provider);
#   - hidden visibility, and a linker version script (kpr_provider.map, next to this file) that keeps
#     `kpr_provider_entry` as the one dynamic symbol: nothing a provider links statically (libstdc++
#     pieces, cudart_static, a BLAS) can clash with the core or another provider;
#   - `-z defs`: an undefined symbol is a link error, not a load failure on the user's machine;
#   - the module lands in OUTPUT_DIRECTORY, by default ${KPR_PROVIDER_OUTPUT_DIR} (in kpr's own build:
#     <build>/providers, which the core searches) or <your build>/providers for a project of its own;
#   - `cmake --install` puts it in INSTALL_DESTINATION, by default ${CMAKE_INSTALL_LIBDIR}/kpr/providers:
#     installed into the prefix kpr is installed in, `<prefix>/bin/kpr` finds it with no configuration.
#
# The same file serves kpr's own tree (cmake/) and the installed package (<prefix>/lib/cmake/kpr/,
# included by find_package(kpr)); docs/providers.md shows an out-of-tree project using it.
include_guard(GLOBAL)
include(GNUInstallDirs)

set(KPR_PROVIDER_VERSION_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/kpr_provider.map"
    CACHE INTERNAL "linker version script exporting only kpr_provider_entry")

function(kpr_add_provider)
  cmake_parse_arguments(P "NO_INSTALL" "NAME;OUTPUT_DIRECTORY;INSTALL_DESTINATION" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT P_NAME OR NOT P_SOURCES)
    message(FATAL_ERROR "kpr_add_provider needs NAME and SOURCES")
  endif()
  if(P_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kpr_add_provider: unknown arguments: ${P_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT P_NAME MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "kpr_add_provider: NAME '${P_NAME}' must match [a-z0-9_]+ (the core loads "
                        "libkpr_<name>.so and checks the provider's identity says the same name)")
  endif()
  if(NOT TARGET kpr::abi)
    message(FATAL_ERROR "kpr_add_provider: target kpr::abi is missing (find_package(kpr) first)")
  endif()

  set(out_dir "${P_OUTPUT_DIRECTORY}")
  if(NOT out_dir)
    if(DEFINED KPR_PROVIDER_OUTPUT_DIR)
      set(out_dir "${KPR_PROVIDER_OUTPUT_DIR}")
    else()
      set(out_dir "${CMAKE_BINARY_DIR}/providers")
    endif()
  endif()
  set(dest "${P_INSTALL_DESTINATION}")
  if(NOT dest)
    set(dest "${CMAKE_INSTALL_LIBDIR}/kpr/providers")
  endif()

  set(target kpr_provider_${P_NAME})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE kpr::abi ${P_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME kpr_${P_NAME}
    PREFIX lib
    SUFFIX .so
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY "${out_dir}"
    LINK_DEPENDS "${KPR_PROVIDER_VERSION_SCRIPT}")
  target_link_options(${target} PRIVATE
    "LINKER:--exclude-libs,ALL"
    "LINKER:-z,defs"
    "LINKER:--version-script=${KPR_PROVIDER_VERSION_SCRIPT}")

  # In kpr's own tree KPR_INSTALL switches install rules off; elsewhere NO_INSTALL does.
  set(do_install ON)
  if(P_NO_INSTALL OR (DEFINED KPR_INSTALL AND NOT KPR_INSTALL))
    set(do_install OFF)
  endif()
  if(do_install)
    install(TARGETS ${target} LIBRARY DESTINATION "${dest}")
  endif()
endfunction()

# KprInstall.cmake -- `cmake --install` layout and the exported CMake package (included at the end of
# the top-level CMakeLists.txt, after every target exists).
#
#   <prefix>/bin/kpr                                 the command
#   <prefix>/lib/libkpr.a                            the core (static, see below)
#   <prefix>/lib/kpr/providers/libkpr_<name>.so      the providers (kpr_add_provider installs them)
#   <prefix>/include/kpr/                            provider.h, ggml_blocks.h (the ABI) + the C++ API
#   <prefix>/lib/cmake/kpr/                          find_package(kpr): kpr::abi, kpr::core, kpr_add_provider
#   <prefix>/lib/pkgconfig/kpr.pc                    pkg-config --cflags --libs kpr
#
# The core is a static library on purpose: an engine (or the `kpr` command) linking it depends on
# nothing at run time but libc, libstdc++ and libgcc -- no libkpr.so to ship, no RPATH, no version of
# it to match on the target machine. Providers are the only shared objects, and they are found by the
# core at run time, never linked.
#
# kpr::core's private dependencies (Boost.DLL, toml++, spdlog, fmt, nlohmann_json) are header-only and
# compiled into libkpr.a. CMake would still list them as $<LINK_ONLY:...> requirements of an exported
# static library, forcing every consumer to install their -dev packages just to configure. They are
# rewritten below to $<BUILD_INTERFACE:...>: still used inside this build, absent from the package.
# The only dependency the package keeps is Threads (find_dependency in kprConfig.cmake).

# ---- a self-contained core: toml++ header-only ---------------------------------------------------------
# Debian's tomlplusplus package exports tomlplusplus::tomlplusplus as the shared libtomlplusplus.so.3
# (TOML_SHARED_LIB=1), which made `kpr` and every engine linking libkpr.a depend on it at run time. The
# same headers work header-only (TOML_HEADER_ONLY=1): kpr_core uses them that way, so the only run-time
# dependencies left are libc, libm, libstdc++ and libgcc_s (tests/sdk checks the installed kpr with ldd).
# (This belongs next to find_package(tomlplusplus) in the top-level CMakeLists.txt; it lives here so the
# install owner could make the claim true.)
if(TARGET tomlplusplus::tomlplusplus AND NOT TARGET kpr_tomlplusplus_header_only)
  get_target_property(_kpr_toml_inc tomlplusplus::tomlplusplus INTERFACE_INCLUDE_DIRECTORIES)
  add_library(kpr_tomlplusplus_header_only INTERFACE)
  target_include_directories(kpr_tomlplusplus_header_only SYSTEM INTERFACE ${_kpr_toml_inc})
  target_compile_definitions(kpr_tomlplusplus_header_only INTERFACE TOML_HEADER_ONLY=1)
  foreach(_prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
    get_target_property(_libs kpr_core ${_prop})
    if(_libs)
      list(TRANSFORM _libs REPLACE "^tomlplusplus::tomlplusplus$" "kpr_tomlplusplus_header_only")
      list(TRANSFORM _libs REPLACE "^\\$<LINK_ONLY:tomlplusplus::tomlplusplus>$" "$<LINK_ONLY:kpr_tomlplusplus_header_only>")
      set_property(TARGET kpr_core PROPERTY ${_prop} "${_libs}")
    endif()
  endforeach()
endif()

if(NOT KPR_INSTALL)
  return()
endif()
include(CMakePackageConfigHelpers)

set(KPR_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kpr" CACHE STRING
    "Where the CMake package (kprConfig.cmake) is installed, relative to the prefix")
set(KPR_INSTALL_PROVIDERDIR "${CMAKE_INSTALL_LIBDIR}/kpr/providers")

# The provider ABI version the installed headers define.
file(STRINGS ${PROJECT_SOURCE_DIR}/abi/include/kpr/provider.h _kpr_abi_lines REGEX "#define KPR_ABI_VERSION_(MAJOR|MINOR) ")
string(REGEX REPLACE ".*KPR_ABI_VERSION_MAJOR ([0-9]+).*" "\\1" KPR_PKG_ABI_MAJOR "${_kpr_abi_lines}")
string(REGEX REPLACE ".*KPR_ABI_VERSION_MINOR ([0-9]+).*" "\\1" KPR_PKG_ABI_MINOR "${_kpr_abi_lines}")

# ---- kpr::core without its header-only build dependencies --------------------------------------------
set(_kpr_header_only_deps
  Boost::headers kpr_tomlplusplus_header_only spdlog::spdlog_header_only fmt::fmt-header-only
  nlohmann_json::nlohmann_json)
get_target_property(_kpr_core_iface kpr_core INTERFACE_LINK_LIBRARIES)
set(_kpr_core_iface_new "")
foreach(_l IN LISTS _kpr_core_iface)
  if(_l MATCHES "^\\$<LINK_ONLY:([^$<>]+)>$" AND CMAKE_MATCH_1 IN_LIST _kpr_header_only_deps)
    set(_dep "${CMAKE_MATCH_1}")
    get_target_property(_dep_type ${_dep} TYPE)
    if(NOT _dep_type STREQUAL "INTERFACE_LIBRARY")
      message(FATAL_ERROR "KprInstall: ${_dep} is a ${_dep_type}, not header-only: kpr::core would need it at link time")
    endif()
    list(APPEND _kpr_core_iface_new "$<LINK_ONLY:$<BUILD_INTERFACE:${_dep}>>")
  elseif(NOT _l STREQUAL "_kpr_core_iface-NOTFOUND")
    list(APPEND _kpr_core_iface_new "${_l}")
  endif()
endforeach()
set_property(TARGET kpr_core PROPERTY INTERFACE_LINK_LIBRARIES "${_kpr_core_iface_new}")

# ---- targets, headers --------------------------------------------------------------------------------
install(TARGETS kpr_abi kpr_core EXPORT kprTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/abi/include/kpr ${PROJECT_SOURCE_DIR}/core/include/kpr
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(EXPORT kprTargets NAMESPACE kpr:: DESTINATION ${KPR_INSTALL_CMAKEDIR} FILE kprTargets.cmake)

# ---- the package: kprConfig.cmake, version, kpr_add_provider ----------------------------------------
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/KprConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/kprConfig.cmake
  INSTALL_DESTINATION ${KPR_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR KPR_INSTALL_PROVIDERDIR)
# 0.x: a new minor may change the C++ API, so only the same minor is compatible. (The provider ABI has
# its own version, checked at load time: see provider.h.)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/kprConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/package/kprConfig.cmake
  ${PROJECT_BINARY_DIR}/package/kprConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/KprProvider.cmake
  ${PROJECT_SOURCE_DIR}/cmake/kpr_provider.map
  DESTINATION ${KPR_INSTALL_CMAKEDIR})

# ---- pkg-config -----------------------------------------------------------------------------------------
# Relocatable: the prefix is derived from where kpr.pc lies (${pcfiledir}), so `cmake --install --prefix X`
# and a moved prefix both give the right paths.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(KPR_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  set(KPR_PC_PREFIX "\${pcfiledir}")
  string(REPLACE "/" ";" _kpr_libdir_parts "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  foreach(_p IN LISTS _kpr_libdir_parts)
    if(_p)
      string(APPEND KPR_PC_PREFIX "/..")
    endif()
  endforeach()
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/kpr.pc.in ${PROJECT_BINARY_DIR}/package/kpr.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/kpr.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

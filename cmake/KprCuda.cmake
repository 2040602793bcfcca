# KprCuda.cmake -- included by the top-level CMakeLists.txt when a CUDA compiler was found.
#
# KPR_CUDA_ARCHS      the real architectures to compile (e.g. "90" or "60;61"). Default: every one of
#                     60 61 70 75 80 86 89 90 the found toolkit supports (CUDA 13 starts at 75, CUDA 12.x
#                     still reaches 60).
# KPR_CUDA_PTX        also embed PTX for the newest architecture of the list (default ON), so newer GPUs
#                     can JIT it.
# KPR_CUDA_ARCHS_EFFECTIVE  what is built, for the status message ("75 80 86 89 90 +PTX 90").
#
# kpr_add_cuda_provider(NAME <name> SOURCES <files...>) wraps kpr_add_provider() for CUDA providers:
# CUDA runtime linked statically, hidden visibility, the compiled arch lists passed to the sources as
# KPR_CUDA_SASS_MASK (bitmask over kpr_cuda_host.hpp's table) / KPR_CUDA_PTX_LIST (one arch or empty).
#
# No --use_fast_math: the kernels promise bitwise parity between providers (iq_stage_tables vs
# generic_cuda) and bit-reproducible activation quantization (x / d must be an IEEE division); fast math
# would turn divisions into approximations and flush denormals. The kernels have no transcendental
# functions, so nothing is lost.

enable_language(CUDA)

set(_kpr_cuda_candidates 60 61 70 75 80 86 89 90)
if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)
  set(_kpr_cuda_min 75)
else()
  set(_kpr_cuda_min 60)
endif()
set(_kpr_cuda_default "")
foreach(a ${_kpr_cuda_candidates})
  if(a GREATER_EQUAL _kpr_cuda_min)
    list(APPEND _kpr_cuda_default ${a})
  endif()
endforeach()

set(KPR_CUDA_ARCHS "${_kpr_cuda_default}" CACHE STRING
    "Real CUDA architectures for the CUDA providers (e.g. 90, or 60;61 with a CUDA 12.x toolkit)")
option(KPR_CUDA_PTX "Embed PTX for the newest architecture in KPR_CUDA_ARCHS" ON)

# Accept "60,61" or "60 61" too.
string(REPLACE "," ";" _kpr_archs "${KPR_CUDA_ARCHS}")
string(REPLACE " " ";" _kpr_archs "${_kpr_archs}")
list(REMOVE_ITEM _kpr_archs "")
list(REMOVE_DUPLICATES _kpr_archs)
list(SORT _kpr_archs COMPARE NATURAL)
foreach(a ${_kpr_archs})
  if(NOT a MATCHES "^[0-9]+$")
    message(FATAL_ERROR "KPR_CUDA_ARCHS: '${a}' is not an architecture number like 61 or 90")
  endif()
  if(a LESS _kpr_cuda_min)
    message(FATAL_ERROR "KPR_CUDA_ARCHS: CUDA ${CMAKE_CUDA_COMPILER_VERSION} cannot target compute capability "
                        "${a} (it starts at ${_kpr_cuda_min}); use a CUDA 12.x toolkit for Pascal "
                        "(see docs/older-gpus.md)")
  endif()
endforeach()
if(NOT _kpr_archs)
  message(FATAL_ERROR "KPR_CUDA_ARCHS is empty")
endif()

list(GET _kpr_archs -1 _kpr_newest)
set(KPR_CUDA_ARCH_LIST "")
foreach(a ${_kpr_archs})
  list(APPEND KPR_CUDA_ARCH_LIST "${a}-real")
endforeach()
set(KPR_CUDA_PTX_ARCH "")
if(KPR_CUDA_PTX)
  list(APPEND KPR_CUDA_ARCH_LIST "${_kpr_newest}-virtual")
  set(KPR_CUDA_PTX_ARCH ${_kpr_newest})
endif()

# The SASS list reaches the sources as a bitmask over a fixed table (kpr_cuda_host.hpp: kKnownArchs):
# nvcc splits -D values at commas, so a comma-separated list cannot be passed.
set(_kpr_known 50 52 53 60 61 62 70 72 75 80 86 87 89 90 100 101 103 110 120 121)
set(KPR_CUDA_SASS_MASK 0)
foreach(a ${_kpr_archs})
  list(FIND _kpr_known ${a} _idx)
  if(_idx LESS 0)
    message(FATAL_ERROR "KPR_CUDA_ARCHS: architecture ${a} is not in kpr's table (${_kpr_known})")
  endif()
  math(EXPR KPR_CUDA_SASS_MASK "${KPR_CUDA_SASS_MASK} | (1 << ${_idx})")
endforeach()
string(REPLACE ";" " " KPR_CUDA_ARCHS_EFFECTIVE "${_kpr_archs}")
if(KPR_CUDA_PTX)
  string(APPEND KPR_CUDA_ARCHS_EFFECTIVE " +PTX ${_kpr_newest}")
endif()
set(KPR_CUDA_SASS_ARCHS "${_kpr_archs}")

find_package(CUDAToolkit REQUIRED)

function(kpr_add_cuda_provider)
  cmake_parse_arguments(P "" "NAME" "SOURCES;LIBRARIES" ${ARGN})
  kpr_add_provider(NAME ${P_NAME} SOURCES ${P_SOURCES} LIBRARIES kpr_provider_common ${P_LIBRARIES})
  set(target kpr_provider_${P_NAME})
  kpr_cuda_target(${target})
endfunction()

# Common settings for any target holding CUDA code of this project (providers, tests, bench).
function(kpr_cuda_target target)
  set_target_properties(${target} PROPERTIES
    CUDA_ARCHITECTURES "${KPR_CUDA_ARCH_LIST}"
    CUDA_RUNTIME_LIBRARY Static
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_VISIBILITY_PRESET hidden)
  if(KPR_CUDA_PTX_ARCH)
    set(_ptx ${KPR_CUDA_PTX_ARCH})
  else()
    set(_ptx "")
  endif()
  target_compile_definitions(${target} PRIVATE
    "KPR_CUDA_SASS_MASK=${KPR_CUDA_SASS_MASK}"
    "KPR_CUDA_PTX_LIST=${_ptx}")
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-O3 -Xptxas=-warn-spills --expt-relaxed-constexpr -lineinfo>)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/providers/common
                             ${PROJECT_SOURCE_DIR}/providers/common/cuda)
  # static cudart needs these at link time only (they are part of libc on glibc >= 2.34)
  target_link_libraries(${target} PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS} Threads::Threads)
endfunction()

# The GPU data path is built when a CUDA compiler is found (HSRING_CUDA=AUTO, the default),
# always (ON: a missing nvcc is an error) or never (OFF). Without it every CPU part still
# builds, and GPU worker specs are refused with a clear message at run time.
#
# Sets HSRING_HAVE_CUDA (ON/OFF) for the rest of the tree. Binaries link the CUDA runtime
# statically (cudart_static) and cuBLAS dynamically (no static cuBLAS ships with the
# toolkit here); the GPU machines have the same toolkit under /usr/local/cuda.
set(HSRING_CUDA "AUTO" CACHE STRING "Build the GPU data path: AUTO (when nvcc is found), ON or OFF")
set_property(CACHE HSRING_CUDA PROPERTY STRINGS AUTO ON OFF)

set(HSRING_HAVE_CUDA OFF)
if(HSRING_CUDA STREQUAL "OFF")
  message(STATUS "hsring: GPU data path OFF (HSRING_CUDA=OFF)")
else()
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Hopper (H100/H200) by default; -DCMAKE_CUDA_ARCHITECTURES=... for other GPUs.
    set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "GPU architectures to build for")
    enable_language(CUDA)
    # Kernels need C++17 only (CMake 3.25 cannot ask nvcc for C++20).
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    # cuBLAS is a shared library: find it where this toolkit has it, and where a standard
    # CUDA install keeps it on the machines the build folder is carried to.
    list(APPEND CMAKE_BUILD_RPATH ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
         /usr/local/cuda/targets/x86_64-linux/lib)
    set(HSRING_HAVE_CUDA ON)
    message(STATUS "hsring: GPU data path ON (CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(HSRING_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HSRING_CUDA=ON but no CUDA compiler was found: install the CUDA toolkit, "
                        "put nvcc on PATH or set CUDACXX, or configure with -DHSRING_CUDA=OFF")
  else()
    message(STATUS "hsring: GPU data path OFF (no CUDA compiler found)")
  endif()
endif()

# The tree's warning and sanitizer flags are for the host compiler: nvcc would reject them.
# Called in a folder with CUDA sources, before its CUDA targets: from there on C++ sources
# keep the flags and CUDA sources get none (their host warnings go through -Xcompiler).
# Targets created earlier in the folder keep their own copy of the flags.
function(hsring_cxx_only_tree_options)
  get_directory_property(tree_options COMPILE_OPTIONS)
  set(cxx_only "")
  foreach(option IN LISTS tree_options)
    list(APPEND cxx_only "$<$<COMPILE_LANGUAGE:CXX>:${option}>")
  endforeach()
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${cxx_only}")
endfunction()

# Hopper's warpgroup products (wgmma) exist for sm_90a only (arch-specific features; compute_90
# PTX has no wgmma), whatever CMAKE_CUDA_ARCHITECTURES says. Builds `sources` for sm_90a alone
# into `target`: its launchers ask at run time whether the GPU runs that image and take their
# mma.sync kernels where it does not.
function(hsring_add_sm90a_sources target)
  set(objects ${target}_sm90a)
  add_library(${objects} OBJECT ${ARGN})
  set_target_properties(${objects} PROPERTIES CUDA_ARCHITECTURES OFF)
  target_include_directories(${objects} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${objects} PRIVATE
    -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-Wall,-Wextra -lineinfo)
  target_link_libraries(${objects} PRIVATE CUDA::cudart_static)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:${objects}>)
endfunction()

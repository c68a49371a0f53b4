# Sanitizer builds for the whole tree: one build folder per sanitizer.
if(HSRING_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(HSRING_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT HSRING_SANITIZE STREQUAL "")
  message(FATAL_ERROR "HSRING_SANITIZE must be '', 'address' or 'thread', not '${HSRING_SANITIZE}'")
endif()
if(NOT HSRING_SANITIZE STREQUAL "")
  # -O1 as both sanitizers' manuals advise, and line tables only (-g1): reports still name
  # file and line, and the sanitizer builds compile in about half the time of -O2 -g
  # (measured on ring_bench.cc under ASan: 29 s against 53 s). Added after the build type's
  # flags, so these win.
  add_compile_options(-O1 -g1)
endif()

# REQUIRES: contracts (common/contract.h) are checked in every sanitizer build, and on
# request in any other (they are always checked where NDEBUG is unset).
option(HSRING_CHECK_CONTRACTS "Check REQUIRES: contracts (HSRING_REQUIRE) in this build" OFF)
if(HSRING_CHECK_CONTRACTS OR NOT HSRING_SANITIZE STREQUAL "")
  add_compile_definitions(HSRING_CHECK_CONTRACTS=1)
endif()

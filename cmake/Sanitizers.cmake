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

# REQUIRES: contracts (common/contract.h) are checked in every sanitizer build, and on
# request in any other (they are always checked where NDEBUG is unset).
option(HSRING_CHECK_CONTRACTS "Check REQUIRES: contracts (HSRING_REQUIRE) in this build" OFF)
if(HSRING_CHECK_CONTRACTS OR NOT HSRING_SANITIZE STREQUAL "")
  add_compile_definitions(HSRING_CHECK_CONTRACTS=1)
endif()

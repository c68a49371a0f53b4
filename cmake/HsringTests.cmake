# hsring_add_gtest: one GoogleTest program and its ctest registration, the way every test
# folder registers them. Tests are named "<PREFIX><Suite>.<Name>" (PREFIX is the folder and a
# dot, so `ctest -R '^shm\.'` runs tests/shm) and carry one LABEL.
#
#   hsring_add_gtest(<target> SOURCES <files...> [LIBS <libs...>] LABEL <label>
#                    TIMEOUT <seconds> [PREFIX <prefix>] [PROCESSORS <n>]
#                    [RUNS_WORKERS] [EXCLUSIVE] [SERIAL] [SKIPPABLE] [DISCOVER_AT_TEST])
#
#   RUNS_WORKERS      the tests start the hsring binaries: they are built first, found
#                     through HSRING_BIN_DIR, and tests are listed when ctest runs (not at
#                     build time, which would need the binaries' directory finished)
#   EXCLUSIVE         never at the same time as another EXCLUSIVE test (they kill processes,
#                     time backoffs or own the GPUs): RESOURCE_LOCK hsring_crash
#   SERIAL            never at the same time as any other test (RUN_SERIAL)
#   SKIPPABLE         a test that prints "[  SKIPPED ]" counts as skipped (no GPU, no venv)
#   DISCOVER_AT_TEST  list the tests when ctest runs (programs carried to another machine)
function(hsring_add_gtest target)
  cmake_parse_arguments(PARSE_ARGV 1 arg
    "RUNS_WORKERS;EXCLUSIVE;SERIAL;SKIPPABLE;DISCOVER_AT_TEST"
    "LABEL;TIMEOUT;PREFIX;PROCESSORS" "SOURCES;LIBS")
  if(NOT arg_SOURCES OR NOT arg_LABEL OR NOT arg_TIMEOUT)
    message(FATAL_ERROR "hsring_add_gtest(${target}): SOURCES, LABEL and TIMEOUT are required")
  endif()
  add_executable(${target} ${arg_SOURCES})
  target_link_libraries(${target} PRIVATE ${arg_LIBS} GTest::gtest_main)

  # One label per test: discovered tests' properties cannot carry a list.
  set(properties LABELS ${arg_LABEL} TIMEOUT ${arg_TIMEOUT} ENVIRONMENT "${HSRING_TEST_ENV}")
  set(discovery DISCOVERY_TIMEOUT 60)  # sanitizer builds start slowly
  if(arg_RUNS_WORKERS)
    add_dependencies(${target} hsring hsring-target hsring-drafter)
  endif()
  if(arg_RUNS_WORKERS OR arg_DISCOVER_AT_TEST)
    list(APPEND discovery DISCOVERY_MODE PRE_TEST)
  endif()
  if(arg_EXCLUSIVE)
    list(APPEND properties RESOURCE_LOCK hsring_crash)
  endif()
  if(arg_SERIAL)
    list(APPEND properties RUN_SERIAL TRUE)
  endif()
  if(arg_PROCESSORS)
    list(APPEND properties PROCESSORS ${arg_PROCESSORS})
  endif()
  if(arg_SKIPPABLE)
    list(APPEND properties SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endif()
  gtest_discover_tests(${target} TEST_PREFIX "${arg_PREFIX}" ${discovery} PROPERTIES ${properties})
endfunction()

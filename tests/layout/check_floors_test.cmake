# The floor check must catch what it is there for: plants includes into a copy of the tree's
# README.md and CMakeLists.txt (the real table and folder list) and expects check_floors.cmake
# to refuse each upward or sideways one, naming it, and to accept one that goes down.
#
#   cmake -DROOT=<source tree> -DWORK=<scratch folder> -P check_floors_test.cmake
cmake_minimum_required(VERSION 3.25)
set(check "${CMAKE_CURRENT_LIST_DIR}/check_floors.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/run_check.cmake")
set(failures 0)

# Runs the check on a tree holding only FILE with TEXT; EXPECT is "pass" or a regex that the
# refusal must match.
function(plant name file text expect)
  set(tree "${WORK}/${name}")
  file(REMOVE_RECURSE "${tree}")
  file(COPY "${ROOT}/README.md" "${ROOT}/CMakeLists.txt" DESTINATION "${tree}")
  file(WRITE "${tree}/include/hsring/hsring.h" "")
  file(WRITE "${tree}/${file}" "${text}")
  run_check("${check}" "${tree}" ${name} "${expect}" ok)
  if(NOT ok)
    set(failures 1 PARENT_SCOPE)
  endif()
endfunction()

plant(upward common/planted.cc "#include \"shm/ring.h\"\n"
      "common/planted.cc: #include \"shm/ring.h\" runs up a floor: common/ stands on floor 1, shm/ on floor 2")
plant(upward_header shm/planted.h "#pragma once\n#include <vector>\n  #  include \"launcher/run_options.h\"  // up\n"
      "shm/planted.h: #include \"launcher/run_options.h\" runs up a floor")
plant(relative common/planted.cc "#include \"../train/adamw.h\"\n"
      "common/planted.cc: #include \"../train/adamw.h\" runs up a floor")
plant(sideways shm/planted.cc "#include \"data/shard_format.h\"\n"
      "shm/planted.cc: #include \"data/shard_format.h\" runs up a floor: shm/ stands on floor 2, data/ on floor 2")
plant(c_api common/planted.cc "#include \"hsring/hsring.h\"\n" "common/ stands on floor 1, include/hsring/ on floor 8")
plant(downward launcher/planted.cc "#include \"shm/ring.h\"\n#include \"planted.h\"\n#include <fmt/format.h>\n" pass)
plant(own_room capi/planted.cc "#include \"hsring/hsring.h\"\n" pass)

# A folder the build adds without a row in the table.
plant(no_row common/planted.cc "#include <cstdint>\n" pass)
file(APPEND "${WORK}/no_row/CMakeLists.txt" "add_subdirectory(unlisted)\n")
run_check("${check}" "${WORK}/no_row" no_row "builds unlisted/, which has no row" ok)
if(NOT ok)
  set(failures 1)
endif()

if(failures)
  message(FATAL_ERROR "check_floors.cmake missed a planted include or folder")
endif()
message("floors: every planted upward or sideways include and unplaced folder is refused")
